"""Rentals: endpoints and pods a renter runs on this provider, paid over a channel, and the book
that holds them.
"""
