"""What routes are handed: the settings, a database session, the chain, and the party that
signed the request (its nonce stored, so the same request is refused a second time)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from offchain.market.api.auth import SignedRequest, verify_headers
from offchain.market.db import sessions
from offchain.market.errors import Conflict, Unauthorized
from offchain.market.models import Nonce
from offchain.market.services import jobs, offers
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings


def get_settings(request: Request) -> MarketSettings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    yield from sessions(request.app.state.engine)


def get_chain(request: Request) -> Chain:
    return request.app.state.chain


def store_nonce(engine: Engine, signer: str, nonce: str) -> None:
    """Record the nonce in its own transaction: once seen, a nonce is spent whatever the
    request's outcome, and a second use (by any process sharing the database) is a Conflict."""
    with Session(engine) as session:
        session.add(Nonce(signer=signer, nonce=nonce, seen_at_ms=jobs.now_ms()))
        try:
            session.commit()
        except IntegrityError as exc:
            raise Conflict("this nonce was used before: a replayed request", "nonce") from exc


async def _verified(request: Request) -> SignedRequest:
    settings: MarketSettings = request.app.state.settings
    query = request.url.query
    target = f"{request.url.path}?{query}" if query else request.url.path  # queries are signed
    return verify_headers(
        dict(request.headers), request.method, target, settings.identity,
        jobs.now_ms(), settings.clock_tolerance_ms,
    )  # fmt: skip


async def _spend(request: Request, signed: SignedRequest) -> None:
    engine = request.app.state.engine
    await run_in_threadpool(store_nonce, engine, offers.key_hash(signed.vkey), signed.nonce)


async def signed_request(request: Request) -> SignedRequest:
    """The signer of the whole request, body included; its nonce is spent only then."""
    signed = await _verified(request)
    if hashlib.sha256(await request.body()).hexdigest() != signed.body_sha256:
        raise Unauthorized("the signature covers another body", "body_sha256")
    await _spend(request, signed)
    return signed


async def signed_upload(request: Request) -> SignedRequest:
    """The signer of a streamed upload: the body digest it signed is compared by the route
    once the stream is hashed."""
    signed = await _verified(request)
    await _spend(request, signed)
    return signed


def signer_id(signed: Annotated[SignedRequest, Depends(signed_request)]) -> str:
    """The signing party's id: the hash of its payment key."""
    return offers.key_hash(signed.vkey)


SettingsDep = Annotated[MarketSettings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
ChainDep = Annotated[Chain, Depends(get_chain)]
SignedDep = Annotated[SignedRequest, Depends(signed_request)]
UploadDep = Annotated[SignedRequest, Depends(signed_upload)]
PartyDep = Annotated[str, Depends(signer_id)]
