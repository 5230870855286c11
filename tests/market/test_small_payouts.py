"""Small payouts never cost the settler its own money: the worst top-up over every receipt is
exact, a quote's fee allowance pays it (so no job is refused for being cheap), and an escrow
whose allowance falls short, locked anyway, is left to its parties, the market's wallet
unchanged to the lovelace. On the session's devnet, over real HTTP, on SQLite and PostgreSQL
(the probe's collusion: 1 lovelace per second, a receipt for half the units)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pycardano import TransactionId, TransactionInput

from offchain.chain.submit import submit_and_wait
from offchain.market.models import Job
from offchain.market.services import acceptance, quote_terms
from offchain.protocol import escrow as escrows
from offchain.protocol.amounts import ada
from offchain.protocol.split import lock_amount, settle_split, settle_topup, worst_settle_topup
from offchain.protocol.txbuild import payout
from offchain.protocol.types import PayoutKind
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
from tests.market.test_lifecycle import PRICE, SPEC, job_request, offer_terms
from tests.protocol.onchain import balance, to_settle, wallet

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


def dust_topups(devnet, deployment, provider: Party, consumer: Party, price: int, share: int):
    """The most a settle of a `price` job may add to its payouts, over every unit count: each
    payout's minimum for its real output (address and tag)."""
    ref = TransactionInput(TransactionId(bytes(32)), escrows.ESCROW_OUTPUT)
    least = [payout(devnet.context(), party.wallet.address, 0, PayoutKind.SETTLE, ref).amount.coin
             for party in (provider, consumer)]  # fmt: skip
    units = SPEC["max_duration_s"]
    return worst_settle_topup(lock_amount(price, units, share), price, units, share, *least)


async def test_a_quotes_allowance_is_its_settle_share_and_its_dust(
    devnet, market_deployment, http, settings
):
    """No job is refused for being cheap: the allowance is the settle fee's share plus the
    most its payouts may need raised to the ledger's minimum, and the quote says so."""
    provider = Party.new(http, settings.identity, await wallet(devnet))
    consumer = Party.new(http, settings.identity, await wallet(devnet))
    share = settings.settle_fee_share
    for price in (DUST_PRICE, PRICE):  # a payout always below the minimum, one above it
        terms = offer_terms(provider, price_per_unit=price)
        offered = await provider.send("POST", "/offers", terms)
        assert offered.status_code == 201, offered.text
        quoted = await consumer.send("POST", "/jobs", job_request(consumer))
        assert quoted.status_code == 201, quoted.text
        quote = quoted.json()
        topups = dust_topups(devnet, market_deployment, provider, consumer, price, share)
        assert topups > 0  # a receipt one unit short of the whole leaves the renter dust
        assert quote["payout_topups"] == topups and quote["settle_fee_share"] == share
        assert quote["fee_allowance"] == share + topups
        assert quote["lock_lovelace"] == lock_amount(price, SPEC["max_duration_s"], share + topups)
        assert quote["fee_allowance_note"].startswith(
            f"the fee allowance of {ada(share + topups)} is not refunded: {ada(share)} pays "
            "this job's share of the settle transaction's fee"
        ), quote["fee_allowance_note"]
        params = (await consumer.send("GET", f"/jobs/{quote['job_id']}/escrow")).json()
        assert params["fee_allowance"] == share + topups
        assert params["lovelace"] == quote["lock_lovelace"]


@pytest.fixture
def quoted_before_this_fix(monkeypatch) -> None:
    """The market quotes an allowance of the settle share alone, as a market of fixed
    allowances did, without the acceptance check that now refuses such a quote: the dust
    escrow the probe locked is then a job like any other, on chain exactly as quoted, its
    allowance short of its top-ups."""

    def share_only(chain, settings, job) -> None:
        job.fee_allowance = settings.settle_fee_share
        job.lock_lovelace = lock_amount(job.price_per_unit, job.max_units, job.fee_allowance)

    monkeypatch.setattr(quote_terms, "fit_allowance", share_only)
    monkeypatch.setattr(acceptance, "refuse", lambda *_args: None)


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
            signed = to_settle(
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
