"""Provider endpoints: offers, heartbeats, assignments, and delivering a job."""

from __future__ import annotations

import asyncio
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
    release,
    storable_params,
)  # fmt: skip
from offchain.market.models import Offer
from offchain.market.services import cancels, delivery, health, jobs, offers, quotes, storage
from offchain.protocol.signed_request import KEY_HEADER, SIGNATURE_HEADER
from offchain.protocol.wire import Assignment

router = APIRouter(tags=["providers"], dependencies=[Depends(storable_params)])
POLL_S = 0.25


@router.post("/offers", status_code=201)
async def post_offer(
    request: Request, terms: schemas.OfferTerms, signed: SignedDep, session: SessionDep,
    settings: SettingsDep, chain: ChainDep,
) -> schemas.SignedOffer:  # fmt: skip
    """Publish a signed offer; it is kept verbatim so quotes can show the provider's words. A
    bond it names must count (the bond check, at least the market's minimum, not withdrawable
    before a job quoted now could close): a 422 says why not."""
    body = (await request.body()).decode()
    headers = request.headers
    signature = (headers[SIGNATURE_HEADER], headers[KEY_HEADER])
    vkey = signed.vkey.payload
    bond = await run_in_threadpool(offers.counted_bond, chain, settings, vkey, terms)
    offer = await run_in_threadpool(
        _publish, session, vkey, terms, (body, *signature), bond, settings.online_ms
    )
    return quotes.signed_offer(offer)


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


@router.get("/providers/assignments")
async def assignments(
    request: Request,
    party: PartyDep,
    settings: SettingsDep,
    timeout_s: Annotated[int, Query(ge=0, description="Wait this long for a job.")] = 0,
    new: Annotated[bool, Query(description="Funded jobs too, not only cancels.")] = True,
) -> list[Assignment]:
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


def _assignments(engine: Engine, provider_id: str, new: bool) -> list[Assignment]:
    with Session(engine) as session:
        return [
            Assignment(
                job_id=job.id,
                escrow=job.escrow_ref,
                spec=quotes.spec_of(job),
                price_per_unit=job.price_per_unit,
                max_units=job.max_units,
                deadline_ms=job.deadline_ms,
                cancel_tx=job.cancel_tx,
            )
            for job in jobs.assignments(session, provider_id, new)
        ]


@router.post("/jobs/{job_id}/acceptance")
def accept(
    job_id: str, body: schemas.AcceptanceBody, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> schemas.JobPublic:  # fmt: skip
    """The provider's signed Acceptance: it backs the job with its bond."""
    job = delivery.own_job(session, party, job_id)
    return quotes.public(session, delivery.accept(session, chain.deployment, job, body.signature))


@router.post("/jobs/{job_id}/cancel/answer")
def answer_cancel(
    job_id: str, body: schemas.CancelAnswer, party: PartyDep, session: SessionDep
) -> schemas.CancelView:
    """The provider's answer to its renter's cancel: its witness, stopping, or why not."""
    job = delivery.own_job(session, party, job_id)
    return cancels.view(cancels.answer(session, job, body))


@router.post("/jobs/{job_id}/start")
def start(job_id: str, party: PartyDep, session: SessionDep) -> schemas.JobPublic:
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
    job_id: str, request: Request, signed: UploadDep, settings: SettingsDep, session: SessionDep
) -> schemas.JobPublic:
    """The result archive, streamed to disk and hashed on the way; over the limit is a 413."""
    job = await run_in_threadpool(delivery.own_job, session, signed.key_hash, job_id)
    jobs.expect(job, jobs.S.RUNNING)
    await run_in_threadpool(release, session)  # no connection held while the upload arrives
    sha256, size = await storage.receive_blob(
        settings.blob_dir, request.stream(), settings.result_limit_bytes
    )
    signed.check_body(sha256)
    job = await run_in_threadpool(delivery.attach_result, session, job, sha256, size)
    return quotes.public(session, job)


@router.post("/jobs/{job_id}/receipt")
def receipt(
    job_id: str, body: schemas.ReceiptBody, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> schemas.JobPublic:  # fmt: skip
    """The signed usage receipt: verified against the escrow and the provider's key."""
    job = delivery.own_job(session, party, job_id)
    return quotes.public(session, delivery.hand_in_receipt(session, chain.deployment, job, body))


@router.put("/jobs/{job_id}/metering")
async def put_metering(
    job_id: str, request: Request, signed: UploadDep, settings: SettingsDep, session: SessionDep
) -> schemas.JobPublic:
    """The metering record the signed receipt commits to (its canonical JSON): taken only once
    the receipt is in (409 before) and only if it hashes to the receipt's evidence hash (422
    otherwise, nothing kept); over its limit is a 413. The explorer charts it."""
    job = await run_in_threadpool(delivery.own_job, session, signed.key_hash, job_id)
    delivery.expect_receipt(job)
    await run_in_threadpool(release, session)  # no connection held while the upload arrives

    def check(sha256: str, upload: Path) -> None:
        signed.check_body(sha256)
        delivery.check_evidence(job, sha256, upload)

    sha256, size = await storage.receive_blob(
        settings.blob_dir, request.stream(), delivery.EVIDENCE_LIMIT_BYTES, check
    )
    await run_in_threadpool(delivery.attach_evidence, session, sha256, size)
    return quotes.public(session, job)


@router.post("/jobs/{job_id}/failure")
def failure(
    job_id: str, body: schemas.FailureBody, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> schemas.JobPublic:  # fmt: skip
    """The job failed, or was refused, with its reason; a zero-unit receipt with it releases
    the escrow in the next settle batch (verified as a receipt is)."""
    job = delivery.own_job(session, party, job_id)
    return quotes.public(session, delivery.fail(session, chain.deployment, job, body))
