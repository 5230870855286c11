"""Two `unchained market serve` processes on one database (PostgreSQL: advisory lock; SQLite:
flock): exactly one leads; SIGKILL it and the other takes over within seconds, with nothing
lost: a job funded and completed under the old leader and one locked after it died both
settle under the new one."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from offchain.market.models import Settlement, SettlementState
from tests.market.flow import (
    deliver,
    leader_settings,
    provider_with_offer,
    quote_and_lock,
    stored,
    wait_for,
)
from tests.market.processes import MarketProcess

TAKEOVER_S = 10
NEVER_LANDED = (SettlementState.REFUSED, SettlementState.EXPIRED)


async def leaders(processes: list[MarketProcess]) -> list[MarketProcess]:
    """The processes that say they lead, once exactly one does."""
    for _ in range(100):
        leading = [p for p in processes if (p.health() or {}).get("leader")]
        if len(leading) == 1:
            return leading
        await asyncio.sleep(0.1)
    raise AssertionError(f"{len(leading)} leaders")


async def test_the_leader_killed_the_other_takes_over_and_nothing_is_lost(
    devnet, market_deployment, settings, tmp_path
):
    made, _ = await leader_settings(settings, devnet, tmp_path)
    pair = [MarketProcess(made, tmp_path / f"market{n}.log").start() for n in range(2)]
    try:
        (leader,) = await leaders(pair)
        (survivor,) = [p for p in pair if p is not leader]
        async with httpx.AsyncClient(base_url=survivor.url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, made.identity)
            first = await quote_and_lock(devnet, market_deployment, http, made.identity)
            await wait_for(first.consumer, first.job, "funded")
            await deliver(provider, market_deployment, first)

            leader.kill()
            killed_at = time.monotonic()
            assert await leaders([survivor]) == [survivor]
            assert time.monotonic() - killed_at < TAKEOVER_S

            second = await quote_and_lock(devnet, market_deployment, http, made.identity)
            await wait_for(second.consumer, second.job, "funded")
            await deliver(provider, market_deployment, second)
            settle_txs = {}
            for deal in (first, second):
                settled = await wait_for(deal.consumer, deal.job, "settled")
                settle_txs[deal.ref] = settled["settle_tx"]
    finally:
        for process in pair:
            process.kill()
    rows = stored(made, Settlement)
    shown = [(s.tx_id[:16], s.state, s.escrows) for s in rows]
    for ref, settle_tx in settle_txs.items():
        holding = [s for s in rows if ref in json.loads(s.escrows)]
        # One transaction that could land per escrow: the one the job shows. Another holding it
        # is allowed only if the ledger refused it or it expired, so it never could land.
        live = [s for s in holding if s.state not in NEVER_LANDED]
        assert [s.tx_id for s in live] == [settle_tx], shown
    assert all(s.state != SettlementState.CONFLICTED for s in rows), shown
