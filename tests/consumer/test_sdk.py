"""The SDK end to end on the devnet with the real market and a scripted provider: a job from
its spec to verified results with the consumer's balance exact to the lovelace; the money back
by refund or slash; and every lie a market or provider could tell caught before it costs."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile

import pytest
from sqlalchemy import update
from sqlmodel import Session, select

from consumer.sdk.errors import NotRefundableYet, QuoteRejected, ResultMismatch
from consumer.sdk.session import Consumer
from offchain.chain.utxo import format_out_ref
from offchain.market.db import make_engine
from offchain.market.models import BlobChunk, Job, Offer
from offchain.protocol.api.market_errors import MarketRefused
from offchain.protocol.job.jobspec import parse_jobspec
from offchain.protocol.ledger.payloads import sign
from offchain.protocol.ledger.split import refund_amount, settle_split, slash_share
from tests.consumer.scripted import GPU, PRICE
from tests.protocol.conftest import SLASH_SHARE_BPS
from tests.protocol.onchain import BOND, NOTICE_MS, balance, travel_to

SPEC = {
    "image": "python:3.11", "command": ["python", "-c", "print('hi')"],
    "resources": {"gpus": 1, "min_vram_mib": 40_000, "cpu_cores": 2, "memory_mib": 4096,
                  "disk_mib": 1024},
    "max_duration_s": 300, "max_price_lovelace": 40_000_000,
}  # fmt: skip
UNITS = 42


def archive(files: dict[str, bytes]) -> bytes:
    """A tar archive holding `files`, as a provider's /out would be."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def until(consumer: Consumer, job: str, state: str) -> list[str]:
    """The job's states from its event stream, up to `state`."""
    seen: list[str] = []
    async with asyncio.timeout(60):
        async for event in consumer.events(job):
            seen.append(event.to_state)
            if seen[-1] == state:
                return seen
    raise AssertionError(f"the stream ended at {seen}")


def kept(states: list[str]) -> list[str]:
    """The states a fork did not take back: on a chain that forks, the market reports a lock
    as funded, a rollback of its block moves the job back to quoted and the lock's new block
    funds it again (each move an event); what stands is the path without the undone steps."""
    path: list[str] = []
    for state in states:
        path = path[: path.index(state)] if state in path else path
        path.append(state)
    return path


async def travel_past(devnet, posix_ms: int) -> None:
    """Chain time past `posix_ms`, and past pycardano's one-second cache of the tip."""
    await travel_to(devnet, posix_ms + 1)
    await asyncio.sleep(1.1)


async def funded_job(consumer: Consumer, provider, spec=SPEC) -> tuple[str, dict, int]:
    """Offer, quote, lock: the job id, its assignment and the lock's fee."""
    await provider.offer()
    quote = await consumer.quote(parse_jobspec(spec))
    signed = consumer.key.sign(await consumer.build_lock(quote.job_id))
    await consumer.submit_lock(quote.job_id, signed)
    return quote.job_id, await provider.assignment(), signed.transaction_body.fee


async def test_a_job_from_spec_to_verified_results_and_settlement(
    consumer, provider, devnet, tmp_path
):
    start = balance(devnet, consumer.key.address)
    await provider.offer()
    quote = await consumer.quote(parse_jobspec(SPEC), gpu_model="nvidia_h100_80gb_hbm3")
    assert quote.gpu_model == GPU and quote.datum.price_per_unit == PRICE
    assert quote.max_cost == PRICE * SPEC["max_duration_s"]
    signed = consumer.key.sign(await consumer.build_lock(quote.job_id))
    escrow = await consumer.submit_lock(quote.job_id, signed)
    assert (await consumer.status(quote.job_id)).state == "funded"
    job = await provider.assignment()
    assert job["escrow"] == escrow
    await provider.accept(job)
    await provider.run(job, ["epoch 1 loss 0.5", "epoch 2 loss 0.2"])
    assert [line.text for line in await consumer.logs(quote.job_id)][-1] == "epoch 2 loss 0.2"
    await provider.deliver(job, archive({"model.txt": b"weights", "dir/log.txt": b"ok"}), UNITS)

    result = await consumer.results(quote.job_id, tmp_path / "results")
    assert result.units == UNITS and result.cost == PRICE * UNITS
    assert (result.unpacked / "model.txt").read_bytes() == b"weights"
    assert (result.unpacked / "dir" / "log.txt").read_bytes() == b"ok"
    states = await until(consumer, quote.job_id, "settled")
    assert kept(states) == ["requested", "quoted", "funded", "accepted", "running", "completed",
                            "settling", "settled"]  # fmt: skip
    split = settle_split(quote.lovelace, PRICE, UNITS, SPEC["max_duration_s"],
                         quote.datum.fee_allowance)  # fmt: skip
    fee = signed.transaction_body.fee
    assert balance(devnet, consumer.key.address) == start - fee - quote.lovelace + split.consumer
    assert split.consumer == quote.lovelace - PRICE * UNITS - quote.datum.fee_allowance


async def test_a_tampered_archive_and_a_receipt_by_another_key_are_caught(
    consumer, provider, market, tmp_path
):
    job_id, job, _ = await funded_job(consumer, provider)
    await provider.accept(job)
    await provider.run(job, ["running"])
    await provider.deliver(job, archive({"out.txt": b"the real result"}), UNITS)
    status = await consumer.status(job_id)
    lie = archive({"out.txt": b"something else"})  # a market that lies: other bytes stored
    engine = make_engine(market.settings)
    with Session(engine) as session:
        session.execute(update(BlobChunk).where(BlobChunk.sha256 == status.result_sha256)
                        .values(data=lie))  # fmt: skip
        session.commit()
    engine.dispose()
    into = tmp_path / "results"
    with pytest.raises(ResultMismatch) as mismatch:
        await consumer.results(job_id, into)
    assert mismatch.value.details["expected"] == status.result_sha256
    assert mismatch.value.details["arrived"] != status.result_sha256
    assert "nothing was unpacked" in str(mismatch.value)
    assert list(into.iterdir()) == []

    engine = make_engine(market.settings)  # a market that swaps the receipt's signature
    with Session(engine) as session:
        row = session.get(Job, job_id)
        row.receipt_signature = sign(consumer.key.key, b"not the receipt").hex()
        session.add(row)
        session.commit()
    engine.dispose()
    with pytest.raises(ResultMismatch, match="not signed by the escrow's provider key"):
        await consumer.results(job_id, into)
    assert list(into.iterdir()) == []


async def test_a_quote_whose_offer_signature_does_not_match_is_refused(
    consumer, provider, market, devnet
):
    await provider.offer()
    engine = make_engine(market.settings)  # the market serves an offer the provider never made
    with Session(engine) as session:
        row = session.exec(select(Offer)).one()
        row.body = json.dumps({**json.loads(row.body), "price_per_unit": PRICE // 2})
        session.add(row)
        session.commit()
    engine.dispose()
    before = balance(devnet, consumer.key.address)
    with pytest.raises(QuoteRejected, match="not over this offer"):
        await consumer.quote(parse_jobspec(SPEC))
    assert balance(devnet, consumer.key.address) == before
    assert list(consumer.store.all()) == []


async def test_a_fraction_is_locked_at_its_slices_signed_price(consumer, provider):
    """A job asking a fraction of a GPU is quoted at the price of the cheapest slice of the
    signed offer that holds it; the renter checks that price there, not the bundle's."""
    piece = {
        "gpu_model": GPU,
        "memory_mib": 10240,
        "sm_percent": 25,
        "count": 2,
        "isolation": "mps",
        "fault_note": "MPS: faults shared",
        "price_per_unit": 777,
    }
    await provider.offer(gpu_slices=[piece])
    fraction = {**SPEC, "resources": {"gpu_memory_mib": 8192, "gpu_sm_percent": 25}}
    checked = await consumer.quote(parse_jobspec(fraction))
    assert checked.datum.price_per_unit == 777 and checked.terms["price_per_unit"] == PRICE


async def test_refund_after_a_provider_never_starts(consumer, provider, devnet):
    start = balance(devnet, consumer.key.address)
    job_id, _, lock_fee = await funded_job(consumer, provider)
    record = consumer.store.get(job_id)
    with pytest.raises(NotRefundableYet) as early:
        await consumer.refund(job_id)
    assert early.value.details["refundable_at_ms"] > early.value.details["chain_now_ms"]
    assert "chain time" in str(early.value) and "this machine's clock" in str(early.value)
    await travel_past(devnet, record.datum.close)
    refund = await consumer.refund(job_id)
    payout = refund.transaction_body.outputs[0]
    assert payout.address == consumer.key.address
    assert payout.amount.coin == refund_amount(record.lovelace, record.datum.fee_allowance)
    # the payout, and as the submitter's change the allowance less the refund's fee
    fees = lock_fee + refund.transaction_body.fee
    assert balance(devnet, consumer.key.address) == start - fees
    await until(consumer, job_id, "refunded")


async def test_slash_after_a_provider_accepts_and_disappears(consumer, provider, devnet):
    await provider.bond(devnet)
    start = balance(devnet, consumer.key.address)
    job_id, job, lock_fee = await funded_job(consumer, provider)
    await provider.accept(job)
    record = consumer.store.get(job_id)
    await travel_past(devnet, record.datum.close)
    slash = await consumer.slash(job_id)
    share = slash_share(BOND, SLASH_SHARE_BPS)
    fees = lock_fee + slash.transaction_body.fee
    assert balance(devnet, consumer.key.address) == start - fees + share
    await until(consumer, job_id, "slashed")


async def test_a_bond_that_does_not_count_is_refused_before_locking(consumer, provider, devnet):
    await provider.offer()
    consumer.min_bond_lovelace = 1
    with pytest.raises(QuoteRejected, match="names no bond and you require one"):
        await consumer.quote(parse_jobspec(SPEC))
    bond = await provider.bond(devnet)
    await provider.offer(bond=format_out_ref(bond.input))
    consumer.min_bond_lovelace = BOND + 1
    with pytest.raises(QuoteRejected, match="bond does not count") as small:
        await consumer.quote(parse_jobspec(SPEC))
    assert f"{BOND} < {BOND + 1} lovelace" in str(small.value)
    assert list(consumer.store.all()) == []  # nothing recorded, nothing locked
    consumer.min_bond_lovelace = BOND
    assert (await consumer.quote(parse_jobspec(SPEC))).bond_lovelace == BOND
    # issue 18 B: the provider could withdraw the bond before a job this long is slashable
    outlasting = {**SPEC, "max_duration_s": NOTICE_MS // 1000, "max_price_lovelace": 10**9}
    # the market runs the provider's acceptance check and refuses it first
    with pytest.raises(MarketRefused, match="covers jobs closing before"):
        await consumer.quote(parse_jobspec(outlasting))
