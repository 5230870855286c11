"""`job submit --failover N` (issue 36): a job locked with a start deadline; when its provider
has not shown it started on chain (a Start) by then, the renter takes the escrow back at once
(an early refund), asks the market again without that provider, and locks again from the
money that came back, up to N times. The verdict is the chain's, never the market's word: a
job counts as started once its escrow carries no start deadline any more."""

from __future__ import annotations

import asyncio
import dataclasses

from pycardano import Transaction

from consumer.sdk.errors import ConsumerError, NothingToDo
from consumer.sdk.session import Consumer
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.tx.txbuild import Clock

POLL_S = 1.0  # how often the chain is read while a provider has time to start


class NobodyStarted(ConsumerError):
    """No provider started the job within its start deadline, however many were tried."""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One provider tried: the market's job id, the provider, and how it ended."""

    job_id: str
    provider_id: str
    outcome: str  # "started", "refunded early", "returned" (the provider refused it)
    refund_tx: str | None = None


async def submit_with_failover(
    consumer: Consumer,
    spec: JobSpec,
    failover: int,
    start_within_s: int,
    gpu_model: str | None = None,
    min_delivered: int | None = None,
) -> list[Attempt]:
    """Quote, lock and wait for a Start, up to `failover` more times; the attempts, the last
    one started. NobodyStarted (with the attempts in its message) when none was."""
    attempts: list[Attempt] = []
    for _ in range(failover + 1):
        excluded = [a.provider_id for a in attempts]
        quote = await consumer.quote(spec, gpu_model, None, min_delivered, start_within_s, excluded)
        signed = consumer.key.sign(await consumer.build_lock(quote.job_id))
        await consumer.submit_lock(quote.job_id, signed)
        attempt = await settle_start(consumer, quote.job_id, quote.provider_id)
        attempts.append(attempt)
        if attempt.outcome == "started":
            return attempts
    tried = ", ".join(f"{a.provider_id} ({a.outcome})" for a in attempts)
    raise NobodyStarted(f"no provider started the job within {start_within_s} s: {tried}")


async def settle_start(consumer: Consumer, job_id: str, provider_id: str) -> Attempt:
    """Wait for the job's Start until its start deadline (chain time); past it, the early
    refund. Its escrow spent otherwise (a refusal's zero-unit receipt settled) needs none."""
    deadline = consumer.store.get(job_id).datum.start_deadline
    while True:
        # the tip first: a Start is in a block before the deadline, so an escrow read
        # unstarted after a tip past it stays so
        past = (await asyncio.to_thread(Clock.now, consumer.context)).tip_ms > deadline
        try:
            _, datum = await asyncio.to_thread(consumer.current_escrow, consumer.store.get(job_id))
        except NothingToDo:
            return Attempt(job_id, provider_id, "returned")
        if datum.start_deadline == 0:
            return Attempt(job_id, provider_id, "started")
        if past:
            refund = await consumer.refund(job_id)
            await seen_spent(consumer, refund)
            return Attempt(job_id, provider_id, "refunded early", str(refund.id))
        await asyncio.sleep(POLL_S)


async def seen_spent(consumer: Consumer, tx: Transaction) -> None:
    """Until the consumer's chain context no longer lists `tx`'s inputs among its UTxOs (it
    keeps answers for a moment): the next lock pays from what is there now."""
    spent = set(tx.transaction_body.inputs)
    while True:
        held = await asyncio.to_thread(consumer.context.utxos, consumer.key.address)
        if not any(utxo.input in spent for utxo in held):
            return
        await asyncio.sleep(POLL_S / 4)
