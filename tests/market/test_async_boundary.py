"""The market's async boundary, checked over the app's own routes: a route is a plain `def`
with the session dependency (FastAPI runs it in its worker threads) unless it streams or
long-polls; those few are `async def`, named below with why, and never take a session (they
open one inside each worker-thread call, so no `Session` crosses threads and no database
work runs on the event loop). A route made `async def` without being listed here, or handed
a session while on the event loop, fails this test."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts

from offchain.market.api.deps import get_session
from offchain.market.app import create_app
from offchain.market.settings import MarketSettings

ASYNC_ROUTES = {
    ("GET", "/jobs/{job_id}/events"): "a live stream of the job's events (server-sent)",
    ("GET", "/providers/assignments"): "a long poll: waits up to timeout_s for a job",
    ("PUT", "/jobs/{job_id}/result"): "streams the upload to disk with no session open",
    ("PUT", "/jobs/{job_id}/metering"): "streams the upload to disk with no session open",
    ("GET", "/explorer/live"): "a live stream of the explorer's home page",
    ("GET", "/explorer/jobs/{job_id}/live"): "a live stream of a job's page",
    ("GET", "/ready"): "its probes at once, each bounded in time, the database's in threads",
    ("GET", "/metrics"): "the readiness probes, then the database's counts in a thread",
}


def on_event_loop(call: Callable[..., Any] | None) -> bool:
    return inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)


def routes(tmp_path) -> Iterator[tuple[tuple[str, str], RouteContext]]:
    """Every (method, path) the market answers, with its route as included (its router's
    dependencies too); no lifespan runs: nothing opens."""
    for route in iter_route_contexts(create_app(MarketSettings(data_dir=tmp_path)).routes):
        if isinstance(route.original_route, APIRoute):
            for method in route.methods or ():
                yield (method, route.path or ""), route


def callers(dependant: Dependant) -> Iterator[Dependant]:
    """The route's endpoint and every dependency below it."""
    yield dependant
    for dependency in dependant.dependencies:
        yield from callers(dependency)


def test_only_streaming_and_long_poll_routes_are_async(tmp_path):
    found = {key for key, route in routes(tmp_path) if on_event_loop(route.endpoint)}
    assert found == set(ASYNC_ROUTES), "async, not listed: " + ", ".join(
        f"{method} {path}" for method, path in sorted(found - set(ASYNC_ROUTES))
    )


def test_nothing_on_the_event_loop_is_handed_a_session(tmp_path):
    handed = {
        f"{method} {path}: {caller.call.__name__}"
        for (method, path), route in routes(tmp_path)
        for caller in callers(route.dependant)
        if on_event_loop(caller.call)
        and any(dependency.call is get_session for dependency in caller.dependencies)
    }
    assert not handed, handed
