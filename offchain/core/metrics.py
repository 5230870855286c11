"""Prometheus metrics every service shares: HTTP requests counted and timed by route template
and status (an ASGI middleware), metrics computed at scrape time, and the exposition itself.

Label values stay bounded: a route is its template (`/jobs/{job_id}`), never the raw path; a
method outside the standard ones is "other"; a request no route matched is "unmatched". Job
ids, renter keys and paths never become labels. Each service keeps its metrics on a registry
of its own, so one process (a test) can hold several services side by side."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"
# seconds: a cached read answers in milliseconds, an upload or a long poll in tens of seconds
LATENCY_BUCKETS_S = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class HttpMetrics:
    """`unchained_<service>_http_requests_total{method,route,status}` and
    `unchained_<service>_http_request_duration_seconds{method,route}` on `registry`."""

    def __init__(self, registry: CollectorRegistry, service: str) -> None:
        self.requests = Counter(
            f"unchained_{service}_http_requests", "HTTP requests answered, by route template "
            "and status.", ["method", "route", "status"], registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            f"unchained_{service}_http_request_duration_seconds", "Time from a request's "
            "arrival to the end of its answer, by route template.", ["method", "route"],
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip

        # each label set's children, looked up once: `labels()` takes a lock and checks its
        # values on every call, most of what a request would cost (bounded: labels are)
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        named = method if method in METHODS else "other"
        key = (named, route, status)  # bounded, all three: the cache is too
        children = self._children.get(key)
        if children is None:
            children = (self.requests.labels(named, route, str(status)),
                        self.duration.labels(named, route))  # fmt: skip
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)


class RequestMetrics:
    """ASGI middleware: each HTTP request counted and timed under `route_of(scope)`, read
    after the app ran (a router writes the route it matched into the scope). A request whose
    app sent no answer (the client left, the app raised) counts as status 500."""

    def __init__(
        self, app: ASGIApp, metrics: HttpMetrics, route_of: Callable[[Scope], str]
    ) -> None:
        self.app, self.metrics, self.route_of = app, metrics, route_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe(scope["method"], self.route_of(scope), status, seconds)


class Computed(Collector):
    """Metrics made at scrape time by `make` (a database count, a book's totals): always the
    truth at the moment of the scrape, and nothing to keep up to date between scrapes."""

    def __init__(self, make: Callable[[], Iterable[Metric]]) -> None:
        self.make = make

    def collect(self) -> Iterator[Metric]:
        yield from self.make()


def exposition(*collectors: CollectorRegistry | Collector) -> bytes:
    """The text format of every metric of `collectors`, in one scrape."""
    scrape = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        scrape.register(collector)
    return generate_latest(scrape)


# the text format every Prometheus 2 reads (what `generate_latest` writes)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def serve(listen: str, *collectors: CollectorRegistry | Collector) -> Callable[[], None]:
    """Serve `collectors` at http://`listen`/metrics (HOST:PORT) from a thread of its own,
    for a process that has no HTTP server of its own to answer a scrape (the provider
    daemon) or should not answer it to the world (the gateway); returns what stops it.
    Raises ValueError for a `listen` that is no HOST:PORT, OSError when it cannot bind."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"metrics listen address {listen!r}: not HOST:PORT")
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    server, thread = start_http_server(int(port), host.strip("[]"), registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
