"""What routes are handed: the settings, a database session, the chain, and the party that
signed the request (`offchain.protocol.api.signed_request`, its nonce spent in the database so
the same request is refused a second time by any process of the market)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from offchain.market.db import sessions, snapshots
from offchain.market.errors import Invalid
from offchain.market.schemas import storable_text
from offchain.market.services import jobs
from offchain.market.services.chain import Chain
from offchain.market.services.nonces import DatabaseNonces, PendingNonce
from offchain.market.settings import MarketSettings
from offchain.protocol.api.signed_request import RequestVerifier, SignedRequest, body_digest

# The cheap dependencies are `async def`: FastAPI runs a plain `def` one in the thread pool,
# a thread hop each for nothing but an attribute read.


async def get_settings(request: Request) -> MarketSettings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    yield from sessions(request.app.state.engine)


def get_snapshot(request: Request) -> Iterator[Session]:
    yield from snapshots(request.app.state.engine)


async def get_chain(request: Request) -> Chain:
    return request.app.state.chain


async def storable_params(request: Request) -> None:
    """Every path and query value as text either database can compare with (PostgreSQL
    refuses NUL in text): a 422 naming the parameter, never a database error. Routers take
    it as a dependency of all their routes."""
    for name, value in (*request.path_params.items(), *request.query_params.multi_items()):
        try:
            storable_text(str(value))
        except ValueError as exc:
            raise Invalid(f"{name}: {exc}", name) from exc


def signed_target(request: Request) -> str:
    """The path and query as the client sent them (percent-encoded, never decoded and
    re-encoded): what its signature covers. ASGI servers may leave out `raw_path`; then the
    path is encoded back the standard way."""
    scope = request.scope
    path = scope.get("raw_path") or quote(scope["path"]).encode()
    query = scope["query_string"]
    return (path + b"?" + query if query else path).decode("latin-1")


async def _verified(request: Request, body_sha256: str | None) -> SignedRequest:
    settings: MarketSettings = request.app.state.settings
    verifier = RequestVerifier(
        settings.identity, DatabaseNonces(request.app.state.engine), settings.clock_tolerance_ms
    )
    return await run_in_threadpool(
        verifier.verify, request.headers, request.method, signed_target(request), body_sha256,
        jobs.now_ms(),
    )  # fmt: skip


async def signed_request(request: Request) -> SignedRequest:
    """The signer of the whole request, body included; its nonce is spent only then."""
    return await _verified(request, body_digest(await request.body()))


@dataclasses.dataclass(frozen=True)
class Unspent:
    """A verified request whose nonce is not spent yet: the route spends it in the same
    transaction as what it stores (`PendingNonce.spend`)."""

    signed: SignedRequest
    nonce: PendingNonce


async def signed_unspent(request: Request) -> Unspent:
    """The signer of the whole request, verified here on the event loop (a CIP-8 check is a
    fraction of a ms: no thread hop), its nonce left for the route to spend."""
    settings: MarketSettings = request.app.state.settings
    nonce = PendingNonce()
    verifier = RequestVerifier(settings.identity, nonce, settings.clock_tolerance_ms)
    body_sha256 = body_digest(await request.body())
    signed = verifier.verify(
        request.headers, request.method, signed_target(request), body_sha256, jobs.now_ms()
    )
    return Unspent(signed, nonce)


async def signed_upload(request: Request) -> SignedRequest:
    """The signer of a streamed upload, its nonce spent: the route hashes the stream and
    checks it with `SignedRequest.check_body`."""
    return await _verified(request, None)


async def signer_id(signed: Annotated[SignedRequest, Depends(signed_request)]) -> str:
    """The signing party's id: the hash of its payment key."""
    return signed.key_hash


SettingsDep = Annotated[MarketSettings, Depends(get_settings)]
# A route's session closes once its answer is made, before it is sent: a client slow to read
# (a result download, a long answer) never holds a connection of the pool. Only plain `def`
# routes take it (FastAPI runs them in its worker threads); a route that streams or long-polls
# is `async def` and opens a session inside each worker-thread call instead
# (tests/market/test_async_boundary.py holds both).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
# a read-only session on one snapshot: the explorer's pages (`db.snapshots`)
SnapshotDep = Annotated[Session, Depends(get_snapshot, scope="function")]
ChainDep = Annotated[Chain, Depends(get_chain)]
SignedDep = Annotated[SignedRequest, Depends(signed_request)]
UnspentDep = Annotated[Unspent, Depends(signed_unspent)]
UploadDep = Annotated[SignedRequest, Depends(signed_upload)]
PartyDep = Annotated[str, Depends(signer_id)]
