"""Provider daemon: inventory, runner, metering, receipts, bond."""
