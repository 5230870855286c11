"""/health (alive: answers without asking anything), /ready (what `readiness` finds, 503 when
a check fails) and /metrics (Prometheus's text format) of the market."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client.metrics_core import Metric
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from offchain.core.metrics import (
    CONTENT_TYPE,
    UNMATCHED,
    Computed,
    RequestMetrics,
    Scope,
    exposition,
)
from offchain.market.ops import metrics, readiness
from offchain.market.ops.probes import observe


def route_of(scope: Scope) -> str:
    """The template of the route the router matched (`/jobs/{job_id}`), never the path."""
    return str(getattr(scope.get("route"), "path", UNMATCHED))


def instrument(app: FastAPI) -> None:
    """Count and time every request (the outermost middleware: 413s and 500s included)."""
    app.add_middleware(RequestMetrics, metrics=metrics.HTTP, route_of=route_of)


def mount(app: FastAPI) -> None:
    @app.get("/health", tags=["service"])
    def health() -> dict[str, str | int | bool]:
        """The process is alive (nothing else is asked: see /ready); whether it leads, and
        its follower's lag when it does."""
        background = app.state.background
        return {"status": "alive", "leader": background.leading,
                "follower_lag_blocks": background.follower.lag_blocks}  # fmt: skip

    @app.get("/ready", tags=["service"])
    async def ready() -> JSONResponse:
        """Whether this market can do its work now: each check named, with why it failed
        (503 when any did)."""
        state = app.state
        seen = await observe(state.settings, state.engine, state.background)
        found = readiness.checks(seen, state.settings)
        passed = all(check.ok for check in found.values())
        body = {
            "ready": passed,
            "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in found.items()},
        }
        return JSONResponse(body, status_code=200 if passed else 503)

    @app.get("/metrics", tags=["service"], response_class=Response)
    async def scrape() -> Response:
        """The market's metrics, Prometheus's text exposition format."""
        state = app.state
        seen = await observe(state.settings, state.engine, state.background)
        counts = await asyncio.to_thread(_counted, state.engine)
        text = exposition(
            metrics.REGISTRY, Computed(lambda: metrics.observed(seen)), Computed(lambda: counts)
        )
        return Response(text, media_type=CONTENT_TYPE)


def _counted(engine: Engine) -> list[Metric]:
    """The database's counts, or none when it does not answer (dependency_up says so)."""
    try:
        with Session(engine) as session:
            return list(metrics.counted(session))
    except SQLAlchemyError:
        return []
