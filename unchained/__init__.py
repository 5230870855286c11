"""Unchained: a GPU compute marketplace settled on Cardano."""
