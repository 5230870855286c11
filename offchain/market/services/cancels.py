"""A renter's cancel. Before any lock the market just drops the quote. A locked job's Cancel
needs both parties' signatures: the renter posts the unsigned transaction here, the market
checks it is a Cancel of this job's escrow and nothing else (`check_cancel`, the provider's
own check), stores it and stops assigning the job; the provider's daemon reads it with its
assignments and answers: its witness (the job had not started), "stopping" (it had: the run
is billed for the units it used, by a receipt settled as usual) or a refusal. The renter adds
its own witness to a signed one and submits it; the chain follower makes the job cancelled.
Every step is an event in the job's timeline.
"""

from __future__ import annotations

from typing import Any

from pycardano import PaymentVerificationKey, Transaction, VerificationKeyWitness
from sqlmodel import Session, col, update

from offchain.market import schemas
from offchain.market.errors import Conflict, Invalid
from offchain.market.models import CancelState, Cause, Job, JobState
from offchain.market.services import jobs
from offchain.market.services.chain import Chain
from offchain.protocol.api import wire
from offchain.protocol.checks.cancel_check import CancelRefused, check_cancel
from offchain.protocol.ledger.payloads import verify
from offchain.protocol.tx.txbuild import with_witnesses

S = JobState
UNLOCKED = (S.REQUESTED, S.QUOTED)
WAITING_OR_SIGNED = (CancelState.REQUESTED, CancelState.SIGNED)


def request(session: Session, chain: Chain, job: Job, body: schemas.CancelRequest) -> Job:
    """Drop a job nothing was locked for; for a locked one store the renter's Cancel for its
    provider to answer (again, replacing one it has not answered or refused)."""
    if job.state in UNLOCKED:
        jobs.transition(session, job, S.EXPIRED, Cause.API, "cancelled by the renter: no lock")
        session.commit()
        return job
    jobs.expect(job, *jobs.CANCELLABLE)
    if job.cancel_state == CancelState.STOPPING:
        raise Conflict(f"job {job.id} is being stopped by its provider already", "state")
    if body.transaction is None:
        raise Invalid(f"job {job.id} is locked: post the Cancel of its escrow", "transaction")
    tx = transaction(body.transaction)
    escrow = job.escrow
    provider = PaymentVerificationKey(job.provider_key).hash()
    try:
        check_cancel(tx, chain.deployment, escrow, provider, chain.utxo)
    except CancelRefused as exc:
        raise Invalid(f"not a cancel of escrow {job.escrow_ref}: {exc}", "transaction") from exc
    stored = job.cancel_tx
    if job.cancel_state in WAITING_OR_SIGNED and stored and transaction(stored).id == tx.id:
        return job  # the same Cancel again (a retry): kept, with any witness its provider added
    advance(session, job, CancelState.REQUESTED, body.transaction)
    job.cancel_refusal = None
    jobs.note(session, job, Cause.API, f"cancel requested by the renter: transaction {tx.id}")
    session.commit()
    return job


def answer(session: Session, job: Job, body: schemas.CancelAnswer) -> Job:
    """The provider's answer to the cancel it was handed: its witness is checked against the
    stored transaction and added to it."""
    if job.cancel_state != CancelState.REQUESTED or job.cancel_tx is None:
        raise Conflict(f"job {job.id} has no cancel waiting for its provider", "state")
    jobs.expect(job, *jobs.CANCELLABLE)
    tx = job.cancel_tx
    action = CancelState(body.action)
    if action == CancelState.SIGNED:
        tx = _witnessed(job, body.signature)
        jobs.note(session, job, Cause.API, "cancel signed by the provider: the renter submits it")
    elif action == CancelState.STOPPING:
        jobs.note(session, job, Cause.API, "cancel: the provider stops the running job and "
                  "signs a receipt for the units it used")  # fmt: skip
    elif action == CancelState.REFUSED and body.reason:
        job.cancel_refusal = body.reason
        jobs.note(session, job, Cause.API, f"cancel refused by the provider: {body.reason}")
    else:
        raise Invalid("answer signed (with signature), stopping, or refused (with reason)",
                      "action")  # fmt: skip
    advance(session, job, CancelState(body.action), tx)
    session.commit()
    return job


def advance(session: Session, job: Job, state: CancelState, tx: str | None) -> None:
    """Move the job's cancel from what this request read to (state, tx), or refuse if another
    request moved it meanwhile: a renter's second Cancel and the provider's witness to the first
    can race, and a plain write would pair one's state with the other's transaction (a "signed"
    cancel holding an unsigned transaction). One conditional UPDATE, atomic on both databases;
    it runs before any other change to the row is flushed."""
    with session.no_autoflush:
        moved = session.exec(
            update(Job)
            .where(col(Job.id) == job.id, _is(col(Job.cancel_state), job.cancel_state),
                   _is(col(Job.cancel_tx), job.cancel_tx))
            .values(cancel_state=state, cancel_tx=tx)
        )  # fmt: skip
    if moved.rowcount != 1:
        session.rollback()
        raise Conflict(f"job {job.id}'s cancel changed meanwhile: read it again", "state")
    job.cancel_state, job.cancel_tx = state, tx


def _is(column: Any, value: object) -> Any:
    return column.is_(None) if value is None else column == value


def view(job: Job) -> wire.CancelView:
    return wire.CancelView(
        job_state=job.state, state=job.cancel_state, transaction=job.cancel_tx,
        refusal=job.cancel_refusal,
    )  # fmt: skip


def transaction(cbor_hex: str) -> Transaction:
    try:
        return Transaction.from_cbor(bytes.fromhex(cbor_hex))
    except Exception as exc:  # pycardano raises several kinds for bytes of another shape
        raise Invalid(f"not a transaction: {exc}", "transaction") from exc


def _witnessed(job: Job, signature: str | None) -> str:
    """The stored Cancel with the provider's witness, if `signature` is its key's over it."""
    assert job.cancel_tx is not None and job.provider_vkey is not None
    tx = transaction(job.cancel_tx)
    vkey = job.provider_key
    if signature is None or not verify(vkey, tx.id.payload, bytes.fromhex(signature)):
        raise Invalid("not the provider's signature of the cancel transaction", "signature")
    witness = VerificationKeyWitness(PaymentVerificationKey(vkey), bytes.fromhex(signature))
    return with_witnesses(tx, [witness]).to_cbor_hex()
