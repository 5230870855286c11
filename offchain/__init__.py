"""Everything off-chain that talks to the chain."""
