"""Amounts of ADA as people type and read them, one way for operators and consumers alike.
A unit is always written out (`400ADA`, `1.5ada`, `2000000lovelace`): a bare number could be
either, off by a factor of a million."""

from __future__ import annotations

import re
from decimal import Decimal

ADA = 1_000_000  # lovelace: the one definition every package imports
AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ada|lovelace)\s*$", re.IGNORECASE)


def parse_lovelace(text: str) -> int:
    """Lovelace in `text`: a positive number of ADA (up to 6 decimals) or whole lovelace."""
    match = AMOUNT.match(text)
    if match is None:
        raise ValueError(
            f"expected an amount with its unit, like 400ADA, 1.5ADA or 2000000lovelace; "
            f"got {text!r}"
        )
    number, unit = Decimal(match[1]), match[2].lower()
    lovelace = number * ADA if unit == "ada" else number
    if lovelace != lovelace.to_integral_value():
        whole = "6 decimals of ADA" if unit == "ada" else "whole lovelace"
        raise ValueError(f"{text!r}: amounts are {whole} at most")
    if lovelace <= 0:
        raise ValueError(f"{text!r}: the amount must be positive")
    return int(lovelace)


def ada(lovelace: int) -> str:
    """`1234567` -> `1.234567 ADA`: exact, never a float."""
    sign = "-" if lovelace < 0 else ""
    whole, fraction = divmod(abs(lovelace), ADA)
    return f"{sign}{whole:,}.{fraction:06d} ADA"


def per_hour(lovelace_per_s: int) -> str:
    """A price as people compare them, in ADA per hour (the chain's unit is lovelace per
    second): `0.050400 ADA/h`."""
    return f"{ada(lovelace_per_s * 3600)}/h"
