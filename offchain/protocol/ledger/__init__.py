"""The protocol's data as the chain holds and checks it: datums, redeemers, signed payloads,
addresses, splits, amounts.
"""
