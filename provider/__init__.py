"""The provider: its daemon and commands, and the parts they run (gateway, rentals, sandbox,
metering, GPUs, money, images, self-test)."""
