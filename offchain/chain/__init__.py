"""Ogmios v6 access helpers: chain context, submit-and-wait, chain-sync follower."""
