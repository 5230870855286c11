"""Who gets what from an escrow or a bond: pure integer functions, shared by builders and tests.

The validators only check lower bounds (each party gets at least what it is owed); these
functions are the honest split the builders pay out, so the numbers agree everywhere.
"""

from __future__ import annotations

import dataclasses

BPS = 10_000  # basis points in one whole


@dataclasses.dataclass(frozen=True)
class SettleSplit:
    provider: int  # price_per_unit * units, exactly what the receipt earns
    consumer: int  # locked - provider - fee_allowance, never negative
    fee: int  # the rest (at most the allowance): pays the transaction fee

    @property
    def total(self) -> int:
        return self.provider + self.consumer + self.fee


def settle_split(
    locked: int, price_per_unit: int, units: int, max_units: int, fee_allowance: int
) -> SettleSplit:
    """Split `locked` lovelace for a receipt of `units`; raises if the escrow cannot pay it."""
    if price_per_unit < 0 or fee_allowance < 0:
        raise ValueError("price and fee allowance must not be negative")
    if not 0 <= units <= max_units:
        raise ValueError(f"units must be within 0..{max_units}, got {units}")
    due = price_per_unit * units
    if due > locked:
        raise ValueError(f"the escrow holds {locked} lovelace but {due} are due to the provider")
    consumer = max(0, locked - due - fee_allowance)
    return SettleSplit(due, consumer, locked - due - consumer)


def refund_amount(locked: int, fee_allowance: int) -> int:
    """What a refund or cancel owes the consumer (the allowance pays the fee)."""
    return max(0, locked - fee_allowance)


def lock_amount(price_per_unit: int, max_units: int, fee_allowance: int, deposit: int) -> int:
    """The least an escrow must hold to pay a full-length job, its settle fee and the return
    `deposit` (its refund output's minimum, refunded at any unit count)."""
    return price_per_unit * max_units + fee_allowance + deposit


def slash_share(bond_lovelace: int, slash_share_bps: int) -> int:
    """The consumer's share of a slashed bond, rounded down as the bond validator does."""
    if not 0 <= slash_share_bps <= BPS:
        raise ValueError(f"slash share must be within 0..{BPS} basis points")
    return bond_lovelace * slash_share_bps // BPS
