"""Small payouts never cost the settler its own money: the worst top-up over every receipt is
exact, a quote that could need a subsidy is refused up front in the renter's terms, and an
escrow of that kind locked anyway is left to its parties, the market's wallet unchanged to the
lovelace. On the session's devnet, over real HTTP, on SQLite and PostgreSQL (the probe's
collusion: 1 lovelace per second, a receipt for half the units)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from offchain.chain.submit import submit_and_wait
from offchain.market.models import Job
from offchain.market.services import quote_terms
from offchain.protocol import escrow as escrows
from offchain.protocol.split import lock_amount, settle_split, settle_topup, worst_settle_topup
from tests.market.client import Party, serve
from tests.market.flow import (
    accept,
    leader_settings,
    lock,
    send_receipt,
    stored,
    timeline,
    wait_for,
)
from tests.market.test_lifecycle import SPEC, job_request, offer_terms
from tests.protocol.onchain import balance, wallet

DUST_PRICE = 1  # lovelace per second
HALF = SPEC["max_duration_s"] // 2


@given(
    price=st.integers(0, 3_000), max_units=st.integers(0, 400), allowance=st.integers(0, 10**6),
    extra=st.integers(0, 10**6), provider_min=st.integers(0, 10**6),
    consumer_min=st.integers(0, 10**6),
)  # fmt: skip
def test_the_worst_top_up_is_the_most_over_every_unit_count(
    price, max_units, allowance, extra, provider_min, consumer_min
):
    locked = lock_amount(price, max_units, allowance) + extra
    splits = (settle_split(locked, price, n, max_units, allowance) for n in range(max_units + 1))
    every = max(settle_topup(split, provider_min, consumer_min) for split in splits)
    worst = worst_settle_topup(locked, price, max_units, allowance, provider_min, consumer_min)
    assert worst == every


def jobs_stored(settings) -> int:
    return len(stored(settings, Job))


async def test_a_quote_that_could_need_a_subsidy_is_refused(devnet, http, settings):
    provider = Party.new(http, settings.identity, await wallet(devnet))
    offered = await provider.send("POST", "/offers", offer_terms(provider, price_per_unit=1))
    assert offered.status_code == 201, offered.text
    consumer = Party.new(http, settings.identity, await wallet(devnet))
    refused = await consumer.send("POST", "/jobs", job_request(consumer))
    assert refused.status_code == 409, refused.text
    (problem,) = refused.json()["detail"]
    assert problem["loc"][-1] == "spec"
    assert problem["msg"].startswith(
        f"at 1 lovelace per second for up to {SPEC['max_duration_s']} s, a settlement can owe "
        "you or the provider less than the ledger's minimum output"
    ), problem
    assert jobs_stored(settings) == 0
    # the same provider at a price whose payouts always meet the minimum is quoted
    repriced = await provider.send("POST", "/offers", offer_terms(provider))
    assert repriced.status_code == 201, repriced.text
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text


@pytest.fixture
def quoted_before_this_fix(monkeypatch) -> None:
    """The market quotes without the subsidy check, as it did before: the dust escrow the
    probe locked is then a job like any other, on chain exactly as quoted."""
    monkeypatch.setattr(quote_terms, "refuse_subsidy", lambda *_: None)


async def test_a_dust_escrow_is_not_settled_at_the_markets_expense(
    devnet, market_deployment, settings, tmp_path, quoted_before_this_fix
):
    made, market = await leader_settings(settings, devnet, tmp_path)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = Party.new(http, made.identity, await wallet(devnet))
            offer = offer_terms(provider, price_per_unit=DUST_PRICE)
            assert (await provider.send("POST", "/offers", offer)).status_code == 201
            consumer = Party.new(http, made.identity, await wallet(devnet))
            quoted = await consumer.send("POST", "/jobs", job_request(consumer))
            assert quoted.status_code == 201, quoted.text
            deal = await lock(devnet, market_deployment, consumer, quoted.json()["job_id"])
            await wait_for(consumer, deal.job, "funded")
            await accept(provider, market_deployment, deal)
            before = balance(devnet, market.address)
            receipt = await send_receipt(provider, market_deployment, deal, HALF)
            assert receipt.status_code == 200, receipt.text

            await until_left(made, deal.job)
            await asyncio.sleep(2)  # several more batcher rounds
            assert (await wait_for(consumer, deal.job, "completed"))["settle_tx"] is None
            assert balance(devnet, market.address) == before  # to the lovelace

            # its provider may still settle it itself, paying the top-ups from its own wallet
            signed = escrows.signed_receipt(
                market_deployment, provider.wallet.key, deal.escrow, HALF,
                *(bytes.fromhex(h) for h in stored_hashes(made, deal.job)),
            )  # fmt: skip
            tx = escrows.settle(
                devnet.context(), market_deployment, [signed], provider.wallet.address
            )
            await submit_and_wait(devnet.url, provider.wallet.sign(tx), timeout_s=30)
            await wait_for(consumer, deal.job, "settled")
    assert balance(devnet, market.address) == before


def stored_hashes(settings, job_id: str) -> tuple[str, str]:
    (job,) = stored(settings, Job, Job.id == job_id)
    return job.receipt_result_hash, job.receipt_evidence_hash


async def until_left(settings, job_id: str, timeout_s: float = 30) -> None:
    """Until the batcher has said, in the job's timeline, why it leaves it to the parties."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while True:
        left = [e for e in timeline(settings, job_id) if e.detail.startswith("not settled")]
        if left:
            (event,) = left
            assert "the ledger's minimum UTxO" in event.detail, event.detail
            return
        assert loop.time() < until, "the batcher never said why it leaves the job"
        await asyncio.sleep(0.2)
