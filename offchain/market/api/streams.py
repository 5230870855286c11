"""Live streams (server-sent events) hold no database connection and are bounded.

A stream reads in a short session of its own, never its request's session (which would stay
checked out of the pool for the stream's whole life: some 30 watchers used to starve the API,
the chain follower and the settlement batcher), and a job's stream reads only when the
process's one `EventFeed` says its job has new events. Each open stream still costs a task
and its socket, so a process holds at most `streams_per_client` per client address and
`streams_max` in all; past them a new stream is refused (429 or 503, with the reason), and a
stream's slot is freed however it ends: finished, failed, or its client gone.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.datastructures import State
from starlette.types import Receive, Scope, Send

from offchain.market.errors import Busy, TooMany
from offchain.market.services.event_feed import EventFeed

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
T = TypeVar("T")


class StreamSlots:
    """The streams this process holds open, per client address. Taken and given back on the
    event loop only (the routes that open streams are `async def`): no lock needed."""

    def __init__(self, per_client: int, most: int) -> None:
        self.per_client, self.most = per_client, most
        self.held: collections.Counter[str] = collections.Counter()

    def take(self, client: str) -> Callable[[], None]:
        """A slot for `client`, or TooMany / Busy; returns what gives it back."""
        if self.held[client] >= self.per_client:
            raise TooMany(
                f"this address already has {self.per_client} live streams open, its most: "
                "close one first", "stream",
            )  # fmt: skip
        if self.held.total() >= self.most:
            raise Busy(
                f"the market has {self.most} live streams open, its most: try again later",
                "stream",
            )
        self.held[client] += 1
        return lambda: self._give_back(client)

    def _give_back(self, client: str) -> None:
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]


class _HeldStream(StreamingResponse):
    """A stream that gives its slot back once it is over, however it ends."""

    def __init__(self, events: AsyncIterator[str], give_back: Callable[[], None]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=HEADERS)
        self.give_back = give_back

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.give_back()


def _of_app(request: Request, name: str, make: Callable[[State], T]) -> T:
    """The app's one `name`, made on first use (the market's app and the explorer-only app
    alike)."""
    state = request.app.state
    if not hasattr(state, name):
        setattr(state, name, make(state))
    return getattr(state, name)


def slots(request: Request) -> StreamSlots:
    """The process's bounds on streams, from its settings."""

    def make(state: State) -> StreamSlots:
        return StreamSlots(state.settings.streams_per_client, state.settings.streams_max)

    return _of_app(request, "stream_slots", make)


def event_feed(request: Request) -> EventFeed:
    """What wakes the process's streams when their job has new events."""
    return _of_app(request, "event_feed", lambda state: EventFeed(state.engine))


def open_stream(request: Request, events: AsyncIterator[str]) -> StreamingResponse:
    """`events` as server-sent events in a slot of the request's client address, or the
    refusal; call it last in a route, once every check has passed."""
    client = request.client.host if request.client else ""
    return _HeldStream(events, slots(request).take(client))
