"""The request middleware every service shares, driven as a server drives an ASGI app: a
method outside the standard ones counted as "other" (a client cannot mint label values), a
request whose app raised counted as a 500, and each request timed."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from offchain.core.metrics import HttpMetrics, RequestMetrics


async def answer(scope, receive, send) -> None:
    if scope["path"] == "/boom":
        raise RuntimeError("the app failed before answering")
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def test_methods_are_bounded_and_a_raising_app_is_a_500():
    registry = CollectorRegistry()
    metered = RequestMetrics(answer, HttpMetrics(registry, "test"), lambda scope: "/{any}")

    async def receive() -> dict:
        return {"type": "http.request"}

    async def send(message: dict) -> None:
        pass

    async def requests() -> None:
        for method, path in [("GET", "/a"), ("BREW", "/b"), ("X" * 100, "/c"), ("GET", "/boom")]:
            scope = {"type": "http", "method": method, "path": path}
            if path == "/boom":
                with pytest.raises(RuntimeError):
                    await metered(scope, receive, send)
            else:
                await metered(scope, receive, send)

    asyncio.run(requests())

    def count(method: str, status: str) -> float | None:
        labels = {"method": method, "route": "/{any}", "status": status}
        return registry.get_sample_value("unchained_test_http_requests_total", labels)

    assert (count("GET", "204"), count("other", "204"), count("GET", "500")) == (1, 2, 1)
    timed = registry.get_sample_value(
        "unchained_test_http_request_duration_seconds_count", {"method": "other", "route": "/{any}"}
    )
    assert timed == 2
    methods = {s.labels["method"] for f in registry.collect() for s in f.samples if s.labels}
    assert methods == {"GET", "other"}
