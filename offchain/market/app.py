"""The market's FastAPI application: routes, the one error handler, and what it opens at start
(the database at Alembic's head, the chain and its protocol deployment, and the bid for
leadership: the leader follows the chain and runs the scheduled work)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from offchain.core import logs
from offchain.core.errors import UnchainedError
from offchain.market import errors
from offchain.market.api.routes import app_wallet, jobs, offers, providers
from offchain.market.dapp import routes as renter_app
from offchain.market.db import POOL_SIZE, check_at_head, make_engine, unreachable, upgrade
from offchain.market.explorer import routes as explorer
from offchain.market.ops import routes as ops
from offchain.market.services.chain import Chain
from offchain.market.services.crash import crash_point
from offchain.market.services.leadership import Background
from offchain.market.services.storage import import_disk_blobs
from offchain.market.settings import MarketSettings
from offchain.protocol.api import signed_request

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5  # what a 503 for an unreachable database tells the client to wait

# The first kind an error is decides its status; any other UnchainedError is a 422.
STATUS: dict[type[UnchainedError], int] = {
    errors.Invalid: 422,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.TooLarge: 413,
    errors.TooMany: 429,
    errors.Busy: 503,
    signed_request.ReplayedRequest: 409,  # signed well, but a second time
    signed_request.SignedRequestError: 401,
}


def error_response(exc: UnchainedError) -> JSONResponse:
    """4xx with FastAPI's validation shape: `detail` lists problems, each naming its field."""
    status = next((code for kind, code in STATUS.items() if isinstance(exc, kind)), 422)
    field = getattr(exc, "field", "")
    problem = {
        "loc": field.split(".") if field else [],
        "msg": str(exc),
        "type": type(exc).__name__,
    }
    return JSONResponse({"detail": [problem]}, status_code=status)


async def _unchained_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, UnchainedError)
    return error_response(exc)


async def _database_error(_request: Request, exc: Exception) -> JSONResponse:
    """503 with Retry-After while the database cannot be used (down, restarting, failing over
    to its standby): the client tries again, where a 500 would say the market is broken. Any
    other database error is raised on, a 500 as before."""
    assert isinstance(exc, DBAPIError)
    if not unreachable(exc):
        raise exc
    log.warning("answered 503, the database cannot be used: %s", str(exc.orig).strip())
    refusal = errors.Busy("the database cannot be used now (unreachable, restarting or failing "
                          "over): try again shortly", "database")  # fmt: skip
    response = error_response(refusal)
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


class _AsciiJSON(JSONResponse):
    """JSON with every non-ASCII character escaped: a refusal echoes the input it refused,
    which may hold a lone surrogate that UTF-8 cannot encode (the 422 would become a 500)."""

    def render(self, content: object) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


async def _invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 for a request that does not validate, each problem naming its field."""
    assert isinstance(exc, RequestValidationError)
    return _AsciiJSON({"detail": jsonable_encoder(exc.errors())}, status_code=422)


LINGER_S = 2  # after a 413, how long what the client still sends is read and dropped


class BodyOverLimit(Exception):
    """Raised into the app by `BodyLimit`'s receive: the body is over the limit, read no more."""


async def _drop_the_rest(receive: Receive) -> None:
    """Read and drop what the client still sends, for up to LINGER_S: closing with unread data
    resets the connection, and a client still sending would lose the 413 it was sent."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LINGER_S):
            while (await receive()).get("more_body"):
                pass


def _closing_on_413(receive: Receive, send: Send) -> Send:
    """`send` that closes the connection after a 413 (`Connection: close`), lingering first
    (`_drop_the_rest`), so the server does not go on reading the body it refused."""
    refusing = False

    async def sending(message: Message) -> None:
        nonlocal refusing
        if message["type"] == "http.response.start" and message["status"] == 413:
            refusing = True
            message = {**message, "headers": [*message["headers"], (b"connection", b"close")]}
        elif refusing and not message.get("more_body"):  # the 413's last part
            await send({**message, "more_body": True})
            await _drop_the_rest(receive)
            message = {"type": "http.response.body", "body": b""}
        await send(message)

    return sending


class BodyLimit:
    """Stop reading a body at the limit however it is framed (Content-Length, chunked, or a
    length that lies) and answer 413 naming the limit, so no body over it is held whole in
    memory. An upload (PUT) streams to disk and is limited by its own route; any 413 closes
    the connection rather than read the rest (`_closing_on_413`)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        exc = errors.TooLarge(f"the body is over the limit of {self.limit} bytes", "body")
        await error_response(exc)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _closing_on_413(receive, send)
        limited = scope["method"] != "PUT"
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if limited and (not length.isdigit() or int(length) > self.limit):
            await self.refuse(scope, receive, send)
            return
        received, started, refused = 0, False, False

        async def counted() -> Message:
            nonlocal received, refused
            message = await receive()
            if limited and message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = not started  # 413 unless the app has begun its own answer
                    raise BodyOverLimit
            return message

        async def answer(message: Message) -> None:
            nonlocal started
            if not refused:  # once refused, what the app makes of the error is dropped
                started = True
                await send(message)

        try:
            await self.app(scope, counted, answer)
        except BodyOverLimit:
            if not refused:
                raise
        if refused:
            await self.refuse(scope, receive, send)


class CrashOnReceipt:
    """Tests only (`crash_at = "receipt-received"`): read a receipt's whole body, then die
    before the route can store it, as a kill between receiving and storing would."""

    def __init__(self, app: ASGIApp, settings: MarketSettings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/receipt"):
            while (await receive()).get("more_body"):
                pass
            crash_point(self.settings, "receipt-received")
        await self.app(scope, receive, send)


def create_app(settings: MarketSettings, chain: Chain | None = None) -> FastAPI:
    """The market for `settings`; `chain` defaults to the settings' Ogmios and deployment."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = make_engine(settings)
        # As many worker threads as database connections: a thread never waits for one.
        to_thread.current_default_thread_limiter().total_tokens = POOL_SIZE
        ready = upgrade if settings.migrate else check_at_head  # `market migrate` ran it
        await run_in_threadpool(ready, app.state.engine)
        await run_in_threadpool(import_disk_blobs, app.state.engine, settings.blob_dir)
        app.state.chain = chain or await run_in_threadpool(
            Chain.connect, settings.ogmios_url, settings.deployment
        )
        app.state.background = Background(settings, app.state.engine, app.state.chain)
        leader = asyncio.create_task(app.state.background.run())
        yield
        leader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leader
        app.state.engine.dispose()

    app = FastAPI(
        title="Unchained market",
        summary="GPU jobs matched to providers and settled on Cardano.",
        description="Every request that changes state, or reads a party's own job, is a CIP-8 "
        "COSE_Sign1 by the party's payment key over method, path, body digest, nonce, "
        "timestamp and this market's identity.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.add_exception_handler(UnchainedError, _unchained_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_middleware(BodyLimit, limit=settings.body_limit_bytes)
    if settings.crash_at == "receipt-received":
        app.add_middleware(CrashOnReceipt, settings=settings)
    for module in (offers, jobs, providers):
        app.include_router(module.router)
    app_wallet.mount(app)  # what the browser pages call with a CIP-30 wallet
    explorer.mount(app)  # the explorer's pages, JSON and static files (offchain/market/explorer)
    renter_app.mount(app)  # the renter's wallet pages (offchain/market/dapp)
    ops.mount(app)  # /health, /ready, /metrics (offchain/market/ops)
    ops.instrument(app)  # outermost: every request counted and timed
    return app


SETTINGS_ENV = "UNCHAINED_MARKET_SETTINGS_JSON"  # how `serve --workers N` hands its settings on


def from_environment() -> FastAPI:
    """The app factory each worker process of `unchained market serve --workers N` calls:
    the settings the command resolved, as JSON in the environment (and its logging, set up
    again in each worker process)."""
    logs.configure("market")
    return create_app(MarketSettings.model_validate_json(os.environ[SETTINGS_ENV]))
