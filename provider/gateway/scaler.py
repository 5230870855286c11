"""Endpoints that scale with their requests: a service spec's `min_replicas` (below `replicas`)
and `scale_down_after_s` (`offchain.protocol.job.jobspec.ServiceSpec`).

The gateway sees every request, so it scales: a sweep every `SWEEP_S` stops the replicas above
the minimum of an endpoint that has had no request in flight for `scale_down_after_s` (its
book row first loses their upstreams, so no new request is sent to one going down). At zero
the row says so (`RentalBook.set_warm`: `cold_since_ms`) and its per-second price stops
(`due_of` counts warm seconds only). The first request to an endpoint at zero starts a replica
(`Services.scale`: the same hardened container, its health path waited for within the start
timeout) and is served once it answers: a cold start. Requests arriving meanwhile wait on that
same start (each holds an endpoint slot meanwhile: as many as `ENDPOINT_SLOTS` wait); a start
that fails answers each of them `ColdStartFailed` (the gateway's 503, nothing charged).

Scaling up: when a request finds more requests in flight on the endpoint than
`IN_FLIGHT_PER_REPLICA` times its warm replicas, one more replica starts in the background (up
to `replicas`); that request goes on to the warm ones. Stopped replicas keep their GPUs and
slots: the daemon took them at the deploy, a cold start never waits for capacity.

Where replicas start and stop is a `Scaling`: this machine's engine (`OnHost`, `Services.scale`)
or, on a Ray fleet, the daemon asked through a table both share (`FleetScaling` in
`provider.placement.fleet_gateway`, `provider.placement.warm_asks`): the daemon owns the
fleet's placement groups and its nodes' GPUs, so the gateway does not drive Ray itself; it
still decides when, as it alone sees the requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol

from offchain.core.errors import UnchainedError
from offchain.protocol.job.jobspec import JobSpecError, ServiceSpec, parse_servicespec
from provider.rentals.book import ENDPOINT, RUNNING, Rental, RentalBook
from provider.rentals.services import Services

log = logging.getLogger(__name__)

SWEEP_S = 0.5
IN_FLIGHT_PER_REPLICA = 4  # more in flight per warm replica than this starts one more


class ColdStartFailed(UnchainedError):
    """No replica of the endpoint could be started: the request is answered 503, unpaid."""


@functools.lru_cache(maxsize=1024)
def scaling_spec(spec_json: str) -> ServiceSpec | None:
    """The service spec in `spec_json` if it scales (fewer replicas kept warm than it may
    run), else None (its replicas all run from its start to its stop)."""
    try:
        spec = parse_servicespec(json.loads(spec_json))
    except (JobSpecError, ValueError):
        return None
    return spec if spec.warm_replicas < spec.replicas else None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Scaling(Protocol):
    """Where the replicas of an endpoint that scales start and stop; each call updates the
    book's upstream (`RentalBook.set_warm`, which also pauses and resumes its billing)."""

    async def up(self, name: str, spec: ServiceSpec, count: int) -> None:
        """`count` replicas warm and in the book; an UnchainedError saying why not."""
        ...

    def down(self, name: str, spec: ServiceSpec, kept: str) -> Awaitable[object]:
        """The book's upstream is `kept` (the first `spec.warm_replicas`) from the call on, so
        no request goes to the others (a fleet's daemon is asked before the book changes: it
        never puts them back), which stop once the awaitable is done."""
        ...


class OnHost:
    """Replicas on this machine's engine: `Services.scale`, then the book."""

    def __init__(self, endpoints: RentalBook, services: Services) -> None:
        self.endpoints = endpoints
        self.services = services

    async def up(self, name: str, spec: ServiceSpec, count: int) -> None:
        upstream = await asyncio.to_thread(self.services.scale, name, spec, count)
        self.endpoints.set_warm(name, upstream, now_ms())

    def down(self, name: str, spec: ServiceSpec, kept: str) -> Awaitable[str]:
        self.endpoints.set_warm(name, kept, now_ms())  # before: no request goes to them
        return asyncio.to_thread(self.services.scale, name, spec, spec.warm_replicas)


class Scaler:
    """The gateway's scaling of its scaling endpoints, in its event loop."""

    def __init__(self, endpoints: RentalBook, services: Services | Scaling) -> None:
        """`services`: this machine's (a single host), or a fleet's `Scaling`."""
        self.endpoints = endpoints
        self.scaling = OnHost(endpoints, services) if isinstance(services, Services) else services
        self._in_flight: dict[str, int] = {}
        self._last: dict[str, int] = {}  # POSIX ms an endpoint's last request ended
        self._locks: dict[str, asyncio.Lock] = {}  # one scaling at a time, per endpoint
        self._starting: dict[str, asyncio.Future[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._since = now_ms()  # a request before this gateway started is not known to it

    def start(self) -> None:
        """Sweep for idle replicas from now on (the gateway's startup)."""
        self._sweeper = asyncio.ensure_future(self._sweep_forever())

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    def in_flight(self, name: str) -> int:
        """Requests to endpoint `name` being served (or waiting on its cold start) now."""
        return self._in_flight.get(name, 0)

    @contextlib.asynccontextmanager
    async def serving(self, endpoint: Rental) -> AsyncIterator[Rental]:
        """While a request to `endpoint` is served: its row with a warm upstream (after a
        cold start if it had none); ColdStartFailed if none could be started."""
        spec = scaling_spec(endpoint.spec_json)
        if spec is None:
            yield endpoint
            return
        name = endpoint.name
        self._in_flight[name] = self._in_flight.get(name, 0) + 1
        try:
            warm = self._warm(name)
            if not warm.upstreams:
                await self._wake(name, spec, 1)
                warm = self._warm(name)
                if not warm.upstreams:  # scaled down again already: never, with it in flight
                    raise ColdStartFailed(f"endpoint {endpoint.public_name} has no replica")
            elif self._busy(name, spec, len(warm.upstreams)):
                self._wake_soon(name, spec, len(warm.upstreams) + 1)
            yield warm
        finally:
            self._in_flight[name] -= 1
            self._last[name] = now_ms()

    def _busy(self, name: str, spec: ServiceSpec, warm: int) -> bool:
        """Whether `name` should start one more replica: more in flight than its warm ones
        serve, room for one, none starting."""
        crowded = self._in_flight[name] > IN_FLIGHT_PER_REPLICA * warm
        return crowded and warm < spec.replicas and name not in self._starting

    def _warm(self, name: str) -> Rental:
        row = self.endpoints.get(name)
        if row is None or row.state != RUNNING:
            raise ColdStartFailed(f"endpoint {name} is {row.state if row else 'gone'}")
        return row

    async def _wake(self, name: str, spec: ServiceSpec, count: int) -> None:
        """`count` replicas warm: the start in progress if there is one (every request at
        zero waits on the same), else a new one."""
        started = self._starting.get(name) or self._wake_soon(name, spec, count)
        await asyncio.shield(started)

    def _wake_soon(self, name: str, spec: ServiceSpec, count: int) -> asyncio.Future[None]:
        started = asyncio.ensure_future(self._scale_up(name, spec, count))
        self._starting[name] = started

        def done(future: asyncio.Future[None]) -> None:
            if self._starting.get(name) is future:
                del self._starting[name]
            if not future.cancelled() and future.exception() is not None:
                log.warning("endpoint %s: %s", name, future.exception())

        started.add_done_callback(done)
        return started

    async def _scale_up(self, name: str, spec: ServiceSpec, count: int) -> None:
        async with self._locks.setdefault(name, asyncio.Lock()):
            if len(self._warm(name).upstreams) >= count:
                return
            began = time.monotonic()
            try:
                await self.scaling.up(name, spec, count)
            except UnchainedError as exc:
                raise ColdStartFailed(f"endpoint {name}'s cold start failed: {exc}") from exc
            self._last[name] = now_ms()
            log.info("endpoint %s: %d replica(s) warm in %.2f s", name, count,
                     time.monotonic() - began)  # fmt: skip

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # an engine's error must not end the sweeping
                log.exception("scaling sweep")
            await asyncio.sleep(SWEEP_S)

    async def sweep(self) -> None:
        """Stop the replicas above the minimum of every endpoint idle its scale-down time."""
        for endpoint in self.endpoints.list():
            spec = scaling_spec(endpoint.spec_json)
            if spec is None or endpoint.kind != ENDPOINT or endpoint.state != RUNNING:
                continue
            if len(endpoint.upstreams) > spec.warm_replicas and self._idle(endpoint, spec):
                await self._scale_down(endpoint.name, spec)

    def _idle(self, endpoint: Rental, spec: ServiceSpec) -> bool:
        name = endpoint.name
        if self._in_flight.get(name, 0) or name in self._starting:
            return False
        since = max(self._last.get(name, 0), endpoint.started_ms, self._since)
        return now_ms() - since >= spec.scale_down_after_s * 1000

    async def _scale_down(self, name: str, spec: ServiceSpec) -> None:
        async with self._locks.setdefault(name, asyncio.Lock()):
            warm = self.endpoints.get(name)
            if warm is None or warm.state != RUNNING or not self._idle(warm, spec):
                return
            kept = ",".join(warm.upstreams[: spec.warm_replicas])
            await self.scaling.down(name, spec, kept)  # the book first: no request goes to them
            log.info("endpoint %s: scaled down to %d replica(s)", name, spec.warm_replicas)
