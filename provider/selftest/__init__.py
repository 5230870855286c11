"""`unchained provider selftest`: what an operator runs before offering a machine."""
