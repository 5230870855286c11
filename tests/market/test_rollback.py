"""On a devnet of the test's own: forced rollbacks reflected in job state (funded -> quoted when
the lock leaves the chain, settled -> settling when the settle transaction does, and forward
again when the lock lands again or the batcher resubmits), and the deadline watch under time
travel (a job not delivered fails at its deadline; after the window, refund and slash are
announced)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from offchain.chain.ogmios import request
from offchain.chain.submit import submit_and_wait
from offchain.market.models import Cause, JobEvent, Settlement, SettlementState
from offchain.market.settings import MarketSettings
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.deployment import Deployment
from tests.market.client import serve
from tests.market.conftest import IDENTITY
from tests.market.flow import (
    accept,
    deliver,
    leader_settings,
    provider_with_offer,
    quote_and_lock,
    stored,
    timeline,
    wait_for,
)
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS, deployed
from tests.protocol.onchain import travel_to


@pytest.fixture
async def own_market(
    own_devnet, tmp_path
) -> AsyncIterator[tuple[MarketSettings, httpx.AsyncClient, Deployment]]:
    deployment = await deployed(own_devnet, NOTICE_MS, SLASH_SHARE_BPS)
    deployment_file.save(deployment, tmp_path / "deployment.json")
    base = MarketSettings(
        data_dir=tmp_path / "market", ogmios_url=own_devnet.url,
        deployment=tmp_path / "deployment.json", identity=IDENTITY,
    )  # fmt: skip
    settings, _ = await leader_settings(base, own_devnet, tmp_path)
    with serve(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            yield settings, http, deployment


async def rollback_past(devnet, height: int) -> None:
    """Roll the chain back until the block at `height` is gone (blocks keep coming)."""
    while True:
        tip = await request(devnet.url, "queryNetwork/blockHeight")
        back = await request(devnet.url, "devnet/rollback", {"blocks": tip - height + 1})
        if back["tip"]["height"] < height:
            return


async def until_events(
    settings: MarketSettings, job: str, check: Callable[[list[JobEvent]], bool]
) -> list[JobEvent]:
    for _ in range(300):
        events = timeline(settings, job)
        if check(events):
            return events
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job}: {[e.to_state for e in events]}")


async def test_rollbacks_revert_funding_and_settlement_and_both_come_back(own_devnet, own_market):
    settings, http, deployment = own_market
    provider = await provider_with_offer(own_devnet, http, settings.identity)
    deal = await quote_and_lock(own_devnet, deployment, http, settings.identity)
    await wait_for(deal.consumer, deal.job, "funded")

    await rollback_past(own_devnet, deal.block["height"])
    await wait_for(deal.consumer, deal.job, "quoted")
    deal.block = await submit_and_wait(own_devnet.url, deal.lock, timeout_s=30)  # lands again
    await wait_for(deal.consumer, deal.job, "funded")

    await deliver(provider, deployment, deal)
    settled = await wait_for(deal.consumer, deal.job, "settled")
    await rollback_past(own_devnet, timeline(settings, deal.job)[-1].block_height)
    events = await until_events(
        settings, deal.job, lambda es: [e.to_state for e in es].count("settled") == 2
    )
    assert (await wait_for(deal.consumer, deal.job, "settled"))["settle_tx"] == settled["settle_tx"]

    assert [e.to_state for e in events] == [
        "requested", "quoted", "funded", "quoted", "funded", "accepted", "running", "completed",
        "settling", "settled", "settling", "settled",
    ]  # fmt: skip
    rolled_back = [events[3], events[10]]
    assert all(e.cause == Cause.CHAIN and "rolled back" in e.detail for e in rolled_back)
    assert events[-1].tx_id == settled["settle_tx"] and events[-1].cause == Cause.CHAIN
    (settlement,) = stored(settings, Settlement)  # resubmitted, never rebuilt
    assert settlement.state == SettlementState.CONFIRMED
    assert settlement.tx_id == settled["settle_tx"]


async def test_the_deadline_watch_fails_late_jobs_and_announces_refund_and_slash(
    own_devnet, own_market
):
    settings, http, deployment = own_market
    provider = await provider_with_offer(own_devnet, http, settings.identity)
    deal = await quote_and_lock(own_devnet, deployment, http, settings.identity)
    await wait_for(deal.consumer, deal.job, "funded")
    await accept(provider, deployment, deal)
    status = await wait_for(deal.consumer, deal.job, "running")

    await travel_to(own_devnet, status["deadline_ms"] + 1)
    failed = await wait_for(deal.consumer, deal.job, "failed")
    assert failed["failure_reason"] == "the deadline passed without a receipt"
    await travel_to(own_devnet, status["deadline_ms"] + settings.settle_window_ms + 1)
    events = await until_events(settings, deal.job, lambda es: "possible" in es[-1].detail)
    notice = events[-1]
    assert notice.cause == Cause.SCHEDULER and notice.to_state == "failed"
    assert "a refund and a slash of the provider's bond is possible" in notice.detail
    assert "by the consumer alone until" in notice.detail  # its refund window
