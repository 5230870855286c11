"""The wire between parties off chain: the market's HTTP client, signed requests, public answers,
control requests, rental reports.
"""
