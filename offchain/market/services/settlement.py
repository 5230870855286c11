"""The settlement batcher: verified receipts become batch settle transactions, paid for by the
market's own wallet (the fee allowances come back to it as change).

It never builds two transactions that spend one escrow. A transaction is recorded, signed
bytes and all, with its jobs moved to settling, before it is first submitted; from then on
its escrows are not batched again until it can no longer land (its ttl passed at the chain's
tip while the escrow stayed unspent) or the ledger refused its first submission (nobody else
ever had its bytes). Until then a restart or a rollback resubmits the same bytes. The chain
follower, not the batcher, decides that a transaction landed (`confirmed`).

The market never pays more than the fee allowances of the escrows it settles: a built
transaction that would cost the wallet more than the allowances bring is not sent. It never
tops up a payout either. Every lock holds a return deposit, so a consumer's refund always
reaches the ledger's minimum UTxO; a provider whose payout for a receipt is below that minimum
is left out of the batch and its receipt stays pending: the provider's own daemon settles it
(its own change raises its own output), at the latest near the close. A receipt the market
will not settle (a spent escrow, a window about to close) is dropped from its queue with the
reason in the job's timeline, and the next one taken in its place: no number of bad receipts
holds up a good one.

Up to `settle_in_flight_max` transactions are in flight at once, each paying its fee from
wallet UTxOs that none of the others spends (its change comes back as a new one once it
lands). A wallet of one UTxO therefore settles one transaction at a time; one funded in N
outputs of at least `FEE_RESERVE` keeps N batches in the pipeline.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from pycardano import PaymentSigningKey, Transaction, TransactionInput
from sqlalchemy import Engine
from sqlmodel import Session, col, select, update

from offchain.chain.ogmios import OgmiosError
from offchain.chain.submit import UNREACHABLE, submit_sync
from offchain.chain.time import iso
from offchain.core.sealed_keys import plain_key_warning, read_key_text
from offchain.market.models import Cause, Job, JobState, Settlement
from offchain.market.models import SettlementState as Sent
from offchain.market.ops import metrics as market_metrics
from offchain.market.services import jobs
from offchain.market.services.chain import Chain, parse_ref
from offchain.market.services.crash import crash_point
from offchain.market.services.sweep import sweeper_of
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx import batch as batches
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.budgets import ExecutionBudgets
from offchain.protocol.tx.txbuild import BuildError, Clock, TooBig, Wallet, fee_inputs

log = logging.getLogger(__name__)
S = JobState
IN_FLIGHT = (Sent.BUILT, Sent.SUBMITTED)
WINDOW_MARGIN_MS = 60_000  # leave a receipt whose window closes sooner than this to a refund


def market_wallet(settings: MarketSettings, chain: Chain) -> Wallet | None:
    """The market's own wallet from its key file, or None when none is configured."""
    if settings.wallet_key is None:
        return None
    plain_key_warning(settings.wallet_key)
    key = PaymentSigningKey.from_json(read_key_text(settings.wallet_key))  # sealed or plain
    return Wallet.of(key, chain.deployment.network)


class Batcher:
    """Builds, records, submits and reconciles settle transactions (the leader runs it)."""

    def __init__(
        self, engine: Engine, chain: Chain, wallet: Wallet, settings: MarketSettings
    ) -> None:
        self.engine, self.chain, self.wallet, self.settings = engine, chain, wallet, settings
        self.batch_max = settings.settle_batch_max
        self.size_fits = settings.settle_batch_max  # escrows a batch holds under the size limit
        self.unsettleable: dict[str, str] = {}  # job id -> why a transaction of it alone failed
        self.waiting: set[str] = set()  # job ids whose provider payout is below the minimum
        self.budgets = ExecutionBudgets()  # batches of a shape seen before skip evaluation
        self.spends: dict[str, frozenset[TransactionInput]] = {}  # in flight: tx id -> inputs
        self.sweeper = sweeper_of(settings, chain, wallet)  # None: the surplus stays here

    def run(self) -> None:
        """One round: reconcile what is in flight, then build batches while there is room."""
        with Session(self.engine, expire_on_commit=False) as session:
            pending = session.exec(
                select(Settlement).where(col(Settlement.state).in_((*IN_FLIGHT, Sent.CONFLICTED)))
            ).all()  # fmt: skip
        tip = Clock.now(self.chain.context).tip_slot
        for settlement in pending:
            if tip >= settlement.ttl_slot:
                self._release(settlement)
            elif settlement.state in IN_FLIGHT:
                self._resubmit(settlement)
        in_flight = [s for s in pending if s.state in IN_FLIGHT and tip < s.ttl_slot]
        if self.sweeper is not None:
            self.sweeper.sweep(self._spent_by(in_flight))
        while len(in_flight) < self.settings.settle_in_flight_max:
            busy = self._spent_by(in_flight)
            if in_flight and not self._can_pay(busy):
                return
            sent = self._settle_next(busy)
            if sent is None:
                return
            in_flight.append(sent)

    def _spent_by(self, in_flight: Sequence[Settlement]) -> frozenset[TransactionInput]:
        """The wallet UTxOs the transactions in flight spend (their inputs and collateral, and
        a sweep's not landed yet)."""
        self.spends = {s.tx_id: self.spends.get(s.tx_id) or _spends(s.tx_cbor) for s in in_flight}
        swept = frozenset() if self.sweeper is None else self.sweeper.busy()
        return swept.union(*self.spends.values())

    def _can_pay(self, busy: frozenset[TransactionInput]) -> bool:
        """Whether the wallet holds a fee UTxO that no transaction in flight spends."""
        try:
            fee_inputs(self.chain.context, self.wallet.address, busy=busy)
        except BuildError:
            return False
        return True

    # --- what is in flight ----------------------------------------------------------------------

    def _resubmit(self, settlement: Settlement) -> None:
        """Submit the same signed bytes again if it has not been seen in a block for a while (a
        restart before its first submission, a rollback that dropped it)."""
        since = settlement.submitted_at_ms
        if since is not None and jobs.now_ms() - since < self.settings.resubmit_after_ms:
            return
        try:
            self._submit(bytes.fromhex(settlement.tx_cbor))
        except OgmiosError as exc:  # in a mempool or a block already, or its escrows spent
            log.info("resubmitting %s: %s", settlement.tx_id, exc.message)
        except UNREACHABLE as exc:
            log.warning("resubmitting %s: the chain is unreachable: %s", settlement.tx_id, exc)
            return
        self._mark(settlement.tx_id, Sent.SUBMITTED)

    def _release(self, settlement: Settlement, why: str = "") -> None:
        """The transaction can no longer land: its jobs whose escrow is still unspent go back to
        the queue. Jobs whose escrow is spent wait for the follower to say by what."""
        why = why or f"settle transaction {settlement.tx_id} expired before it landed"
        waiting = False
        with Session(self.engine, expire_on_commit=False) as session:
            for ref in (parse_ref(text, "escrow") for text in json.loads(settlement.escrows)):
                job = jobs.by_escrow(session, ref)
                if job is None or job.state != S.SETTLING or job.settle_tx != settlement.tx_id:
                    continue
                if self.chain.utxo(ref) is None:
                    waiting = True
                    continue
                job.settle_tx = None
                back = S.COMPLETED if job.failure_reason is None else S.FAILED  # its zero receipt
                jobs.transition(session, job, back, Cause.SCHEDULER, why)
            if not waiting:  # conditional, as in _mark: the follower may confirm it meanwhile
                ended = Sent.REFUSED if settlement.state == Sent.REFUSED else Sent.EXPIRED
                session.exec(
                    update(Settlement)
                    .where(col(Settlement.tx_id) == settlement.tx_id,
                           col(Settlement.state) != Sent.CONFIRMED)
                    .values(state=ended, updated_at_ms=jobs.now_ms())
                )  # fmt: skip
            session.commit()

    def _mark(self, tx_id: str, state: Sent) -> None:
        """One conditional UPDATE, not a read then a write: the follower may confirm the row
        between the two (a fast block), and a plain write would put it back in flight."""
        now = jobs.now_ms()
        with Session(self.engine) as session:
            session.exec(
                update(Settlement)
                .where(col(Settlement.tx_id) == tx_id, col(Settlement.state).in_(IN_FLIGHT))
                .values(state=state, updated_at_ms=now, submitted_at_ms=now)
            )
            session.commit()

    def _submit(self, cbor: bytes) -> None:
        submit_sync(self.settings.ogmios_url, cbor)

    # --- the next batch -------------------------------------------------------------------------

    def _settle_next(self, busy: frozenset[TransactionInput]) -> Settlement | None:
        """The next batch built, recorded and submitted; None when there is none to send."""
        batch = self._collect()
        if not batch or self._waiting_for_more(batch):
            return None
        try:
            tx = self._build([receipt for _, receipt in batch], busy)
        except TooBig as exc:  # no failure: fewer escrows fit, found before anything is sent
            if len(batch) > 1:
                self.batch_max = self.size_fits = exc.fitting(len(batch))
                log.info("a batch of %d: %s; trying %d", len(batch), exc, self.batch_max)
            else:
                self._failed([job for job, _ in batch], str(exc), lasting=True)
            return None
        except BuildError as exc:
            market_metrics.batch_failed()
            self._failed([job for job, _ in batch], str(exc), lasting=isinstance(exc, TooDear))
            return None
        settlement = self._record(tx, [job for job, _ in batch])
        if settlement is None:
            return None
        self.spends[settlement.tx_id] = _spends(settlement.tx_cbor)
        crash_point(self.settings, "settlement-built")
        try:
            self._submit(tx.to_cbor())
        except OgmiosError as exc:  # never in a mempool: nobody can land it, release now
            settlement.state = Sent.REFUSED
            market_metrics.batch_failed()
            self._release(settlement, f"the ledger refused {settlement.tx_id}: {exc.message}")
            if self.budgets.declared:  # maybe only the remembered units: evaluate it again
                self.budgets.forget()
            else:
                self._failed([job for job, _ in batch], exc.message)
            return None
        except UNREACHABLE as exc:  # it may have reached the node: resubmitted later
            log.warning("submitting %s: the chain is unreachable: %s", settlement.tx_id, exc)
            return None
        crash_point(self.settings, "settlement-submitted")
        self._mark(settlement.tx_id, Sent.SUBMITTED)
        market_metrics.batch_submitted(len(batch), tx.transaction_body.fee)
        self.batch_max = self.size_fits
        log.info("submitted %s settling %d escrow(s)", settlement.tx_id, len(batch))
        return settlement

    def _waiting_for_more(self, batch: Sequence[tuple[Job, batches.ToSettle]]) -> bool:
        """A batch short of full waits while its oldest receipt is younger than
        `settle_wait_ms`: fewer transactions, one fee (`unchained demo --jobs N` shows it)."""
        oldest = batch[0][0].updated_at_ms  # receipts_to_settle: oldest first
        wait = self.settings.settle_wait_ms
        return len(batch) < self.batch_max and jobs.now_ms() - oldest < wait

    def _build(
        self, receipts: Sequence[batches.ToSettle], busy: frozenset[TransactionInput]
    ) -> Transaction:
        """The settle transaction, signed by the market's wallet: the one place it signs."""
        context, deployment = self.chain.context, self.chain.deployment
        tx = batches.settle(context, deployment, receipts, self.wallet.address, self.budgets, busy)
        over = _wallet_pays(tx, receipts, self.wallet)
        if over > 0:
            raise TooDear(f"its fee takes {over} lovelace more than its escrows' fee allowances")
        return self.wallet.sign(tx)

    def _collect(self) -> list[tuple[Job, batches.ToSettle]]:
        """Up to `batch_max` receipts to settle, oldest first. One the market will not settle
        is left to the parties (`_leave`), one whose provider payout is too small waits
        (`_wait`), and the next taken in its place."""
        closing = Clock.now(self.chain.context).tip_ms + WINDOW_MARGIN_MS
        batch: list[tuple[Job, batches.ToSettle]] = []
        while len(batch) < self.batch_max:
            skip = [*self.unsettleable, *self.waiting, *(job.id for job, _ in batch)]
            with Session(self.engine, expire_on_commit=False) as session:
                queued = jobs.receipts_to_settle(session, self.batch_max - len(batch), skip)
            if not queued:
                break
            for job in queued:
                try:
                    batch.append((job, self._receipt(job, closing)))
                except Left as exc:
                    self._leave(job, str(exc))
                except batches.SmallPayout as exc:
                    self._wait(job, str(exc))
        return batch

    def _receipt(self, job: Job, closing: int) -> batches.ToSettle:
        """The job's receipt on its unspent escrow; Left when the market leaves it (its window
        closes before `closing`, its escrow is spent, its receipt claims more than the escrow
        holds), SmallPayout when its provider's payout is below the ledger's minimum UTxO."""
        close = job.close_ms
        if close < closing:
            raise Left(f"its settle window closes at {iso(close)}: too soon to land a settle")
        utxo = self.chain.utxo(job.escrow)
        if utxo is None:
            raise Left(f"its escrow {job.escrow_ref} is spent (the follower records by what)")
        receipt = job.receipt
        assert receipt is not None  # receipts_to_settle: jobs with one
        try:
            datum = escrows.escrow_datum(self.chain.deployment, utxo)
            due = settle_split(
                utxo.output.amount.coin, datum.price_per_unit, receipt.units, datum.max_units,
                datum.fee_allowance,
            ).provider  # fmt: skip
        except (BuildError, ValueError) as exc:
            raise Left(f"cannot settle {job.escrow_ref}: {exc}") from exc
        to = from_plutus(datum.provider, self.chain.deployment.network)
        least = batches.payout_minimum(self.chain.context, to)
        if 0 < due < least:
            raise batches.SmallPayout(
                f"its provider earns {due} lovelace, below the ledger's minimum UTxO of {least}: "
                "the market tops up nothing, so its provider settles it itself"
            )
        return utxo, receipt

    def _wait(self, job: Job, why: str) -> None:
        """Keep `job`'s receipt pending but out of this process's batches, saying why once in
        its timeline: the chain's minimum changes seldom, a restart looks again."""
        self.waiting.add(job.id)
        with Session(self.engine) as session:
            row = session.get(Job, job.id)
            if row is not None:
                jobs.note(session, row, Cause.SCHEDULER, f"waits for its provider: {why}")
                session.commit()
        log.info("job %s waits for its provider: %s", job.id, why)

    def _leave(self, job: Job, why: str) -> None:
        """Drop `job`'s receipt from the market's queue for good, saying why in its timeline,
        if it still waits there (rows locked)."""
        with Session(self.engine) as session:
            query = select(Job).where(
                Job.id == job.id, col(Job.state).in_((S.COMPLETED, S.FAILED)),
                col(Job.unsettleable).is_(None),
            )  # fmt: skip
            row = session.exec(query.with_for_update()).first()
            if row is not None:
                jobs.leave_unsettled(session, row, why)
                session.commit()
        log.warning("job %s is left to its parties: %s", job.id, why)

    def _record(self, tx: Transaction, chosen: Sequence[Job]) -> Settlement | None:
        """Store the transaction and move its jobs to settling, in one database transaction,
        if they are all still waiting (rows locked); None when one moved meanwhile."""
        tx_id = tx.id.payload.hex()
        ids = [job.id for job in chosen]
        with Session(self.engine, expire_on_commit=False) as session:
            query = select(Job).where(
                col(Job.id).in_(ids), col(Job.state).in_((S.COMPLETED, S.FAILED))
            )
            locked = session.exec(query.with_for_update()).all()
            if len(locked) != len(ids):
                return None  # the unsigned, unsubmitted transaction is simply dropped
            now = jobs.now_ms()
            settlement = Settlement(
                tx_id=tx_id, state=Sent.BUILT, escrows=json.dumps([j.escrow_ref for j in chosen]),
                tx_cbor=tx.to_cbor().hex(), ttl_slot=tx.transaction_body.ttl,
                created_at_ms=now, updated_at_ms=now,
            )  # fmt: skip
            session.add(settlement)
            for job in locked:
                job.settle_tx = tx_id
                jobs.transition(
                    session, job, S.SETTLING, Cause.SCHEDULER,
                    f"in settle transaction {tx_id} ({len(ids)} escrows)", tx_id=tx_id,
                )  # fmt: skip
            session.commit()
        return settlement

    def _failed(self, batch: Sequence[Job], why: str, lasting: bool = False) -> None:
        """A batch that could not be built or was refused is halved until the job at fault is
        alone; a job that fails alone is left out (and logged) for this process's life, or for
        good (`_leave`) when the reason lasts."""
        if len(batch) > 1:
            self.batch_max = max(1, len(batch) // 2)
            log.warning("a batch of %d failed (%s); trying %d", len(batch), why, self.batch_max)
        elif lasting:
            self._leave(batch[0], why)
        else:
            self.unsettleable[batch[0].id] = why
            log.error("job %s cannot be settled by the market: %s", batch[0].id, why)


class TooDear(BuildError):
    """The settle would take more from the market's wallet than its escrows' allowances."""


class Left(Exception):
    """The market leaves this receipt to its parties for good; the message says why."""


def _wallet_pays(tx: Transaction, receipts: Sequence[batches.ToSettle], wallet: Wallet) -> int:
    """What `tx` takes from `wallet` net: everything it pays out and its fee, less what its
    escrows and withdrawal bring (the rest comes back to the wallet as change)."""
    body = tx.transaction_body
    paid = sum(out.amount.coin for out in body.outputs if out.address != wallet.address)
    brought = sum(escrow.output.amount.coin for escrow, _ in receipts)
    return paid + body.fee - brought - sum((body.withdraws or {}).values())


def _spends(tx_cbor: str) -> frozenset[TransactionInput]:
    body = Transaction.from_cbor(tx_cbor).transaction_body
    return frozenset([*body.inputs, *(body.collateral or [])])
