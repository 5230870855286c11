"""A local Cardano ledger that speaks Ogmios v6: the embedded default chain."""
