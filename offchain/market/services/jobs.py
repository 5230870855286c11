"""Jobs and their state machine: the one place a job changes state, and the queries the chain
follower, the settlement batcher and the scheduler start from.

Every change goes through `transition`, which checks the move against `TRANSITIONS` (`FORWARD`
only for an API call: the moves back are the chain follower's and the batcher's) and
writes a JobEvent with its cause (an API call, a block and transaction, scheduled work), so
the explorer's timeline is the table itself.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import TypedDict, Unpack

from pycardano import TransactionInput
from sqlmodel import Session, col, select

from offchain.chain.utxo import format_out_ref
from offchain.market import db
from offchain.market.errors import Conflict, Forbidden
from offchain.market.models import CancelState, Cause, Job, JobEvent, JobState

S = JobState
# The moves a job makes as it goes its way: the only ones an API call may make.
FORWARD: dict[JobState, frozenset[JobState]] = {
    S.REQUESTED: frozenset({S.QUOTED, S.EXPIRED}),
    S.QUOTED: frozenset({S.FUNDED, S.EXPIRED}),
    S.FUNDED: frozenset({S.ACCEPTED, S.FAILED, S.REFUNDED, S.CANCELLED}),
    S.ACCEPTED: frozenset({S.RUNNING, S.FAILED, S.REFUNDED, S.SLASHED, S.CANCELLED}),
    S.RUNNING: frozenset({S.COMPLETED, S.FAILED, S.REFUNDED, S.SLASHED, S.CANCELLED}),
    S.COMPLETED: frozenset({S.SETTLING, S.SETTLED, S.REFUNDED, S.SLASHED, S.CANCELLED}),
    S.SETTLING: frozenset({S.SETTLED, S.REFUNDED, S.SLASHED, S.CANCELLED}),
    S.FAILED: frozenset({S.SETTLING, S.SETTLED, S.REFUNDED, S.SLASHED, S.CANCELLED}),
    S.EXPIRED: frozenset({S.FUNDED, S.REFUNDED, S.CANCELLED}),
    S.SETTLED: frozenset(),
    S.REFUNDED: frozenset(),
    S.SLASHED: frozenset(),
    S.CANCELLED: frozenset(),
}
# The moves back: the chain follower's undo of a rollback, the batcher's release of a settle
# transaction that can no longer land. Never an API call's (a closed job stays closed).
BACK: dict[JobState, frozenset[JobState]] = {
    S.FUNDED: frozenset({S.QUOTED}),
    S.SETTLING: frozenset({S.COMPLETED, S.FAILED}),  # a failed job's zero-unit receipt too
    S.SETTLED: frozenset({S.SETTLING, S.COMPLETED, S.FAILED}),
    S.REFUNDED: frozenset({S.FUNDED, S.ACCEPTED, S.RUNNING, S.COMPLETED, S.FAILED, S.EXPIRED}),
    S.SLASHED: frozenset({S.ACCEPTED, S.RUNNING, S.COMPLETED, S.FAILED}),
    S.CANCELLED: frozenset(
        {S.FUNDED, S.ACCEPTED, S.RUNNING, S.COMPLETED, S.SETTLING, S.FAILED, S.EXPIRED}
    ),
}
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    state: FORWARD[state] | BACK.get(state, frozenset()) for state in JobState
}
# Locked states a renter may cancel: the provider signs the Cancel or stops the job.
CANCELLABLE = (S.FUNDED, S.ACCEPTED, S.RUNNING)
# States whose escrow is on chain and not yet spent: the follower watches these.
LOCKED = (S.FUNDED, S.ACCEPTED, S.RUNNING, S.COMPLETED, S.SETTLING, S.FAILED)
# States after which the job's record no longer changes but for a rollback.
FINAL = (S.SETTLED, S.REFUNDED, S.SLASHED, S.EXPIRED, S.CANCELLED)


def now_ms() -> int:
    """The market's own clock for its records (events, heartbeats, request freshness): not a
    chain time, so it is never compared with a deadline or a validity bound."""
    return time.time_ns() // 1_000_000


def new_job_id() -> str:
    return secrets.token_hex(16)


class OnChain(TypedDict, total=False):
    """Where on chain a move was seen, when the chain caused it (the event's columns)."""

    slot: int
    block_height: int
    tx_id: str


def transition(
    session: Session, job: Job, to_state: JobState, cause: Cause, detail: str = "",
    **on_chain: Unpack[OnChain],
) -> JobEvent:  # fmt: skip
    """Move `job` to `to_state` and record why; Conflict if the table forbids the move. The
    caller commits (with whatever else the move changes, in one transaction)."""
    event = move(job, to_state, cause, detail, **on_chain)
    session.add(job)
    session.add(event)
    return event


def move(
    job: Job, to_state: JobState, cause: Cause, detail: str = "", **on_chain: Unpack[OnChain]
) -> JobEvent:
    """`transition` without a session: the job moved and its event, for the caller to store
    (the signed request's hot path writes them with its nonce in one statement batch). An API
    call moves a job forward only; Conflict names the state it is in."""
    allowed = FORWARD if cause == Cause.API else TRANSITIONS
    if to_state not in allowed[job.state]:
        raise Conflict(f"job {job.id} is {job.state}: it cannot become {to_state}", "state")
    at = now_ms()
    event = JobEvent(
        job_id=job.id, at_ms=at, from_state=job.state, to_state=to_state, cause=cause,
        detail=detail, **on_chain,
    )  # fmt: skip
    job.state, job.updated_at_ms = to_state, at
    return event


def first_event(job: Job, detail: str) -> JobEvent:
    """A new job's first event, by an API call."""
    return JobEvent(
        job_id=job.id, at_ms=job.created_at_ms, to_state=job.state, cause=Cause.API, detail=detail
    )


def get(session: Session, job_id: str) -> Job:
    return db.found(session, Job, job_id, f"no job {job_id}", "job_id")


def visible_to(session: Session, job_id: str, party: str) -> Job:
    """The job, if `party` (a key hash) is its consumer or provider; Forbidden otherwise."""
    job = get(session, job_id)
    if party not in (job.consumer_id, job.provider_id):
        raise Forbidden(f"job {job.id} belongs to another party", "job_id")
    return job


def expect(job: Job, *states: JobState) -> None:
    if job.state not in states:
        wanted = " or ".join(states)
        raise Conflict(f"job {job.id} is {job.state}, not {wanted}", "state")


def events(session: Session, job_id: str, after_id: int = 0) -> Sequence[JobEvent]:
    """The job's timeline, oldest first, from after event `after_id` (SSE resumes there)."""
    query = select(JobEvent).where(JobEvent.job_id == job_id, col(JobEvent.id) > after_id)
    return session.exec(query.order_by(col(JobEvent.id))).all()


def by_escrow(session: Session, escrow: TransactionInput) -> Job | None:
    """The job locked at `escrow`, for the chain follower."""
    return session.exec(select(Job).where(Job.escrow_ref == format_out_ref(escrow))).first()


def assignments(session: Session, provider_id: str, new: bool = True) -> Sequence[Job]:
    """What `provider_id` has to answer, oldest first: its jobs whose renter asked to cancel
    them, and (`new`: it has a free slot) funded jobs waiting for it to accept them."""
    asked = (col(Job.cancel_state) == CancelState.REQUESTED) & col(Job.state).in_(CANCELLABLE)
    waiting = (col(Job.state) == S.FUNDED) & col(Job.cancel_state).is_(None)
    query = select(Job).where(Job.provider_id == provider_id, asked | waiting if new else asked)
    return session.exec(query.order_by(col(Job.updated_at_ms))).all()


def locked(session: Session) -> Sequence[Job]:
    """Jobs whose escrow is on chain and unspent as far as the market knows (follower)."""
    return session.exec(select(Job).where(col(Job.state).in_(LOCKED))).all()


def receipts_to_settle(session: Session, limit: int, skip: Sequence[str] = ()) -> Sequence[Job]:
    """Jobs holding a verified receipt and not yet in a settlement, oldest first (batcher),
    but those it left to the parties and those in `skip`.

    A failed job may hold a receipt too (the provider is owed the seconds it ran)."""
    query = select(Job).where(
        col(Job.state).in_((S.COMPLETED, S.FAILED)), col(Job.receipt_signature).is_not(None),
        col(Job.unsettleable).is_(None), col(Job.id).not_in(skip),
    )  # fmt: skip
    return session.exec(query.order_by(col(Job.updated_at_ms)).limit(limit)).all()


def leave_unsettled(session: Session, job: Job, why: str) -> None:
    """The market's batcher will not settle `job`'s receipt: say why in its timeline (the
    provider may still settle it itself, or the consumer refunds after the close)."""
    job.unsettleable = why
    note(session, job, Cause.SCHEDULER, f"not settled by the market: {why}")


def note(session: Session, job: Job, cause: Cause, detail: str) -> None:
    """An event in `job`'s timeline that leaves its state as it is (stores the job too)."""
    session.add(job)
    session.add(JobEvent(
        job_id=job.id, at_ms=now_ms(), from_state=job.state, to_state=job.state, cause=cause,
        detail=detail,
    ))  # fmt: skip


def quotes_expired(session: Session, chain_now_ms: int) -> Sequence[Job]:
    """Quotes nobody locked before they ran out (the scheduler moves them to expired)."""
    query = select(Job).where(Job.state == S.QUOTED, col(Job.quote_expires_ms) < chain_now_ms)
    return session.exec(query).all()


def past_deadline(session: Session, chain_now_ms: int) -> Sequence[Job]:
    """Locked jobs whose deadline has passed: refundable (or slashable) after the window."""
    query = select(Job).where(col(Job.state).in_(LOCKED), col(Job.deadline_ms) < chain_now_ms)
    return session.exec(query).all()


def consumers_job(session: Session, job_id: str, party: str) -> Job:
    """The job, if `party` is the consumer who signed its request; Forbidden otherwise."""
    job = get(session, job_id)
    if job.consumer_id != party:
        raise Forbidden(f"job {job_id} was requested by another consumer", "job_id")
    return job
