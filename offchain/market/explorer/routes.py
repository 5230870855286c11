"""The explorer's routes: each page is server-rendered HTML at `/explorer/...` and the same data
as JSON at `/api/explorer/...` (or with `Accept: application/json`); two server-sent event
streams (home, job) push re-rendered fragments that a few lines of JavaScript swap in.

Pages are public and read only: no signature, nothing written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sqlalchemy import Engine
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from offchain.chain.time import ChainTime
from offchain.market.api import streams
from offchain.market.api.deps import SnapshotDep, storable_params
from offchain.market.errors import Conflict, Invalid, MarketRefusal, NotFound
from offchain.market.explorer import channels, queries
from offchain.market.explorer import rentals as deployments
from offchain.market.explorer.format import CHAIN_NOW, FILTERS, GLOBALS
from offchain.market.models import Channel, Provider, Rental
from offchain.market.services import job_ids, jobs
from offchain.market.services.event_feed import EventFeed
from offchain.market.services.id_prefix import full_id
from offchain.market.settings import MarketSettings

HERE = FilePath(__file__).parent
LIVE_EVERY_S = 1.0
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters.update(FILTERS)
templates.env.globals.update(GLOBALS)
router = APIRouter(tags=["explorer"], dependencies=[Depends(storable_params)])


def mount(app: FastAPI) -> None:
    """Serve the explorer from `app`: its pages, its JSON and its stylesheet and script."""
    app.include_router(router)
    app.mount("/explorer/static", StaticFiles(directory=HERE / "static"), name="explorer-static")


@dataclasses.dataclass
class ExplorerState:
    """What pages need from the chain, asked once per process: our scripts and its clock."""

    scripts: queries.Scripts
    time: ChainTime | None


def _state(request: Request) -> ExplorerState:
    app = request.app.state
    state = getattr(app, "explorer", None)
    if state is None or state.time is None:
        chain = app.chain
        try:
            time = chain.context.chain_time()
        except Exception:  # the chain is away: pages show no times until it answers
            time = None
        state = app.explorer = ExplorerState(queries.Scripts.of(chain.deployment), time)
    return state


def context(request: Request, session: SnapshotDep) -> queries.Context:
    state = _state(request)
    online_ms = request.app.state.settings.online_ms
    made = queries.Context(state.scripts, state.time, jobs.now_ms(), online_ms)
    request.state.chain_now_ms = queries.tip_ms(session, made)  # the page's countdowns
    return made


ContextDep = Annotated[queries.Context, Depends(context)]


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return request.url.path.startswith("/api/") or (
        "application/json" in accept and "text/html" not in accept
    )


# What a person reads when a page refuses: its title and status (programs get the JSON error).
REFUSALS: dict[type[MarketRefusal], tuple[str, int]] = {
    NotFound: ("Not found", 404),
    Invalid: ("Not understood", 422),
    Conflict: ("More than one", 409),
}


def render(request: Request, template: str, build: Callable[[], dict[str, Any]]) -> Response:
    """The page's data as JSON or through its template; a NotFound is a 404 page for people,
    a bad cursor a 422 page, a job prefix several jobs share a 409 page (and the market's JSON
    error for programs)."""
    try:
        data = build()
    except tuple(REFUSALS) as exc:
        if wants_json(request):
            raise
        title, status = next(shown for kind, shown in REFUSALS.items() if isinstance(exc, kind))
        return templates.TemplateResponse(
            request, "error.html", {"message": str(exc), "title": title}, status_code=status
        )
    if wants_json(request):
        return JSONResponse(data)
    CHAIN_NOW.set(getattr(request.state, "chain_now_ms", None))  # drawn now, in this context
    return templates.TemplateResponse(request, template, {"d": data})


def explorer_app(settings: MarketSettings, engine: Engine, state: ExplorerState) -> FastAPI:
    """The explorer alone over a database, with a given chain clock and scripts (no chain):
    what the benchmark measures and the page tests render."""
    from offchain.market.app import error_response  # the market's one error shape; app.py
    # imports this module, so the import waits until it is loaded

    app = FastAPI()
    app.add_exception_handler(MarketRefusal, lambda _request, exc: error_response(exc))
    mount(app)
    app.state.settings, app.state.engine, app.state.explorer = settings, engine, state
    return app


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    return RedirectResponse("/explorer")


@router.get("/explorer", response_class=HTMLResponse)
@router.get("/api/explorer")
def home(request: Request, session: SnapshotDep, ctx: ContextDep) -> Response:
    """Chain tip, providers online, GPUs by model, jobs running, escrow, settlements."""
    return render(request, "home.html", lambda: queries.home(session, ctx))


@router.get("/explorer/jobs", response_class=HTMLResponse)
@router.get("/api/explorer/jobs")
def job_list(
    request: Request,
    session: SnapshotDep,
    state: str = "",
    provider: str = "",
    consumer: str = "",
    gpu: str = "",
    after: str = "",
) -> Response:
    filters = {"state": state, "provider": provider, "consumer": consumer, "gpu": gpu,
               "after": after}  # fmt: skip
    return render(request, "jobs.html", lambda: queries.job_list(session, filters))


@router.get("/explorer/jobs/{job_id}", response_class=HTMLResponse)
@router.get("/api/explorer/jobs/{job_id}")
def job_page(request: Request, job_id: str, session: SnapshotDep, ctx: ContextDep) -> Response:
    return render(request, "job.html", lambda: queries.job_page(session, ctx, job_id))


@router.get("/explorer/providers", response_class=HTMLResponse)
@router.get("/api/explorer/providers")
def provider_list(
    request: Request, session: SnapshotDep, ctx: ContextDep, after: str = ""
) -> Response:
    return render(request, "providers.html", lambda: queries.provider_list(session, ctx, after))


@router.get("/explorer/providers/{provider_id}", response_class=HTMLResponse)
@router.get("/api/explorer/providers/{provider_id}")
def provider_page(
    request: Request, provider_id: str, session: SnapshotDep, ctx: ContextDep
) -> Response:
    """A provider by its id or a unique prefix of it (the CLI shows 16 hex digits)."""

    def build() -> dict[str, Any]:
        full = full_id(session, Provider.id, provider_id, "provider")
        return {
            **queries.provider_page(session, ctx, full),
            "channels": channels.recent(session, Channel.provider_id, full),
            "deployments": deployments.recent(session, Rental.provider_id, full),
        }

    return render(request, "provider.html", build)


@router.get("/explorer/channels", response_class=HTMLResponse)
@router.get("/api/explorer/channels")
def channel_list(
    request: Request,
    session: SnapshotDep,
    state: str = "",
    provider: str = "",
    renter: str = "",
    payee: str = "",
    after: str = "",
) -> Response:
    filters = {"state": state, "provider": provider, "renter": renter, "payee": payee,
               "after": after}  # fmt: skip
    return render(request, "channels.html", lambda: channels.channel_list(session, filters))


@router.get("/explorer/channels/{channel_id}", response_class=HTMLResponse)
@router.get("/api/explorer/channels/{channel_id}")
def channel_page(
    request: Request, channel_id: str, session: SnapshotDep, ctx: ContextDep
) -> Response:
    return render(request, "channel.html", lambda: {
        **channels.channel_page(session, ctx, channel_id),
        "deployments": deployments.recent(session, Rental.channel, channel_id.lower()),
    })  # fmt: skip


@router.get("/explorer/deployments", response_class=HTMLResponse)
@router.get("/api/explorer/deployments")
def deployment_list(
    request: Request,
    session: SnapshotDep,
    state: str = "",
    kind: str = "",
    provider: str = "",
    channel: str = "",
    after: str = "",
) -> Response:
    """The endpoints and pods providers report, newest first."""
    filters = {"state": state, "kind": kind, "provider": provider, "channel": channel,
               "after": after}  # fmt: skip
    return render(request, "deployments.html",
                  lambda: deployments.deployment_list(session, filters))  # fmt: skip


@router.get("/explorer/deployments/{deployment_id}", response_class=HTMLResponse)
@router.get("/api/explorer/deployments/{deployment_id}")
def deployment_page(
    request: Request, deployment_id: Annotated[int, Path(ge=0, le=queries.MAX_INT64)],
    session: SnapshotDep,
) -> Response:  # fmt: skip
    return render(request, "deployment.html",
                  lambda: deployments.deployment_page(session, deployment_id))  # fmt: skip


@router.get("/explorer/txs/{tx_id}", response_class=HTMLResponse)
@router.get("/api/explorer/txs/{tx_id}")
def tx_page(request: Request, tx_id: str, session: SnapshotDep, ctx: ContextDep) -> Response:
    tx_id = tx_id.lower()
    return render(request, "tx.html", lambda: {
        **queries.tx_page(session, ctx, tx_id), "channels": channels.moved_by(session, tx_id),
    })  # fmt: skip


@router.get("/explorer/addresses/{address}", response_class=HTMLResponse)
@router.get("/api/explorer/addresses/{address}")
def address_page(request: Request, address: str, session: SnapshotDep, after: str = "") -> Response:
    return render(request, "address.html", lambda: {
        **queries.address_page(session, address, after),
        "channels": channels.at_address(session, address),
    })  # fmt: skip


@router.get("/explorer/blocks/{height}", response_class=HTMLResponse)
@router.get("/api/explorer/blocks/{height}")
def block_page(
    request: Request, height: Annotated[int, Path(ge=0, le=queries.MAX_INT64)],
    session: SnapshotDep, ctx: ContextDep,
) -> Response:  # fmt: skip
    return render(request, "block.html", lambda: queries.block_page(session, ctx, height))


@router.get("/explorer/search", response_class=HTMLResponse)
@router.get("/api/explorer/search")
def search(
    request: Request, session: SnapshotDep, q: Annotated[str, Query(max_length=200)] = ""
) -> Response:
    """Straight to the page a job id, tx hash, block, address or provider id names."""
    try:
        found = queries.search(session, q) if q.strip() else None
    except Conflict as exc:  # a prefix several jobs share: say how many, find none
        if wants_json(request):
            raise
        message = f"{exc} ({q})."
        return templates.TemplateResponse(
            request, "error.html", {"message": message, "title": "Search", "q": q}, status_code=409
        )
    if wants_json(request):
        return JSONResponse({"q": q, "path": found})
    if found is not None:
        return RedirectResponse(found, status_code=303)
    return templates.TemplateResponse(
        request, "error.html", {"message": f"Nothing found for “{q}”.", "title": "Search", "q": q}
    )


# --- live updates ------------------------------------------------------------------------------


# The latest home fragment per database and second: every open home page shares one render.
_home_cache: dict[tuple[int, int], str] = {}


def _cached_home(engine: Engine, now_ms: int) -> str | None:
    """This second's fragment if one stream made it already: the others read it on the event
    loop, with no thread hop each."""
    return _home_cache.get((id(engine), now_ms // 1000))


def _home_fragment(engine: Engine, ctx: queries.Context) -> str:
    now = jobs.now_ms()
    fragment = _cached_home(engine, now)
    if fragment is None:
        with Session(engine) as session:
            data = queries.home(session, dataclasses.replace(ctx, now_ms=now))
        fragment = templates.env.get_template("_home_live.html").render(d=data)
        _home_cache.clear()  # another thread may clear it too: this one returns its own
        _home_cache[(id(engine), now // 1000)] = fragment
    return fragment


def _event(name: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data)}\n\n"


async def _home_stream(engine: Engine, ctx: queries.Context) -> AsyncIterator[str]:
    last = ""
    while True:
        fragment = _cached_home(engine, jobs.now_ms())
        if fragment is None:
            fragment = await run_in_threadpool(_home_fragment, engine, ctx)
        if fragment != last:
            last = fragment
            yield _event("home", {"html": fragment})
        await asyncio.sleep(LIVE_EVERY_S)


def _new_events(engine: Engine, job_id: str, after: int) -> list[dict[str, Any]]:
    with Session(engine) as session:
        return queries.events_after(session, job_id, after)


async def _job_stream(
    feed: EventFeed, engine: Engine, job_id: str, after: int
) -> AsyncIterator[str]:
    row = templates.env.get_template("_event.html")
    async with feed.watch(job_id) as woken:
        while True:
            woken.clear()
            for event in await run_in_threadpool(_new_events, engine, job_id, after):
                after = event["id"]
                html = row.render(e=event)
                yield _event("transition", {"html": html, "state": event["to_state"]}, after)
            await feed.wait(woken)


# Live streams hold no session while open (each read is in its own; a job's stream reads when
# the process's event feed wakes it) and are bounded per client address and in all
# (`offchain/market/api/streams.py`).


@router.get("/explorer/live", response_class=Response)
async def home_live(request: Request, ctx: ContextDep) -> Response:
    """The home page's live figures, re-rendered when they change."""
    return streams.open_stream(request, _home_stream(request.app.state.engine, ctx))


def _check_job(engine: Engine, job_id: str) -> str:
    """The full id of the job `job_id` names (NotFound, or a Conflict for a shared prefix)."""
    with Session(engine) as session:
        return job_ids.resolve(session, job_id).id


@router.get("/explorer/jobs/{job_id}/live", response_class=Response)
async def job_live(
    request: Request, job_id: str, after: Annotated[int, Query(ge=0, le=queries.MAX_INT64)] = 0,
    last_event_id: Annotated[int | None, Header(ge=0, le=queries.MAX_INT64)] = None,
) -> Response:  # fmt: skip
    """The job's new timeline rows, after `after` (or the Last-Event-ID a reconnect sends)."""
    engine = request.app.state.engine
    full_id = await run_in_threadpool(_check_job, engine, job_id)
    start = after if last_event_id is None else last_event_id
    feed = streams.event_feed(request)
    return streams.open_stream(request, _job_stream(feed, engine, full_id, start))
