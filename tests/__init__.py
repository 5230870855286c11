"""Unchained tests."""
