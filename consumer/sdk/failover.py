"""`job submit --failover N` (issue 36): a job locked with a start deadline, watched until it
ends, and run again with another provider, from the money that came back, whenever its
provider let it down, up to N times:

- not started: no Start on chain by the start deadline. The renter takes the escrow back at
  once (an early refund, its consumer key alone; `escrow_watch`): built ahead and submitted
  when the first block past the deadline arrives, so it lands in the next one (the second
  block past the deadline at the median in `bench/failover.py`, the third at worst).
- failed for its own reasons: the escrow was settled by a receipt that says the provider did
  not run the job to its end: zero units (nothing ran: its container could not start, its node
  was lost) or the outcome `stopped` (its daemon stopped mid-run; the receipt bills the
  seconds it ran, and the rest of the escrow came back by that settle). The job's own ending,
  its non-zero exit, a timeout, running out of memory, a cancel the renter asked for, is the
  job's, not the provider's: it is not run again.
- silent while running: no receipt by the escrow's close (the job's deadline plus the settle
  window; nobody can take a started escrow back before that). The renter refunds at the
  first block past the close (within the refund window only it may), built ahead the same
  way.

The verdict is the chain's, never the market's word alone: a Start, a settle or a refund is
what moves the renter on, and the refund waits on chain time; the market only says how a
settled run ended (the units from the provider's signed receipt, checked here; the outcome
is the provider's word it relays). Each attempt's outcome is kept (`Attempt`). The renter pays
each attempt's lock fee, each refund's fee, what each receipt billed (a stopped run's seconds)
and one whole job."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from pycardano import Transaction

from consumer.sdk.errors import ConsumerError
from consumer.sdk.escrow_watch import watch_escrow
from consumer.sdk.session import Consumer
from offchain.chain.time import iso
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.outcome import Outcome, describe

POLL_S = 0.5  # how often the market is read for how a settled job ended, and the wallet
MARKET_WAIT_S = 300  # how long the market may take to record a settle the chain shows

# Attempt outcomes: the last two end the failover; the others are a provider's failure.
NOT_STARTED = "refunded early"  # no Start by the start deadline
RETURNED = "returned"  # refused before its Start: its zero-unit receipt settled
PROVIDER_FAILED = "provider failed"  # settled by a receipt of a run it cut short (see above)
SILENT = "refunded after the close"  # no receipt by the close
RAN = "ran"  # ran to its own end, whatever its program did (`Attempt.detail`)
STARTED = "started"  # not watched past its Start (`watch=False`)
DONE = (RAN, STARTED, "cancelled")
PROVIDERS_FAULT = (Outcome.STOPPED,)  # receipt outcomes that are the provider's doing


class NobodyRan(ConsumerError):
    """No provider ran the job to its end, however many were tried."""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One provider tried: the market's job id, the provider, how it ended (the outcomes
    above), the refund transaction when the renter refunded, and in words how the run ended
    (`ran`, `provider failed`: the receipt's units and outcome)."""

    job_id: str
    provider_id: str
    outcome: str
    refund_tx: str | None = None
    detail: str = ""


async def submit_with_failover(
    consumer: Consumer,
    spec: JobSpec,
    failover: int,
    start_within_s: int,
    gpu_model: str | None = None,
    min_delivered: int | None = None,
    watch: bool = True,
    tell: Callable[[str], None] = lambda _: None,
) -> list[Attempt]:
    """Quote, lock and follow the job, up to `failover` more times; the attempts, the last one
    `ran` (or `started`, without `watch`: only a provider that does not start it is replaced;
    or `cancelled`). NobodyRan (the attempts in its message) when none did. `tell` hears each
    step as it happens (the CLI prints it)."""
    attempts: list[Attempt] = []
    for _ in range(failover + 1):
        excluded = [a.provider_id for a in attempts]
        quote = await consumer.quote(spec, gpu_model, None, min_delivered, start_within_s, excluded)
        signed = consumer.key.sign(await consumer.build_lock(quote.job_id))
        escrow = await consumer.submit_lock(quote.job_id, signed)
        tell(f"job {quote.job_id} locked for provider {quote.provider_id} ({escrow}): it must "
             f"start by {iso(quote.datum.start_deadline)}")  # fmt: skip
        attempt = await attempt_job(consumer, quote.job_id, quote.provider_id, watch, tell)
        attempts.append(attempt)
        tell(f"job {attempt.job_id}: {attempt.outcome}" + (f" ({attempt.detail})"
             if attempt.detail else ""))  # fmt: skip
        if attempt.outcome in DONE:
            return attempts
    tried = ", ".join(f"{a.provider_id} ({a.outcome})" for a in attempts)
    raise NobodyRan(f"no provider ran the job to its end: {tried}")


async def attempt_job(
    consumer: Consumer, job_id: str, provider_id: str, watch: bool, tell: Callable[[str], None]
) -> Attempt:
    """Follow the locked job to its Start, then (with `watch`) to its end; its Attempt."""
    ended = await watch_escrow(consumer, job_id, until_started=True)
    if ended.how == "spent":
        return Attempt(job_id, provider_id, RETURNED)
    if ended.how == "refunded":
        return await _refunded(consumer, job_id, provider_id, NOT_STARTED, ended.refund)
    if not watch:
        return Attempt(job_id, provider_id, STARTED)
    close = consumer.store.get(job_id).datum.close
    tell(f"job {job_id} started on chain: watched until it is settled, or refunded at its "
         f"close {iso(close)} if no receipt comes")  # fmt: skip
    ended = await watch_escrow(consumer, job_id, until_started=False)
    if ended.how == "refunded":
        return await _refunded(consumer, job_id, provider_id, SILENT, ended.refund)
    return await settled(consumer, job_id, provider_id)


async def _refunded(
    consumer: Consumer, job_id: str, provider_id: str, outcome: str, refund: Transaction | None
) -> Attempt:
    assert refund is not None
    await seen_spent(consumer, refund)
    return Attempt(job_id, provider_id, outcome, str(refund.id))


async def settled(consumer: Consumer, job_id: str, provider_id: str) -> Attempt:
    """How a started job whose escrow went ended, once the market recorded it: settled by a
    receipt (its units checked against the provider's signature here when the market holds
    it; else as the market read the settle, one the provider's daemon made itself), refunded
    by someone else after the refund window, or cancelled."""
    async with asyncio.timeout(MARKET_WAIT_S):
        status = await consumer.status(job_id)
        while status.state not in ("settled", "refunded", "slashed", "cancelled"):
            await asyncio.sleep(POLL_S)
            status = await consumer.status(job_id)
    if status.state == "cancelled":
        return Attempt(job_id, provider_id, "cancelled")
    if status.state != "settled":
        return Attempt(job_id, provider_id, SILENT, None, f"{status.state} by another")
    units = status.receipt_units  # what the market read from the settle on chain
    signed = await consumer.market.signatures(job_id)
    if signed.receipt_signature is not None:  # the receipt itself, its signature checked here
        units = consumer.check_receipt(consumer.store.get(job_id), signed).units
    ended = describe(status.outcome, status.exit_code) or "no outcome reported"
    detail = f"{units} units billed: {ended}"
    if units == 0 or status.outcome in PROVIDERS_FAULT:
        why = status.failure_reason
        return Attempt(job_id, provider_id, PROVIDER_FAILED, None,
                       detail + (f"; {why}" if why else ""))  # fmt: skip
    return Attempt(job_id, provider_id, RAN, None, detail)


async def seen_spent(consumer: Consumer, tx: Transaction) -> None:
    """Until the consumer's chain context no longer lists `tx`'s inputs among its UTxOs (it
    keeps answers for a moment): the next lock pays from what is there now."""
    spent = set(tx.transaction_body.inputs)
    while True:
        held = await asyncio.to_thread(consumer.context.utxos, consumer.key.address)
        if not any(utxo.input in spent for utxo in held):
            return
        await asyncio.sleep(POLL_S / 4)
