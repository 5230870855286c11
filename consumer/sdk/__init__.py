"""The renter's SDK: keys, signed requests, quotes, escrow locks, channels, endpoint client, local
records.
"""
