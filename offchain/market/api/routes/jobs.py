"""Consumer endpoints: request a job, lock its escrow, follow it, read its logs and result.
A job's status, events, logs and result are for its consumer and its provider only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import Engine
from sqlmodel import Session, col, select
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from offchain.market import schemas
from offchain.market.api import streams
from offchain.market.api.deps import (
    ChainDep,
    PartyDep,
    SessionDep,
    SettingsDep,
    UnspentDep,
    storable_params,
)  # fmt: skip
from offchain.market.models import Job
from offchain.market.services import (
    cancels,
    job_ids,
    jobs,
    quotes,
    registry_accounts,
    storage,
    wallet_txs,
)  # fmt: skip
from offchain.market.services.event_feed import EventFeed
from offchain.protocol.api import wire

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[Depends(storable_params)])


def full_job_id(job_id: str, session: SessionDep) -> str:
    """The job the path names by its id, a unique prefix, its escrow ref or spec digest."""
    return job_ids.resolve(session, job_id).id


JobIdDep = Annotated[str, Depends(full_job_id)]


@router.post("", status_code=201)
def request_job(
    request: schemas.JobRequest, unspent: UnspentDep, http: Request, settings: SettingsDep,
    chain: ChainDep,
) -> wire.Quote:  # fmt: skip
    """A signed job request; the answer is a quote embedding the provider's signed offer.
    The matching and the one write transaction run in the route's worker thread, in sessions
    of their own (the hot path: no session dependency to open and close)."""
    engine = http.app.state.engine
    return quotes.request_job(engine, settings, chain, unspent.signed, unspent.nonce, request)


@router.get("")
def my_jobs(
    party: PartyDep, session: SessionDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[wire.JobPublic]:
    """The signer's own jobs as consumer, newest first: `unchained job list` merges them with
    the jobs it recorded locally (a job quoted from another machine shows up too)."""
    query = select(Job).where(Job.consumer_id == party)
    found = session.exec(query.order_by(col(Job.created_at_ms).desc()).limit(limit)).all()
    return [quotes.public(session, job) for job in found]


@router.get("/{job_id}")
def status(party: PartyDep, job_id: JobIdDep, session: SessionDep) -> wire.JobPublic:
    return quotes.public(session, jobs.visible_to(session, job_id, party))


@router.get("/{job_id}/escrow")
def escrow_parameters(
    party: PartyDep, job_id: JobIdDep, session: SessionDep, chain: ChainDep
) -> wire.EscrowParameters:
    """What to lock: the datum's fields and the lovelace (`offchain.protocol.tx.escrow.lock`)."""
    return quotes.escrow_parameters(chain, jobs.consumers_job(session, job_id, party))


@router.get("/{job_id}/lock")
def lock_transaction(
    party: PartyDep, job_id: JobIdDep, session: SessionDep, chain: ChainDep
) -> wire.LockTransaction:
    """The escrow's lock, unsigned, for the consumer's own wallet to sign (CIP-30 `signTx`):
    submit it yourself, or post it signed to this path. The market holds no key."""
    return quotes.lock_transaction(session, chain, jobs.consumers_job(session, job_id, party))


@router.post("/{job_id}/lock")
def submit_lock(
    body: schemas.SignedLock, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    settings: SettingsDep,
) -> wire.Submitted:  # fmt: skip
    """The lock from `GET /jobs/{job_id}/lock`, signed (or unsigned with a wallet's
    `witness_set`): submitted if it is exactly that transaction; the job is funded once the
    escrow is confirmed on chain."""
    job = jobs.consumers_job(session, job_id, party)
    signed = body.transaction
    if body.witness_set is not None:
        signed = wallet_txs.witnessed(body.transaction, body.witness_set)
    return quotes.submit_lock(settings, job, signed)


@router.post("/{job_id}/registry-account", status_code=204)
def registry_account(
    body: schemas.RegistryAccount, party: PartyDep, job_id: JobIdDep, session: SessionDep
) -> None:
    """The renter's registry account for its private image, sealed to the quoted provider's
    key, before the lock: handed to that provider with the job, never shown to anyone."""
    registry_accounts.keep(session, jobs.consumers_job(session, job_id, party), body.sealed)


@router.post("/{job_id}/escrow")
def report_escrow(
    body: schemas.EscrowReport, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    chain: ChainDep,
) -> wire.JobPublic:  # fmt: skip
    """The escrow the consumer locked; checked on chain against the quote, then funded."""
    job = jobs.consumers_job(session, job_id, party)
    return quotes.public(session, quotes.report_escrow(session, chain, job, body.escrow))


@router.post("/{job_id}/cancel")
def cancel(
    body: schemas.CancelRequest, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    chain: ChainDep,
) -> wire.CancelView:  # fmt: skip
    """The renter cancels: a job not locked yet is dropped; a locked one's Cancel (unsigned,
    checked to spend this escrow and nothing else) waits for its provider's answer."""
    job = jobs.consumers_job(session, job_id, party)
    return cancels.view(cancels.request(session, chain, job, body))


@router.get("/{job_id}/cancel")
def cancel_status(party: PartyDep, job_id: JobIdDep, session: SessionDep) -> wire.CancelView:
    """Where the renter's cancel stands; once signed, the Cancel with the provider's witness."""
    return cancels.view(jobs.visible_to(session, job_id, party))


@router.get("/{job_id}/logs")
def logs(
    party: PartyDep, job_id: JobIdDep, session: SessionDep,
    after: Annotated[int, Query(ge=-1, le=schemas.MAX_SEQ, description="Lines after this.")] = -1,
    tail: Annotated[int | None, Query(ge=1, le=10_000, description="Only the last N.")] = None,
) -> list[wire.LogPublic]:  # fmt: skip
    job = jobs.visible_to(session, job_id, party)
    last: dict[str, Any] = {"limit": tail, "tail": True} if tail else {}
    found = storage.logs(session, job.id, after, **last)
    return [wire.LogPublic(seq=line.seq, at_ms=line.at_ms, text=line.text) for line in found]


@router.get("/{job_id}/result")
def result(
    party: PartyDep, job_id: JobIdDep, session: SessionDep, http: Request
) -> StreamingResponse:
    """The result archive; check its sha256 against the provider's signed receipt."""
    job = jobs.visible_to(session, job_id, party)
    blob = storage.open_result(session, job)
    chunks = iterate_in_threadpool(storage.blob_chunks(http.app.state.engine, blob.sha256))
    headers = {"X-Result-Sha256": blob.sha256, "Content-Length": str(blob.size)}
    return StreamingResponse(chunks, media_type="application/octet-stream", headers=headers)


@router.get("/{job_id}/events", response_class=StreamingResponse)
async def events(job_id: str, party: PartyDep, http: Request) -> StreamingResponse:
    """The job's transitions as server-sent events, from the first; ends at a final state.
    A live stream: no session held while it is open, and bounded (`api/streams.py`)."""
    engine = http.app.state.engine
    full_id = await run_in_threadpool(_check_visible, engine, job_id, party)
    return streams.open_stream(http, _stream(streams.event_feed(http), engine, full_id))


def _check_visible(engine: Engine, job_id: str, party: str) -> str:
    """The full id of the job `job_id` names, if `party` may see it."""
    with Session(engine) as session:
        return jobs.visible_to(session, job_ids.resolve(session, job_id).id, party).id


async def _stream(feed: EventFeed, engine: Engine, job_id: str) -> AsyncIterator[str]:
    after = 0
    async with feed.watch(job_id) as woken:
        while True:
            woken.clear()
            for event in await run_in_threadpool(_events_after, engine, job_id, after):
                after = event.id
                yield f"id: {event.id}\nevent: transition\ndata: {event.model_dump_json()}\n\n"
                if event.to_state in jobs.FINAL:
                    return
            await feed.wait(woken)


def _events_after(engine: Engine, job_id: str, after: int) -> list[wire.EventPublic]:
    with Session(engine) as session:
        return [
            wire.EventPublic.model_validate(event, from_attributes=True)
            for event in jobs.events(session, job_id, after)
        ]


@router.get("/{job_id}/signatures")
def signatures(party: PartyDep, job_id: JobIdDep, session: SessionDep) -> wire.SignedEvidence:
    """The provider's signed acceptance and receipt of the job, for its parties to check."""
    job = jobs.visible_to(session, job_id, party)
    return wire.SignedEvidence(
        escrow=job.escrow_ref, acceptance_signature=job.acceptance_signature,
        receipt_units=job.receipt_units, receipt_result_hash=job.receipt_result_hash,
        receipt_evidence_hash=job.receipt_evidence_hash, receipt_signature=job.receipt_signature,
    )  # fmt: skip
