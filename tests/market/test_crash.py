"""Crash safety: `unchained market serve` SIGKILLed between building, submitting and confirming a
settlement, and between receiving a receipt and storing it, on SQLite and PostgreSQL. After a
restart no receipt or job is lost, the stored state agrees with the chain, nothing is settled
twice, and the settled escrow shows its transaction."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from offchain.market.models import Job, JobState, Settlement, SettlementState
from offchain.market.settings import MarketSettings
from tests.market.flow import (
    Locked,
    deliver,
    leader_settings,
    provider_with_offer,
    quote_and_lock,
    send_receipt,
    stored,
    wait_for,
)
from tests.market.processes import MarketProcess


@contextmanager
def running(settings: MarketSettings, tmp_path) -> Iterator[MarketProcess]:
    market = MarketProcess(settings, tmp_path / "market.log").start()
    try:
        yield market
    finally:
        market.kill()


def assert_settled_once(devnet, settings: MarketSettings, deal: Locked, provider_address) -> None:
    """One settle transaction spent the escrow; the job shows it; it paid the provider."""
    (settlement,) = stored(settings, Settlement)
    assert settlement.state == SettlementState.CONFIRMED
    assert json.loads(settlement.escrows) == [deal.ref]
    (job,) = stored(settings, Job, Job.id == deal.job)
    assert job.state == JobState.SETTLED and job.settle_tx == settlement.tx_id
    context = devnet.context()
    assert context.utxo_by_tx_id(deal.lock.id.payload.hex(), 0) is None  # the escrow is spent
    payout = context.utxo_by_tx_id(settlement.tx_id, 0)  # ... by this transaction
    assert payout is not None and payout.output.address == provider_address


@pytest.mark.parametrize("point", ["settlement-built", "settlement-submitted"])
async def test_killed_while_settling_it_settles_once_after_restart(
    point, devnet, market_deployment, settings, tmp_path
):
    made, _ = await leader_settings(settings, devnet, tmp_path, settle_every_ms=2000)
    with running(made.model_copy(update={"crash_at": point}), tmp_path) as market:
        async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, made.identity)
            deal = await quote_and_lock(devnet, market_deployment, http, made.identity)
            await wait_for(deal.consumer, deal.job, "funded")
            await deliver(provider, market_deployment, deal)
        assert market.wait_dead() == -9  # it killed itself at `point`
    (settlement,) = stored(made, Settlement)
    assert settlement.state == SettlementState.BUILT  # recorded before its first submission
    (job,) = stored(made, Job, Job.id == deal.job)
    assert job.state == JobState.SETTLING and job.settle_tx == settlement.tx_id

    with running(made, tmp_path) as market:
        async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
            deal.consumer.http = http
            settled = await wait_for(deal.consumer, deal.job, "settled")
    assert settled["settle_tx"] == settlement.tx_id  # the same transaction, never a second
    assert_settled_once(devnet, made, deal, provider.wallet.address)


async def test_killed_between_receiving_and_storing_a_receipt_loses_nothing(
    devnet, market_deployment, settings, tmp_path
):
    made, _ = await leader_settings(settings, devnet, tmp_path)
    with running(made.model_copy(update={"crash_at": "receipt-received"}), tmp_path) as market:
        async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, made.identity)
            deal = await quote_and_lock(devnet, market_deployment, http, made.identity)
            await wait_for(deal.consumer, deal.job, "funded")
            with pytest.raises(httpx.TransportError):  # the market died holding the receipt
                await deliver(provider, market_deployment, deal)
        assert market.wait_dead() == -9
    (job,) = stored(made, Job, Job.id == deal.job)
    assert job.state == JobState.RUNNING and job.receipt_signature is None  # never stored

    with running(made, tmp_path) as market:
        async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
            deal.consumer.http = provider.http = http
            handed_in = await send_receipt(provider, market_deployment, deal)  # the provider
            assert handed_in.status_code == 200, handed_in.text  # kept it: it hands it in again
            await wait_for(deal.consumer, deal.job, "settled")
    assert_settled_once(devnet, made, deal, provider.wallet.address)
