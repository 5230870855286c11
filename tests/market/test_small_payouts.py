"""Small payouts never cost anyone a top-up: a quote locks the job, the settle fee's share and
a return deposit that always comes back (so a renter's refund always reaches the ledger's
minimum UTxO), a cheap job is taken like any other, the market settles what it can and leaves
a receipt whose provider payout is below the minimum to its provider (who settles it itself,
its own change raising its own output), and the market never pays more than the allowances of
what it settles. Balances to the lovelace, on the session's devnet, over real HTTP, on SQLite
and PostgreSQL."""

from __future__ import annotations

import asyncio

import httpx
from pycardano import Transaction

from offchain.chain.submit import submit_and_wait
from offchain.market.models import Job, Settlement
from offchain.protocol.api.wire import EscrowParameters
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.tx import batch
from offchain.protocol.tx import escrow as escrows
from tests.market.client import Party, serve
from tests.market.flow import (
    Locked,
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

DUST_PRICE = 1  # lovelace per second: any receipt pays less than a min-UTxO
HALF = SPEC["max_duration_s"] // 2
UNITS = SPEC["max_duration_s"]


async def test_a_quote_locks_the_job_its_fee_share_and_a_return_deposit(
    devnet, market_deployment, http, settings
):
    """No job is refused or topped up for being cheap: the allowance is the settle fee's share
    alone, and the lock adds a return deposit, at least the ledger's minimum for the renter's
    refund (a cheap job's lock raised to the escrow output's own minimum), and the quote
    says so."""
    context = devnet.context()
    provider = Party.new(http, settings.identity, await wallet(devnet))
    consumer = Party.new(http, settings.identity, await wallet(devnet))
    share = settings.settle_fee_share
    refund_least = batch.payout_minimum(context, consumer.wallet.address)
    for price in (DUST_PRICE, PRICE):
        terms = offer_terms(provider, price_per_unit=price)
        offered = await provider.send("POST", "/offers", terms)
        assert offered.status_code == 201, offered.text
        quoted = await consumer.send("POST", "/jobs", job_request(consumer))
        assert quoted.status_code == 201, quoted.text
        quote = quoted.json()
        params = (await consumer.send("GET", f"/jobs/{quote['job_id']}/escrow")).json()
        datum = EscrowParameters.model_validate(params).to_datum()
        escrow_least = escrows.escrow_output(context, market_deployment, datum, 0).amount.coin
        locked = max(price * UNITS + share + refund_least, escrow_least)
        assert "payout_topups" not in quote
        assert quote["fee_allowance"] == quote["settle_fee_share"] == share
        assert params["fee_allowance"] == share
        assert quote["lock_lovelace"] == params["lovelace"] == locked
        assert quote["refund_deposit"] == locked - price * UNITS - share >= refund_least
        assert quote["fee_allowance_note"] == (
            f"the fee allowance of {ada(share)} is not refunded: it pays this job's share of the "
            f"settle transaction's fee, and the settler keeps what is left; the return deposit "
            f"of {ada(quote['refund_deposit'])} (the ledger's minimum for your refund output) "
            "always comes back with your refund, so no settlement ever needs a top-up"
        )


async def dealt(devnet, deployment, http: httpx.AsyncClient, identity: str, price: int):
    """A provider offering at `price` and a new consumer's job on it, locked, funded and
    accepted: the cheapest offer takes a quote, so each deal is made before a cheaper one."""
    provider = Party.new(http, identity, await wallet(devnet))
    offered = await provider.send("POST", "/offers", offer_terms(provider, price_per_unit=price))
    assert offered.status_code == 201, offered.text
    consumer = Party.new(http, identity, await wallet(devnet))
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    deal = await lock(devnet, deployment, consumer, quoted.json()["job_id"])
    await wait_for(consumer, deal.job, "funded")
    await accept(provider, deployment, deal)
    return provider, deal


def fee_of(settings, tx_id: str) -> int:
    (row,) = stored(settings, Settlement, Settlement.tx_id == tx_id)
    return Transaction.from_cbor(bytes.fromhex(row.tx_cbor)).transaction_body.fee


async def test_a_cheap_job_is_taken_and_its_provider_settles_it_with_no_top_up(
    devnet, market_deployment, settings, tmp_path
):
    made, market = await leader_settings(settings, devnet, tmp_path)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            dear_provider, dear = await dealt(devnet, market_deployment, http, made.identity,
                                              PRICE)  # fmt: skip
            provider, cheap = await dealt(devnet, market_deployment, http, made.identity,
                                          DUST_PRICE)  # fmt: skip
            spent = balance(devnet, cheap.consumer.wallet.address)
            before = balance(devnet, market.address)
            for party, deal in ((provider, cheap), (dear_provider, dear)):
                receipt = await send_receipt(party, market_deployment, deal, HALF)
                assert receipt.status_code == 200, receipt.text

            # the market settles the dear job, paying no more than its allowance; the cheap
            # one's provider earns HALF lovelace, below the minimum: it waits, said once
            settled = await wait_for(dear.consumer, dear.job, "settled")
            fee = fee_of(made, settled["settle_tx"])
            assert balance(devnet, market.address) - before == dear.fee_allowance - fee
            await until_waiting(made, cheap.job)
            await asyncio.sleep(2)  # several more batcher rounds
            status = await wait_for(cheap.consumer, cheap.job, "completed")
            assert status["settle_tx"] is None
            waits = [e for e in timeline(made, cheap.job) if e.detail.startswith("waits for")]
            assert len(waits) == 1, waits
            (job,) = stored(made, Job, Job.id == cheap.job)
            assert job.unsettleable is None  # pending, not dropped
            assert balance(devnet, market.address) - before == dear.fee_allowance - fee

            # its provider settles it: its own change raises its own output, nobody tops up
            earned = await settle_as_provider(devnet, market_deployment, made, provider, cheap)
            await wait_for(cheap.consumer, cheap.job, "settled")
    locked = cheap.escrow.output.amount.coin
    refund = locked - DUST_PRICE * HALF - cheap.fee_allowance
    assert refund >= batch.payout_minimum(devnet.context(), cheap.consumer.wallet.address)
    assert balance(devnet, cheap.consumer.wallet.address) == spent + refund
    assert earned == DUST_PRICE * HALF + cheap.fee_allowance  # its pay, and the allowance's rest
    assert balance(devnet, market.address) - before == dear.fee_allowance - fee


async def settle_as_provider(devnet, deployment, settings, provider: Party, deal: Locked) -> int:
    """The provider settles the market's stored receipt itself; what its wallet gained (its
    payout and change, less the fee it paid)."""
    (job,) = stored(settings, Job, Job.id == deal.job)
    signed = to_settle(
        deployment, provider.wallet.key, deal.escrow, HALF,
        bytes.fromhex(job.receipt_result_hash), bytes.fromhex(job.receipt_evidence_hash),
    )  # fmt: skip
    address = provider.wallet.address
    before = balance(devnet, address)
    tx = batch.settle(devnet.context(), deployment, [signed], address)
    payout = tx.transaction_body.outputs[0]
    assert payout.address == address and payout.amount.coin > DUST_PRICE * HALF  # raised
    await submit_and_wait(devnet.url, provider.wallet.sign(tx), timeout_s=30)
    return balance(devnet, address) - before + tx.transaction_body.fee


async def test_the_market_pays_no_more_than_the_allowances(
    devnet, market_deployment, settings, tmp_path
):
    """A quote whose allowance cannot pay a settle alone (a fee share set too low): the built
    transaction would take the market's own lovelace, so it is not sent and the job is left
    to its parties, the market's wallet unchanged to the lovelace."""
    made, market = await leader_settings(settings, devnet, tmp_path, settle_fee_share=1_000)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider, deal = await dealt(devnet, market_deployment, http, made.identity, PRICE)
            before = balance(devnet, market.address)
            receipt = await send_receipt(provider, market_deployment, deal, HALF)
            assert receipt.status_code == 200, receipt.text
            await until_timeline(made, deal.job, "not settled by the market: ")
            assert (await wait_for(deal.consumer, deal.job, "completed"))["settle_tx"] is None
    (left,) = [e.detail for e in timeline(made, deal.job) if e.detail.startswith("not settled")]
    assert "lovelace more than its escrows' fee allowances" in left, left
    assert balance(devnet, market.address) == before


async def until_waiting(settings, job_id: str) -> None:
    await until_timeline(settings, job_id, "waits for its provider: its provider earns ")


async def until_timeline(settings, job_id: str, start: str, timeout_s: float = 30) -> None:
    """Until the job's timeline holds an event whose detail starts with `start`."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while not any(e.detail.startswith(start) for e in timeline(settings, job_id)):
        assert loop.time() < until, f"no {start!r} in job {job_id}'s timeline"
        await asyncio.sleep(0.2)
