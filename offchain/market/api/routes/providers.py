"""Provider endpoints: offers, heartbeats, assignments, and delivering a job."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy import Engine
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from offchain.market import schemas
from offchain.market.api.deps import (
    ChainDep,
    PartyDep,
    SessionDep,
    SettingsDep,
    SignedDep,
    UploadDep,
    storable_params,
)  # fmt: skip
from offchain.market.models import Job, Offer
from offchain.market.services import cancels, delivery, health, jobs, offers, quotes, storage
from offchain.market.services import rentals as deployments
from offchain.protocol.api import wire
from offchain.protocol.api.rental_report import REPORT_PATH, RentalReport
from offchain.protocol.api.signed_request import KEY_HEADER, SIGNATURE_HEADER, SignedRequest

router = APIRouter(tags=["providers"], dependencies=[Depends(storable_params)])
POLL_S = 0.25


async def as_sent(request: Request, _verified: SignedDep) -> tuple[str, str, str]:
    """The offer's body, signature and key exactly as its provider sent them, once the
    signature is checked: kept verbatim so quotes show the provider's own words."""
    headers = request.headers
    return (await request.body()).decode(), headers[SIGNATURE_HEADER], headers[KEY_HEADER]


@router.post("/offers", status_code=201)
def post_offer(
    terms: schemas.OfferTerms, signed: SignedDep,
    sent: Annotated[tuple[str, str, str], Depends(as_sent)], session: SessionDep,
    settings: SettingsDep, chain: ChainDep,
) -> wire.SignedOffer:  # fmt: skip
    """Publish a signed offer; it is kept verbatim so quotes can show the provider's words. A
    bond it names must count (the bond check, at least the market's minimum, not withdrawable
    before a job quoted now could close): a 422 says why not."""
    vkey = signed.vkey.payload
    bond = offers.counted_bond(chain, settings, vkey, terms)
    return quotes.signed_offer(_publish(session, vkey, terms, sent, bond, settings.online_ms))


def _publish(
    session: Session, vkey: bytes, terms: schemas.OfferTerms, signed: tuple[str, str, str],
    bond: offers.CountedBond | None, online_ms: int,
) -> Offer:  # fmt: skip
    """Store the offer, count it as a heartbeat and keep the self-test it carries."""
    at_ms = jobs.now_ms()
    offer = offers.post_offer(session, vkey, terms, signed, at_ms, bond)
    provider = offers.provider(session, offer.provider_id)
    health.offered(session, provider, at_ms, online_ms, terms.selftest)
    return offer


@router.post("/providers/heartbeat", status_code=204)
def heartbeat(party: PartyDep, session: SessionDep, settings: SettingsDep) -> None:
    """Keep this provider's offers online (and count the time towards its uptime)."""
    at_ms = jobs.now_ms()
    offers.heartbeat(session, party, at_ms)
    health.heartbeat(session, party, at_ms, settings.online_ms)


@router.post(REPORT_PATH)
def report_deployments(
    report: RentalReport, party: PartyDep, session: SessionDep
) -> dict[str, int]:
    """The provider's endpoints and pods as its book holds them (the explorer shows them):
    each row stored or moved forward, or the whole report refused (403: a channel that pays
    another provider; 409: a row that steps back)."""
    return {"deployments": deployments.record(session, party, report, jobs.now_ms())}


@router.get("/providers/assignments")
async def assignments(
    request: Request,
    party: PartyDep,
    settings: SettingsDep,
    timeout_s: Annotated[int, Query(ge=0, description="Wait this long for a job.")] = 0,
    new: Annotated[bool, Query(description="Funded jobs too, not only cancels.")] = True,
) -> list[wire.Assignment]:
    """Funded jobs for this provider and those whose renter asked to cancel them (with their
    Cancel); waits up to `timeout_s` for one (long poll). A provider with no free slot asks
    for the cancels alone (`new=false`)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + min(timeout_s, settings.long_poll_max_s)
    while True:
        found = await run_in_threadpool(_assignments, request.app.state.engine, party, new)
        if found or loop.time() >= until:
            return found
        await asyncio.sleep(POLL_S)


def _assignments(engine: Engine, provider_id: str, new: bool) -> list[wire.Assignment]:
    with Session(engine) as session:
        return [
            wire.Assignment(
                job_id=job.id,
                escrow=job.escrow_ref,
                spec=quotes.spec_of(job),
                price_per_unit=job.price_per_unit,
                max_units=job.max_units,
                deadline_ms=job.deadline_ms,
                cancel_tx=job.cancel_tx,
                registry_account=job.registry_account,
            )
            for job in jobs.assignments(session, provider_id, new)
        ]


@router.post("/jobs/{job_id}/acceptance")
def accept(
    job_id: str, body: schemas.AcceptanceBody, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> wire.JobPublic:  # fmt: skip
    """The provider's signed Acceptance: it backs the job with its bond."""
    job = delivery.own_job(session, party, job_id)
    accepted = delivery.accept(session, chain.deployment, job, body.signature, body.escrow)
    return quotes.public(session, accepted)


@router.post("/jobs/{job_id}/cancel/answer")
def answer_cancel(
    job_id: str, body: schemas.CancelAnswer, party: PartyDep, session: SessionDep
) -> wire.CancelView:
    """The provider's answer to its renter's cancel: its witness, stopping, or why not."""
    job = delivery.own_job(session, party, job_id)
    return cancels.view(cancels.answer(session, job, body))


@router.post("/jobs/{job_id}/start")
def start(job_id: str, party: PartyDep, session: SessionDep) -> wire.JobPublic:
    job = delivery.own_job(session, party, job_id)
    return quotes.public(session, delivery.start(session, job))


@router.post("/jobs/{job_id}/logs")
def post_logs(
    job_id: str, body: schemas.LogLines, party: PartyDep, session: SessionDep
) -> dict[str, int]:
    job = delivery.own_job(session, party, job_id)
    return {"next_seq": delivery.log(session, job, body.lines)}


@router.put("/jobs/{job_id}/result")
async def put_result(
    job_id: str, request: Request, signed: UploadDep, settings: SettingsDep
) -> wire.JobPublic:
    """The result archive, streamed to disk and hashed on the way; over the limit is a 413."""
    job = await _own_job(request, signed, job_id)
    jobs.expect(job, jobs.S.RUNNING)
    sha256, size = await _receive(request, signed, settings.blob_dir, settings.result_limit_bytes)
    return await _recorded(request, job, lambda db: delivery.attach_result(db, job, sha256, size))


@router.post("/jobs/{job_id}/receipt")
def receipt(
    job_id: str, body: schemas.ReceiptBody, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> wire.JobPublic:  # fmt: skip
    """The signed usage receipt: verified against the escrow and the provider's key."""
    job = delivery.own_job(session, party, job_id)
    return quotes.public(session, delivery.hand_in_receipt(session, chain.deployment, job, body))


@router.put("/jobs/{job_id}/metering")
async def put_metering(
    job_id: str, request: Request, signed: UploadDep, settings: SettingsDep
) -> wire.JobPublic:
    """The metering record the signed receipt commits to (its canonical JSON): taken only once
    the receipt is in (409 before) and only if it hashes to the receipt's evidence hash (422
    otherwise, nothing kept); over its limit is a 413. The explorer charts it."""
    job = await _own_job(request, signed, job_id)
    delivery.expect_receipt(job)
    check = functools.partial(delivery.check_evidence, job)
    limit = delivery.EVIDENCE_LIMIT_BYTES
    sha256, size = await _receive(request, signed, settings.blob_dir, limit, check)
    return await _recorded(request, job, lambda db: delivery.attach_evidence(db, sha256, size))


# The uploads stream their body with no session open (a stalled client holds no connection):
# each database step before and after runs in one worker thread, in a session of its own.


async def _own_job(request: Request, signed: SignedRequest, job_id: str) -> Job:
    """The signer's job, read in a worker thread; what it loaded stays usable once closed."""

    def read() -> Job:
        with Session(request.app.state.engine) as session:
            return delivery.own_job(session, signed.key_hash, job_id)

    return await run_in_threadpool(read)


async def _receive(
    request: Request, signed: SignedRequest, blob_dir: Path, limit: int,
    check: Callable[[str, Path], None] | None = None,
) -> tuple[str, int]:  # fmt: skip
    """The body stored by its sha256 once it is the body the request signed and passes
    `check` (nothing kept otherwise); over `limit` is a 413."""

    def checked(sha256: str, upload: Path) -> None:
        signed.check_body(sha256)
        if check is not None:
            check(sha256, upload)

    engine = request.app.state.engine
    return await storage.receive_blob(engine, blob_dir, request.stream(), limit, checked)


async def _recorded(
    request: Request, job: Job, record: Callable[[Session], object]
) -> wire.JobPublic:
    """`record` the stored upload and commit, then the job's view, in one worker thread."""

    def write() -> wire.JobPublic:
        with Session(request.app.state.engine, expire_on_commit=False) as session:
            record(session)
            return quotes.public(session, job)

    return await run_in_threadpool(write)


@router.post("/jobs/{job_id}/failure")
def failure(
    job_id: str, body: schemas.FailureBody, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> wire.JobPublic:  # fmt: skip
    """The job failed, or was refused, with its reason; a zero-unit receipt with it releases
    the escrow in the next settle batch (verified as a receipt is)."""
    job = delivery.own_job(session, party, job_id)
    return quotes.public(session, delivery.fail(session, chain.deployment, job, body))
