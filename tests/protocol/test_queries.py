"""Builders depend on pycardano's ChainContext plus `ChainQueries`, not on Ogmios: a context
answering from elsewhere works, one that cannot answer is refused in words."""

from __future__ import annotations

import pytest
from pycardano import ChainContext

from offchain.chain.context import ChainQueries, chain_context, queries
from offchain.chain.time import ChainTime, Era
from offchain.protocol.tx.txbuild import Clock

SLOT_MS = 1_000


class Fixed(ChainContext):
    """A context answering from fixed figures (what a cache or a test would hand builders)."""

    def __init__(self, tip_slot: int) -> None:
        self.tip_slot = tip_slot

    @property
    def last_block_slot(self) -> int:
        return self.tip_slot

    def chain_time(self) -> ChainTime:
        return ChainTime(1_000_000, (Era(0, 0, None, SLOT_MS),))

    def utxo_by_tx_id(self, tx_id: str, index: int) -> None:
        return None

    def script_reward_balance(self, script) -> int | None:
        return None


def test_the_clock_reads_any_context_that_answers_the_queries():
    clock = Clock.now(Fixed(42))
    assert (clock.tip_slot, clock.tip_ms) == (42, 1_000_000 + 42 * SLOT_MS)


def test_a_context_without_the_queries_is_refused_by_name():
    with pytest.raises(TypeError, match="ChainContext answers no chain time"):
        Clock.now(ChainContext())


def test_the_ogmios_context_answers_them():
    context = chain_context("ws://127.0.0.1:1")  # nothing is asked until a query is made
    assert isinstance(context, ChainQueries) and queries(context) is context
