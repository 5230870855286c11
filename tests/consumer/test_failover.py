"""Issue 36 on the devnet with the real market and a scripted provider: a renter that asks for
a start deadline gets its money back right after it when its provider stays silent (balances
to the lovelace, long before the close), and the market follows a provider's Start to the
started escrow, which the job's receipt names and its settlement spends."""

from __future__ import annotations

import asyncio

import pytest

from consumer.sdk.errors import NotRefundableYet
from offchain.chain.utxo import format_out_ref, parse_out_ref, utxo_at
from offchain.protocol.job.jobspec import parse_jobspec
from offchain.protocol.ledger.split import refund_amount, settle_split
from offchain.protocol.tx import escrow as escrows
from tests.consumer.test_sdk import SPEC, UNITS, archive, travel_past, until
from tests.protocol.onchain import balance, confirm

START_WITHIN_S = 20


async def timed_job(consumer, provider) -> tuple[str, dict, int]:
    """Offer, quote with a start deadline, lock: the job id, its assignment, the lock's fee."""
    await provider.offer()
    quote = await consumer.quote(parse_jobspec(SPEC), start_within_s=START_WITHIN_S)
    assert 0 < quote.datum.start_deadline < quote.datum.deadline
    signed = consumer.key.sign(await consumer.build_lock(quote.job_id))
    await consumer.submit_lock(quote.job_id, signed)
    return quote.job_id, await provider.assignment(), signed.transaction_body.fee


async def test_a_silent_providers_renter_is_refunded_right_after_the_start_deadline(
    consumer, provider, devnet
):
    start = balance(devnet, consumer.key.address)
    job_id, _, lock_fee = await timed_job(consumer, provider)
    record = consumer.store.get(job_id)
    with pytest.raises(NotRefundableYet, match="unless its provider starts the job"):
        await consumer.refund(job_id)
    await travel_past(devnet, record.datum.start_deadline)
    assert "did not start the job by its start deadline" in consumer.refund_reason(job_id)
    refund = await consumer.refund(job_id)
    assert refund.transaction_body.validity_start is not None
    payout = refund.transaction_body.outputs[0]
    assert payout.amount.coin == refund_amount(record.lovelace, record.datum.fee_allowance)
    assert balance(devnet, consumer.key.address) == start - lock_fee - refund.transaction_body.fee
    await until(consumer, job_id, "refunded")


async def test_the_market_follows_a_start_to_the_started_escrow_and_settles_it(
    consumer, provider, devnet
):
    """The provider Starts (paying its fee); the market's job names the started escrow; the
    receipt on it settles; the renter's refund no longer comes early (it follows the Start)."""
    start = balance(devnet, consumer.key.address)
    job_id, job, lock_fee = await timed_job(consumer, provider)
    escrow = utxo_at(devnet.context(), parse_out_ref(job["escrow"]))
    assert escrow is not None
    wallet = provider.party.wallet
    started = await confirm(
        devnet, wallet.sign(escrows.start(devnet.context(), consumer.deployment, escrow,
                                          wallet.address))
    )  # fmt: skip
    moved = format_out_ref(escrows.started_escrow(started.id))
    async with asyncio.timeout(60):  # the market's follower takes the Start's block
        while (await consumer.status(job_id)).escrow != moved:
            await asyncio.sleep(0.2)
    record = consumer.store.get(job_id)
    await travel_past(devnet, record.datum.start_deadline)
    with pytest.raises(NotRefundableYet, match="not refundable yet"):
        await consumer.refund(job_id)
    assert consumer.store.get(job_id).escrow == moved

    job = {**job, "escrow": moved}
    await provider.accept(job)
    await provider.run(job, ["started"])
    await provider.deliver(job, archive({"out.txt": b"ok"}), UNITS)
    await until(consumer, job_id, "settled")
    split = settle_split(record.lovelace, record.datum.price_per_unit, UNITS,
                         record.datum.max_units, record.datum.fee_allowance)  # fmt: skip
    assert (
        balance(devnet, consumer.key.address) == start - lock_fee - record.lovelace + split.consumer
    )
