"""Issue 36 on the devnet with the real market and scripted providers: a renter that asks for
a start deadline gets its money back right after it when its provider stays silent (balances
to the lovelace, long before the close); the market follows a provider's Start to the
started escrow, which the job's receipt names and its settlement spends; and a failover
replaces a silent provider with another, the renter charged once."""

from __future__ import annotations

import asyncio
import re
from asyncio.subprocess import PIPE

import pytest
import yaml

from consumer.sdk.errors import NotRefundableYet
from consumer.sdk.store import JobStore
from offchain.chain.submit import tip_point
from offchain.chain.utxo import format_out_ref, parse_out_ref, utxo_at
from offchain.protocol.job.jobspec import parse_jobspec
from offchain.protocol.ledger.split import refund_amount, settle_split
from offchain.protocol.tx import escrow as escrows
from tests.consumer.cli import UNCHAINED, cli_env
from tests.consumer.conftest import IDENTITY
from tests.consumer.scripted import PRICE, ScriptedProvider
from tests.consumer.test_sdk import SPEC, UNITS, archive, travel_past, until
from tests.protocol.onchain import balance, confirm, tx_fee

START_WITHIN_S = 20


async def timed_job(consumer, provider) -> tuple[str, dict, int]:
    """Offer, quote with a start deadline, lock: the job id, its assignment, the lock's fee."""
    await provider.offer()
    quote = await consumer.quote(parse_jobspec(SPEC), start_within_s=START_WITHIN_S)
    assert 0 < quote.datum.start_deadline < quote.datum.deadline
    signed = consumer.key.sign(await consumer.build_lock(quote.job_id))
    await consumer.submit_lock(quote.job_id, signed)
    return quote.job_id, await provider.assignment(), signed.transaction_body.fee


def provider_id(provider: ScriptedProvider) -> str:
    return provider.party.wallet.key_hash.payload.hex()


async def start_escrow(devnet, consumer, provider, job: dict) -> dict:
    """`provider` Starts the job's escrow as its daemon does (its wallet pays) and waits for
    the market to follow it: the assignment with the started escrow."""
    escrow = utxo_at(devnet.context(), parse_out_ref(job["escrow"]))
    assert escrow is not None
    wallet = provider.party.wallet
    made = escrows.start(devnet.context(), consumer.deployment, escrow, wallet.address)
    started = await confirm(devnet, wallet.sign(made))
    moved = format_out_ref(escrows.started_escrow(started.id))
    async with asyncio.timeout(60):  # the market's follower takes the Start's block
        while (await consumer.status(job["job_id"])).escrow != moved:
            await asyncio.sleep(0.2)
    return {**job, "escrow": moved}


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
    job = await start_escrow(devnet, consumer, provider, job)
    moved = job["escrow"]
    record = consumer.store.get(job_id)
    await travel_past(devnet, record.datum.start_deadline)
    with pytest.raises(NotRefundableYet, match="not refundable yet"):
        await consumer.refund(job_id)
    assert consumer.store.get(job_id).escrow == moved

    await provider.accept(job)
    await provider.run(job, ["started"])
    await provider.deliver(job, archive({"out.txt": b"ok"}), UNITS)
    await until(consumer, job_id, "settled")
    split = settle_split(record.lovelace, record.datum.price_per_unit, UNITS,
                         record.datum.max_units, record.datum.fee_allowance)  # fmt: skip
    assert (
        balance(devnet, consumer.key.address) == start - lock_fee - record.lovelace + split.consumer
    )


async def test_a_failover_replaces_a_silent_provider_and_charges_the_renter_once(
    consumer, provider, market, devnet, consumer_deployment, tmp_path
):
    """`job submit --failover 1` (the CLI, in its own process, with the renter's key): the
    cheaper provider is matched and stays silent; past the start deadline the renter refunds
    early and the market, asked again without it, matches the other, which starts, runs and
    is settled (the SDK watches it to that end). The CLI tells each step and prints each
    attempt; the renter paid two locks' and the refund's fees and one job."""
    second = await ScriptedProvider.start(devnet, consumer_deployment, market.url, IDENTITY)
    key = tmp_path / "renter.skey"
    consumer.key.key.save(str(key))
    env = cli_env(market, devnet, key, tmp_path / "state")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(SPEC))
    try:
        await provider.offer()
        await second.offer(price_per_unit=PRICE + 1)
        start = balance(devnet, consumer.key.address)
        since = await tip_point(devnet.url)
        cli = await asyncio.create_subprocess_exec(
            *UNCHAINED, "job", "submit", "job.yaml", "--failover", "1", "--start-within",
            str(START_WITHIN_S), "--yes", env=env, cwd=tmp_path, stdout=PIPE, stderr=PIPE,
        )  # fmt: skip
        silent = await provider.assignment()  # matched, and never started
        store = JobStore(tmp_path / "state")
        record = store.get(silent["job_id"])
        await travel_past(devnet, record.datum.start_deadline)
        job = await start_escrow(devnet, consumer, second, await second.assignment())
        await second.accept(job)
        await second.run(job, ["running on the second provider"])
        await second.deliver(job, archive({"out.txt": b"ok"}), UNITS)
        out, err = await asyncio.wait_for(cli.communicate(), 120)  # watched to the settle
        assert cli.returncode == 0, err.decode()
        await until(consumer, silent["job_id"], "refunded")
    finally:
        await second.http.aclose()
    told, printed = err.decode(), out.decode()
    assert f"job {job['job_id']} started on chain" in told
    early = re.search(rf"{provider_id(provider)}: refunded early \(job {silent['job_id']}, "
                      r"refund ([0-9a-f]{64})\)", printed)  # fmt: skip
    assert early is not None, printed
    ran = (f"{provider_id(second)}: ran ({UNITS} units billed: no outcome reported) "
           f"(job {job['job_id']})")  # fmt: skip
    assert ran in printed
    first, kept = record, store.get(job["job_id"])
    split = settle_split(kept.lovelace, PRICE + 1, UNITS, kept.datum.max_units,
                         kept.datum.fee_allowance)  # fmt: skip
    paid = [first.lock_tx_id, kept.lock_tx_id, early.group(1)]
    fees = sum([await tx_fee(devnet, tx_id, since) for tx_id in paid if tx_id is not None])
    assert split.provider == (PRICE + 1) * UNITS
    assert balance(devnet, consumer.key.address) == start - fees - kept.lovelace + split.consumer
