"""Unsigned transaction builders for every protocol action, the one reader of transactions, and the
protocol's scripts on one chain.
"""
