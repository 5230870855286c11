"""The job loop's work on one assignment: check the escrow on chain (never the market's word)
once it is `confirm_blocks` deep (a fork cannot take it back then), sign and send the
acceptance, run the job with the hardened runner while its log streams to the market, then
sign the receipt and deliver the result archive and the receipt, retrying until the market
takes them or the escrow is about to close (the payout watcher then settles the receipt
itself). Every step is in the journal before it is taken. An unreachable chain never ends a
job: an assignment waits for it, a running job runs on, and its receipt and delivery retry
until the escrow nears its close."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from pycardano import PaymentSigningKey, UTxO
from pydantic import ValidationError

from offchain.chain.utxo import format_out_ref
from offchain.core.errors import UnchainedError
from offchain.protocol.api.market_errors import MarketError, MarketRefused
from offchain.protocol.api.market_link import Body, MarketLink
from offchain.protocol.api.wire import Assignment, JobPublic
from offchain.protocol.checks.acceptance import Offered, describe, refusals
from offchain.protocol.checks.escrow_check import check_terms
from offchain.protocol.checks.refusal import Refused
from offchain.protocol.job.job_state import JobState
from offchain.protocol.job.jobspec import JobSpec, Resources
from offchain.protocol.job.offer import ImageSupply
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.job.receipt import EMPTY_HASH, Receipt
from offchain.protocol.job.registry import ImageName
from offchain.protocol.job.registry_seal import SealError, for_image, unseal
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.escrow import acceptance_terms
from offchain.protocol.tx.txbuild import BuildError
from provider.capacity import Bundle, Capacity, Slot
from provider.config import DaemonSettings
from provider.daemon import evidence
from provider.daemon.bond import BondManager
from provider.daemon.chain import CHAIN_DOWN, Chain, ChainUnavailable, in_daemon_thread
from provider.daemon.confirmations import Confirmations
from provider.daemon.journal import JobEntry, Journal
from provider.money.receipts import EscrowJob, ReceiptError, accept, receipt_for
from provider.placement.interface import Placement
from provider.sandbox.runner import RunResult

log = logging.getLogger("unchained.provider")
LOG_FLUSH_S = 0.5
LOG_BATCH = 1000
DELIVERED = (
    JobState.COMPLETED,
    JobState.SETTLING,
    JobState.SETTLED,
)  # market states: it has result and receipt
RELEASED = (
    JobState.FAILED,
    JobState.SETTLING,
    JobState.SETTLED,
    JobState.REFUNDED,
)  # it has a failure's zero receipt
START_POLL_S = 0.5  # how often the daemon looks for its Start's confirmations
CALL_S = 60.0  # how long one step's request may retry before the step is tried again
RETRY_PAUSE_S = 2.0


class Refusal(UnchainedError):
    """This daemon will not take the assignment; the message says why."""


class Shallow(UnchainedError):
    """The assignment's escrow is not `confirm_blocks` deep yet: it is taken once it is."""


# why a refused assignment's escrow is not released: not there, not ours, or no chain
UNRELEASED: tuple[type[BaseException], ...] = (
    ValidationError,
    Refusal,
    Refused,
    BuildError,
    *CHAIN_DOWN,
)


@dataclasses.dataclass
class Worker:
    chain: Chain
    link: MarketLink
    journal: Journal
    runner: Placement  # this machine's Runner, or a fleet's nodes
    bonds: BondManager
    capacity: Capacity
    bundle: Bundle
    key: PaymentSigningKey
    settings: DaemonSettings
    seen: set[str] = dataclasses.field(default_factory=set)
    tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)
    freed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    confirmations: Confirmations = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.confirmations = Confirmations(self.chain, self.settings.confirm_blocks)

    # -- taking an assignment ------------------------------------------------------------

    async def take(self, assignment: Assignment) -> bool:
        """Accept the assignment and start it in the background; False when no slot is free
        (it stays assigned, to be taken once one is). A refusal is logged, and its escrow
        released by a zero-unit receipt when the escrow itself is sound (`_refuse`).
        ChainUnavailable: the escrow cannot be checked now; the assignment stays, to be taken
        once the chain is back. Shallow: likewise, until its escrow is deep enough."""
        job_id = assignment.job_id
        if job_id in self.seen:
            return True
        slot = self.capacity.take(job_id, asks=asked(assignment))
        if slot is None:
            return False
        self.seen.add(job_id)
        log.info("job %s assigned: escrow %s", job_id, assignment.escrow)
        try:
            entry = await self._accept(job_id, assignment, slot)
        except (Refusal, Refused, BuildError) as exc:
            self.release(job_id)
            log.warning("job %s refused: %s", job_id, exc)
            self.spawn(self._refuse(job_id, assignment, f"refused by the provider: {exc}"))
            return True
        except Shallow:
            self.release(job_id)
            self.seen.discard(job_id)
            raise
        except CHAIN_DOWN as exc:
            self.release(job_id)
            self.seen.discard(job_id)
            raise ChainUnavailable(f"job {job_id} to take again: {exc!r}") from exc
        except MarketError as exc:
            self.release(job_id)
            self._fail_locally(job_id, f"the market did not take the acceptance: {exc}")
            return True
        self.spawn(self.run(entry, slot))
        return True

    async def _accept(self, job_id: str, assignment: Assignment, slot: Slot) -> JobEntry:
        try:
            spec = JobSpec.model_validate(assignment.spec)
        except ValidationError as exc:
            raise Refusal(f"not a job spec: {exc}") from exc
        ref = assignment.escrow
        try:
            deep = await self.chain.call(self.confirmations.deep_enough, ref)
        except LookupError as exc:
            raise Refusal(f"no unspent escrow {ref} on chain") from exc
        if not deep:
            needed = self.settings.confirm_blocks
            raise Shallow(f"job {job_id}: escrow {ref} is not {needed} blocks deep yet")
        entry, signature = await self.chain.call(self._check_and_sign, job_id, ref, spec, slot)
        body = {"signature": signature.hex()}
        started = await self._start(job_id, ref)  # a start deadline: shown started first
        if started != ref:
            ref = body["escrow"] = started
            entry, signature = await self.chain.call(self._check_and_sign, job_id, ref, spec, slot)
            body["signature"] = signature.hex()
        entry = entry.model_copy(update={"registry_account": assignment.registry_account})
        self.journal.save(entry)  # signed: from here on the bond is at stake
        await self.link.send(
            "POST", f"/jobs/{job_id}/acceptance", Body.of_json(body), retry_for_s=CALL_S
        )
        log.info("job %s accepted: escrow %s, slot %d", job_id, ref, slot.index)
        return entry

    async def _start(self, job_id: str, ref: str) -> str:
        """`ref` for an escrow without a start deadline; else Start it (`_check_and_sign`
        passed: no fee is paid for a job refused) and wait until the started escrow is
        `confirm_blocks` deep: its ref. The acceptance (signed again then, the first one
        dropped unsent) names that escrow, which the renter can no longer refund early, so a
        Start the chain takes too late costs the job, never the bond (PROTOCOL.md). The wallet
        pays the fee; BuildError when the deadline is too near."""
        chain = self.chain
        escrow = await chain.call(chain.utxo, ref)
        if escrow is None:
            raise Refusal(f"no unspent escrow {ref} on chain")
        if escrows.escrow_datum(chain.deployment, escrow).start_deadline == 0:
            return ref
        tx = await chain.call(
            escrows.start, chain.context, chain.deployment, escrow, chain.wallet.address
        )
        signed = chain.wallet.sign(tx)
        await chain.submit(signed, "start")
        started = format_out_ref(escrows.started_escrow(signed.id))
        while not await chain.call(self.confirmations.deep_enough, started):
            await asyncio.sleep(START_POLL_S)
        log.info("job %s started on chain: escrow %s -> %s", job_id, ref, started)
        return started

    def _check_and_sign(
        self, job_id: str, ref: str, spec: JobSpec, slot: Slot
    ) -> tuple[JobEntry, bytes]:
        """The escrow as the chain has it: well formed for this job and offer (`check_terms`),
        then the acceptance check the market ran when it quoted, then `accept` with the bond
        that backs it."""
        escrow = self.chain.utxo(ref)
        if escrow is None:
            raise Refusal(f"no unspent escrow {ref} on chain")
        job = self._escrow_job(escrow, spec, self.price_of(slot))
        datum = check_terms(job.context, job.deployment, escrow, spec, job.offer)
        now = self.chain.now_ms()
        self._check_acceptance(spec, escrow, datum, slot, now)
        close = datum.close
        signature = accept(job, self.bonds.backing(close))
        entry = JobEntry(
            job_id=job_id, escrow=ref, spec=spec, price_per_unit=job.price_per_unit,
            gpu_uuids=list(slot.gpu_uuids), slot=slot.index, close_ms=close,
            accepted_at_ms=now, unspent_at=self.chain.tip_point(),
        )  # fmt: skip
        return entry, signature

    def _check_acceptance(
        self, spec: JobSpec, escrow: UTxO, datum: EscrowDatum, slot: Slot, now: int
    ) -> None:
        """Refusal, with the acceptance check's reasons (the market's words when it refuses a
        quote), when the slot's bundle, this machine's images, the price, the payouts or the
        time to close do not allow the job (worker thread: it asks the engine and the chain)."""
        locked = escrow.output.amount.coin
        covers = self.bonds.covers_before(now)
        chain = self.chain
        terms = acceptance_terms(chain.context, chain.deployment, datum, locked, now, covers)
        images = ImageSupply.of(self.runner.images(), self.runner.settings.pull_images)
        found = refusals(Offered(slot.bundle, self.price_of(slot), images), spec, terms)
        if found:
            raise Refusal(describe(found))

    def price_of(self, slot: Slot) -> int:
        """Lovelace per second of a job on `slot`: a slice's own price, else the bundle's."""
        return self.bundle.price_per_unit if slot.price_per_unit is None else slot.price_per_unit

    def _escrow_job(self, escrow: Any, spec: JobSpec, price: int | None = None) -> EscrowJob:
        """The job on `escrow` at `price` (None: what the slot it would take costs)."""
        if price is None:
            price = self.capacity.price_for(spec.resources, self.bundle.price_per_unit)
        return EscrowJob(
            self.chain.context, self.chain.deployment, escrow, spec, price, self.key,
            self.chain.payout,
        )  # fmt: skip

    # -- running it ----------------------------------------------------------------------

    async def run(self, entry: JobEntry, slot: Slot) -> None:
        """Start, run and deliver an accepted job; the slot is free once its container ends."""
        try:
            await self._report_start(entry)
            now = await self._chain_now()
            entry = entry.model_copy(update={"stage": "running", "started_at_ms": now})
            self.journal.save(entry)
            shipper = LogShipper(self.link, entry.job_id)
            loop = asyncio.get_running_loop()
            shipping = asyncio.create_task(shipper.ship())
            result = await in_daemon_thread(
                self.runner.run, entry.job_id, entry.spec, list(slot.gpu_uuids),
                lambda text: loop.call_soon_threadsafe(shipper.add, text), entry.escrow,
                slot.gpu_slice, None, self.pull_auth(entry),
            )  # fmt: skip
            shipper.close()
            await shipping
        finally:
            self.release(entry.job_id)
        await self.finish(entry, result)

    def pull_auth(self, entry: JobEntry) -> dict[str, str] | None:
        """The renter's registry account for this job's image, unsealed with this provider's
        key, for its registry only; None when there is none or it does not open (the pull then
        goes without, and a private image's fails, saying so)."""
        if entry.registry_account is None:
            return None
        try:
            registry, account = unseal(entry.registry_account, self.key.payload)
        except SealError as exc:
            log.warning("job %s: %s", entry.job_id, exc)
            return None
        return for_image(ImageName.parse(entry.spec.image).host, registry, account)

    async def _report_start(self, entry: JobEntry) -> None:
        try:
            await self.link.send("POST", f"/jobs/{entry.job_id}/start", retry_for_s=CALL_S)
        except MarketError as exc:  # the job runs anyway; delivery tells the market again
            log.warning("job %s: the market did not hear of its start: %s", entry.job_id, exc)

    async def _chain_now(self) -> int:
        """The chain's now, estimated from the last tip while the chain is unreachable."""
        try:
            return await self.chain.call(self.chain.now_ms)
        except CHAIN_DOWN as exc:
            log.warning("chain time estimated from the last tip: %r", exc)
            return self.chain.estimated_now_ms()

    async def finish(self, entry: JobEntry, result: RunResult) -> None:
        """Sign the receipt for a run that happened and deliver it; release the escrow of one
        that did not (a zero-unit receipt)."""
        if result.record is None:
            await self._release_escrow(entry, f"{result.status}: {result.error}")
            return
        until = entry.close_ms - self.settings.payout_margin_ms
        try:
            escrow = await self.chain.call_until(until, self.chain.utxo, entry.escrow)
            if escrow is None:
                raise ReceiptError(f"escrow {entry.escrow} was spent before the receipt")
            receipt = await self.chain.call_until(
                until,
                receipt_for,
                self._escrow_job(escrow, entry.spec, entry.price_per_unit),
                result,
            )
        except (Refused, ReceiptError, ChainUnavailable) as exc:
            await self.fail(entry, f"no receipt can be signed: {exc}")
            return
        entry = entry.model_copy(update={
            "stage": "finished", "receipt": receipt, "outcome": Outcome(result.status),
            "exit_code": result.exit_code,
        })  # fmt: skip
        self.journal.save(entry)
        log.info("job %s %s: %d units signed", entry.job_id, result.status, receipt.units)
        await self.deliver(entry)

    async def deliver(self, entry: JobEntry) -> None:
        """Upload the archive and hand in the receipt (a zero-unit one with its failure),
        retrying until the escrow nears its close; past that the payout watcher settles the
        receipt itself."""
        while True:
            try:
                if entry.reason is not None:  # nothing ran: no archive, no metering record
                    await self._hand_in_failure(entry)
                    return
                entry = await self._deliver_once(entry)
                await evidence.upload(self.link, self.runner.results_dir, entry)
                return
            except MarketError as exc:
                now = await self._chain_now()
                if now >= entry.close_ms - self.settings.payout_margin_ms:
                    log.warning("job %s: undelivered (%s); the payout watcher settles it",
                                entry.job_id, exc)  # fmt: skip
                    return
                log.info("job %s: delivery to retry: %s", entry.job_id, exc)
                await asyncio.sleep(RETRY_PAUSE_S)

    async def _deliver_once(self, entry: JobEntry) -> JobEntry:
        receipt = entry.receipt
        assert receipt is not None
        job = entry.job_id
        state = await self._market_state(job)
        if state in DELIVERED:
            entry = entry.model_copy(update={"uploaded": True, "receipt_sent": True})
        if not entry.uploaded:
            if state == JobState.ACCEPTED:  # the market takes a result only while running
                await self._report_start(entry)
            await self.link.send(
                "PUT", f"/jobs/{job}/result", self._archive(entry), retry_for_s=CALL_S
            )
            entry = entry.model_copy(update={"uploaded": True})
            self.journal.save(entry)
        if not entry.receipt_sent:
            ended = {"outcome": entry.outcome, "exit_code": entry.exit_code}
            body = Body.of_json(receipt.body() | ended)
            await self.link.send("POST", f"/jobs/{job}/receipt", body, retry_for_s=CALL_S)
        entry = entry.model_copy(update={"receipt_sent": True, "stage": "delivered"})
        self.journal.save(entry)
        log.info("job %s delivered: %d lovelace due", job, entry.earned)
        return entry

    async def _market_state(self, job_id: str) -> str | None:
        """The job's state at the market (None: it does not know the job)."""
        try:
            status = await self.link.answer(JobPublic, "GET", f"/jobs/{job_id}", retry_for_s=CALL_S)
        except MarketRefused:
            return None
        return status.state

    def _archive(self, entry: JobEntry) -> Body:
        """The result archive as the receipt hashed it (empty when the run left none)."""
        archive = self.runner.results_dir / entry.job_id / "out.tar"
        return Body.of_file(archive) if archive.exists() else Body()

    async def fail(self, entry: JobEntry, reason: str) -> None:
        """The job did not run to a receipt: say so to the market and keep it in the journal."""
        self.journal.save(entry.model_copy(update={"stage": "failed", "reason": reason}))
        log.warning("job %s failed: %s", entry.job_id, reason)
        try:
            body = Body.of_json({"reason": reason[:4096]})
            await self.link.send("POST", f"/jobs/{entry.job_id}/failure", body, retry_for_s=CALL_S)
        except MarketError as exc:
            log.warning("job %s: the market did not take the failure: %s", entry.job_id, exc)

    # -- a zero-unit receipt: the renter's money back in the next settle batch ------------

    async def _refuse(self, job_id: str, assignment: Assignment, reason: str) -> None:
        """Release the escrow of a refused assignment, once the chain shows it is this
        provider's escrow (PROTOCOL.md: a zero-unit receipt costs the provider nothing).
        Nothing is signed for an escrow that is not there or not ours."""
        try:
            spec = JobSpec.model_validate(assignment.spec)
            entry = await self.chain.call(self._refused, job_id, assignment.escrow, spec)
        except UNRELEASED as exc:
            log.warning("job %s: its refusal releases no escrow: %s", job_id, exc)
            return
        await self._release_escrow(entry, reason)

    def _refused(self, job_id: str, ref: str, spec: JobSpec) -> JobEntry:
        """The journal entry of a refused job whose escrow, on chain, is well formed for this
        job and this provider's offer (`check_terms`): what the acceptance check refused was
        the job (its bundle, image, price or time), not the escrow. An escrow that is not
        this provider's or not this job's gets nothing signed (Refused): a misbehaving market
        or renter made it, and its renter refunds it after the close."""
        escrow = self.chain.utxo(ref)
        if escrow is None:
            raise Refusal(f"no unspent escrow {ref} on chain")
        job = self._escrow_job(escrow, spec)
        datum = check_terms(job.context, job.deployment, escrow, spec, job.offer)
        return JobEntry(
            job_id=job_id, escrow=ref, spec=spec, price_per_unit=datum.price_per_unit,
            gpu_uuids=[], slot=-1, close_ms=datum.close, accepted_at_ms=self.chain.now_ms(),
            unspent_at=self.chain.tip_point(),
        )  # fmt: skip

    async def _release_escrow(self, entry: JobEntry, reason: str) -> None:
        """Sign a zero-unit receipt for a job that did not run, keep it in the journal, and
        hand it to the market with the reason; a plain failure when the escrow is gone or
        the chain cannot be read before the close."""
        until = entry.close_ms - self.settings.payout_margin_ms
        try:
            escrow = await self.chain.call_until(until, self.chain.utxo, entry.escrow)
        except ChainUnavailable as exc:
            await self.fail(entry, f"{reason} (no zero receipt: {exc})")
            return
        if escrow is None:
            await self.fail(entry, reason)
            return
        deployment = self.chain.deployment
        zero = Receipt.sign(
            self.key, deployment.network_id, deployment.settle_hash, escrow.input, 0,
            EMPTY_HASH, EMPTY_HASH,
        )  # fmt: skip
        entry = entry.model_copy(update={"stage": "finished", "receipt": zero, "reason": reason})
        self.journal.save(entry)
        log.warning("job %s did not run (%s): its escrow is released", entry.job_id, reason)
        await self.deliver(entry)

    async def _hand_in_failure(self, entry: JobEntry) -> None:
        """The reason and the zero-unit receipt to the market (once: a job it already moved
        past failed has them)."""
        assert entry.receipt is not None and entry.reason is not None
        if await self._market_state(entry.job_id) not in RELEASED:
            failure = {"reason": entry.reason[:4096], "receipt": entry.receipt.body()}
            path = f"/jobs/{entry.job_id}/failure"
            await self.link.send("POST", path, Body.of_json(failure), retry_for_s=CALL_S)
        self.journal.save(entry.model_copy(update={"receipt_sent": True, "stage": "delivered"}))
        log.info("job %s: its zero receipt is with the market", entry.job_id)

    def _fail_locally(self, job_id: str, reason: str) -> None:
        entry = self.journal.get(job_id)
        if entry is not None:
            self.journal.save(entry.model_copy(update={"stage": "failed", "reason": reason}))
        log.warning("job %s dropped: %s", job_id, reason)

    # -- bookkeeping ---------------------------------------------------------------------

    def release(self, job_id: str) -> None:
        self.capacity.release(job_id)
        self.freed.set()

    def spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a job task failed", exc_info=task.exception())


class LogShipper:
    """A job's output, line by line, to the market in small batches. Best effort: the whole
    log is in the job's results anyway, so a batch the market cannot take is dropped."""

    def __init__(self, link: MarketLink, job_id: str) -> None:
        self.link = link
        self.job_id = job_id
        self.partial = ""
        self.lines: list[str] = []
        self.closed = False
        self.wake = asyncio.Event()

    def add(self, text: str) -> None:
        *complete, self.partial = (self.partial + text).split("\n")
        self.lines.extend(complete)
        if complete:
            self.wake.set()

    def close(self) -> None:
        if self.partial:
            self.lines.append(self.partial)
            self.partial = ""
        self.closed = True
        self.wake.set()

    async def ship(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.lines:
                batch, self.lines = self.lines[:LOG_BATCH], self.lines[LOG_BATCH:]
                path = f"/jobs/{self.job_id}/logs"
                try:
                    await self.link.send("POST", path, Body.of_json({"lines": batch}),
                                         retry_for_s=5)  # fmt: skip
                except MarketError as exc:
                    log.info("job %s: %d log lines not shipped: %s", self.job_id, len(batch), exc)
            if self.closed:
                return
            await asyncio.sleep(LOG_FLUSH_S)


def asked(assignment: Assignment) -> Resources | None:
    """The resources an assignment's spec asks (None: not a readable spec; refused later)."""
    try:
        return JobSpec.model_validate(assignment.spec).resources
    except ValidationError:
        return None
