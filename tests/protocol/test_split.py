"""The settle split and slash share for any numbers: nothing is created or lost, and nobody
gets less than the protocol owes them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offchain.protocol.ledger.split import (
    BPS,
    lock_amount,
    refund_amount,
    settle_split,
    slash_share,
)

MAX_LOVELACE = 45_000_000_000_000_000  # all ADA there is
prices = st.integers(0, 10**9)
units = st.integers(0, 10**7)
allowances = st.integers(0, 10**8)
deposits = st.integers(0, 10**7)


@st.composite
def escrows(draw):
    """An escrow funded at least for its longest job and its refund's return deposit, and a
    receipt within its units."""
    price, max_units, allowance, deposit = (
        draw(prices),
        draw(units),
        draw(allowances),
        draw(deposits),
    )
    locked = lock_amount(price, max_units, allowance, deposit) + draw(st.integers(0, 10**10))
    return locked, price, draw(st.integers(0, max_units)), max_units, allowance, deposit


@given(escrows())
def test_settle_split_conserves_and_pays_everyone_what_is_owed(escrow):
    locked, price, used, max_units, allowance, deposit = escrow
    split = settle_split(locked, price, used, max_units, allowance)
    assert split.total == locked
    assert split.provider == price * used
    assert split.consumer >= locked - price * used - allowance
    assert 0 <= split.fee <= allowance
    assert split.consumer >= deposit  # the refund holds the deposit at any unit count


@given(st.integers(0, MAX_LOVELACE), prices, units, units, allowances)
def test_any_settle_either_conserves_or_is_refused(locked, price, used, max_units, allowance):
    """Underfunded escrows and receipts over max units raise; nothing is ever paid twice."""
    try:
        split = settle_split(locked, price, used, max_units, allowance)
    except ValueError:
        assert used > max_units or price * used > locked
        return
    assert split.total == locked and min(split.provider, split.consumer, split.fee) >= 0


@given(st.integers(0, MAX_LOVELACE), st.integers(0, BPS))
def test_slash_share_rounds_down_and_leaves_the_rest_in_the_bond(bond, bps):
    share = slash_share(bond, bps)
    assert 0 <= share <= bond
    assert share * BPS <= bond * bps < (share + 1) * BPS


@given(st.integers(0, MAX_LOVELACE), allowances)
def test_refund_returns_everything_but_the_allowance(locked, allowance):
    owed = refund_amount(locked, allowance)
    assert owed == max(0, locked - allowance)
    assert locked - owed <= allowance


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match=r"units must be within 0\.\.10"):
        settle_split(10**9, 1, 11, 10, 0)
    with pytest.raises(ValueError, match="holds 5 lovelace but 10 are due"):
        settle_split(5, 1, 10, 10, 0)
    with pytest.raises(ValueError, match="must not be negative"):
        settle_split(10, -1, 1, 10, 0)
    with pytest.raises(ValueError, match="basis points"):
        slash_share(10, BPS + 1)
