"""The job loop's work on one assignment: check the escrow on chain (never the market's word),
sign and send the acceptance, run the job with the hardened runner while its log streams to
the market, then sign the receipt and deliver the result archive and the receipt, retrying
until the market takes them or the escrow is about to close (the payout watcher then settles
the receipt itself). Every step is in the journal before it is taken. An unreachable chain
never ends a job: an assignment waits for it, a running job runs on, and its receipt and
delivery retry until the escrow nears its close."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from pycardano import PaymentSigningKey
from pydantic import ValidationError

from offchain.chain.time import iso
from offchain.protocol.escrow import escrow_datum
from offchain.protocol.jobspec import JobSpec
from offchain.protocol.offer import Offer
from offchain.protocol.refusal import Refused
from offchain.protocol.txbuild import BuildError
from provider.config import DaemonSettings
from provider.daemon import evidence
from provider.daemon.bond import BondManager
from provider.daemon.capacity import Bundle, Capacity, Slot
from provider.daemon.chain import CHAIN_DOWN, Chain, ChainUnavailable, in_daemon_thread
from provider.daemon.journal import JobEntry, Journal, SignedReceiptRecord
from provider.daemon.market_link import Body, MarketError, MarketLink, MarketRefused
from provider.receipts import EscrowJob, ReceiptError, accept, receipt_for
from provider.runner import Runner, RunResult

log = logging.getLogger("unchained.provider")
LOG_FLUSH_S = 0.5
LOG_BATCH = 1000
DELIVERED = ("completed", "settling", "settled")  # market states: it has result and receipt
CALL_S = 60.0  # how long one step's request may retry before the step is tried again
RETRY_PAUSE_S = 2.0


class Refusal(Exception):
    """This daemon will not take the assignment; the message says why."""


@dataclasses.dataclass
class Worker:
    chain: Chain
    link: MarketLink
    journal: Journal
    runner: Runner
    bonds: BondManager
    capacity: Capacity
    bundle: Bundle
    key: PaymentSigningKey
    settings: DaemonSettings
    seen: set[str] = dataclasses.field(default_factory=set)
    tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)
    freed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    # -- taking an assignment ------------------------------------------------------------

    async def take(self, assignment: dict[str, Any]) -> bool:
        """Accept the assignment and start it in the background; False when no slot is free
        (it stays assigned, to be taken once one is). A refusal is logged, never signed.
        ChainUnavailable: the escrow cannot be checked now; the assignment stays, to be taken
        once the chain is back."""
        job_id = str(assignment.get("job_id"))
        if job_id in self.seen:
            return True
        slot = self.capacity.take(job_id)
        if slot is None:
            return False
        self.seen.add(job_id)
        log.info("job %s assigned: escrow %s", job_id, assignment.get("escrow"))
        try:
            entry = await self._accept(job_id, assignment, slot)
        except (Refusal, Refused, BuildError) as exc:
            self.release(job_id)
            log.warning("job %s refused: %s", job_id, exc)
            return True
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

    async def _accept(self, job_id: str, assignment: dict[str, Any], slot: Slot) -> JobEntry:
        try:
            spec = JobSpec.model_validate(assignment["spec"])
            ref = str(assignment["escrow"])
        except (KeyError, ValidationError) as exc:
            raise Refusal(f"not a job spec and escrow: {exc}") from exc
        vkey = self.key.to_verification_key().payload
        offered = Offer(vkey, self.chain.wallet.address, self.bundle.price_per_unit, slot.bundle)
        shortfall = offered.shortfall(spec)
        if shortfall:
            raise Refusal(f"the job asks more than this provider's bundle: {shortfall}")
        entry, signature = await self.chain.call(self._check_and_sign, job_id, ref, spec, slot)
        self.journal.save(entry)  # signed: from here on the bond is at stake
        await self.link.send(
            "POST", f"/jobs/{job_id}/acceptance", Body.of_json({"signature": signature.hex()}),
            retry_for_s=CALL_S,
        )  # fmt: skip
        log.info("job %s accepted: escrow %s, slot %d", job_id, ref, slot.index)
        return entry

    def _check_and_sign(
        self, job_id: str, ref: str, spec: JobSpec, slot: Slot
    ) -> tuple[JobEntry, bytes]:
        """The escrow as the chain has it, checked by `accept` with the bond that backs it."""
        escrow = self.chain.utxo(ref)
        if escrow is None:
            raise Refusal(f"no unspent escrow {ref} on chain")
        job = self._escrow_job(escrow, spec)
        datum = escrow_datum(self.chain.deployment, escrow)
        now = self.chain.now_ms()
        if datum.deadline <= now:  # the chain would still settle it, the consumer did not agree
            raise Refusal(
                f"escrow {ref}: its deadline {iso(datum.deadline)} has passed (chain {iso(now)})"
            )
        close = datum.close
        signature = accept(job, self.bonds.backing(close))
        entry = JobEntry(
            job_id=job_id, escrow=ref, spec=spec, price_per_unit=job.price_per_unit,
            gpu_uuids=list(slot.gpu_uuids), slot=slot.index, close_ms=close,
            accepted_at_ms=now, unspent_at=self.chain.tip_point(),
        )  # fmt: skip
        return entry, signature

    def _escrow_job(self, escrow: Any, spec: JobSpec) -> EscrowJob:
        return EscrowJob(
            self.chain.context, self.chain.deployment, escrow, spec,
            self.bundle.price_per_unit, self.key,
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
            )  # fmt: skip
            shipper.close()
            await shipping
        finally:
            self.release(entry.job_id)
        await self.finish(entry, result)

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
        """Sign the receipt for a run that happened and deliver it; report one that did not."""
        if result.record is None:
            await self.fail(entry, f"{result.status}: {result.error}")
            return
        until = entry.close_ms - self.settings.payout_margin_ms
        try:
            escrow = await self.chain.call_until(until, self.chain.utxo, entry.escrow)
            if escrow is None:
                raise ReceiptError(f"escrow {entry.escrow} was spent before the receipt")
            receipt = await self.chain.call_until(
                until, receipt_for, self._escrow_job(escrow, entry.spec), result
            )
        except (Refused, ReceiptError, ChainUnavailable) as exc:
            await self.fail(entry, f"no receipt can be signed: {exc}")
            return
        record = SignedReceiptRecord(
            units=receipt.units, result_hash=receipt.result_hash.hex(),
            evidence_hash=receipt.evidence_hash.hex(), signature=receipt.signature.hex(),
        )  # fmt: skip
        entry = entry.model_copy(update={"stage": "finished", "receipt": record})
        self.journal.save(entry)
        log.info("job %s %s: %d units signed", entry.job_id, result.status, receipt.units)
        await self.deliver(entry)

    async def deliver(self, entry: JobEntry) -> None:
        """Upload the archive and hand in the receipt, retrying until the escrow nears its
        close; past that the payout watcher settles the receipt itself."""
        while True:
            try:
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
        assert entry.receipt is not None
        job = entry.job_id
        state = await self._market_state(job)
        if state in DELIVERED:
            entry = entry.model_copy(update={"uploaded": True, "receipt_sent": True})
        if not entry.uploaded:
            if state == "accepted":  # the market takes a result only while running
                await self._report_start(entry)
            await self.link.send(
                "PUT", f"/jobs/{job}/result", self._archive(entry), retry_for_s=CALL_S
            )
            entry = entry.model_copy(update={"uploaded": True})
            self.journal.save(entry)
        if not entry.receipt_sent:
            body = Body.of_json(entry.receipt.model_dump())
            await self.link.send("POST", f"/jobs/{job}/receipt", body, retry_for_s=CALL_S)
        entry = entry.model_copy(update={"receipt_sent": True, "stage": "delivered"})
        self.journal.save(entry)
        log.info("job %s delivered: %d lovelace due", job, entry.earned)
        return entry

    async def _market_state(self, job_id: str) -> str | None:
        """The job's state at the market (None: it does not know the job)."""
        try:
            status = await self.link.send("GET", f"/jobs/{job_id}", retry_for_s=CALL_S)
        except MarketRefused:
            return None
        return status.get("state")

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
