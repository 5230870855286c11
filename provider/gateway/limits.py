"""What one renter may hold of the gateway, and how long a request's body may take.

A renter reaches the gateway with many connections, each a valid IOU: without bounds one
renter's slow requests would hold what every other renter's requests need. So a request
holds an upstream slot of its endpoint and of its renter (`Quota`: at most so many per
endpoint, per renter and in all; a 503 at once when one is full), and its body is read whole
before an upstream connection is taken (`read_body`): within a deadline that grows with the
bytes received (BODY_GRACE_S, plus a second per MIN_BODY_RATE bytes), into buffers bounded
per renter and in all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provider.gateway.control import Receive

BODY_GRACE_S = 10.0  # a body's first byte, and its last beyond what its rate allows
MIN_BODY_RATE = 64 * 1024  # bytes a second a body must keep up, on average


class Quota:
    """Units of one resource held by keys (an endpoint, a renter): at most `per_key` each
    and `total` in all."""

    def __init__(self, per_key: int, total: int) -> None:
        self.per_key, self.total = per_key, total
        self.in_use = 0
        self._held: dict[Hashable, int] = {}

    def take(self, key: Hashable, units: int = 1) -> bool:
        """Whether `key` could take `units` more (then it holds them)."""
        held = self._held.get(key, 0)
        if held + units > self.per_key or self.in_use + units > self.total:
            return False
        self._held[key] = held + units
        self.in_use += units
        return True

    def give(self, key: Hashable, units: int = 1) -> None:
        """Give back `units` that `key` took."""
        left = self._held[key] - units
        if left:
            self._held[key] = left
        else:
            del self._held[key]
        self.in_use -= units

    def held(self, key: Hashable) -> int:
        return self._held.get(key, 0)

    @contextlib.contextmanager
    def holding(self, key: Hashable, what: str) -> Iterator[Callable[[int], None]]:
        """A `hold(units)` for `key` (BodyRefused 503 naming `what` when the quota is
        full), all it took given back when the block ends."""
        taken = 0

        def hold(units: int) -> None:
            nonlocal taken
            if not self.take(key, units):
                raise BodyRefused(503, f"{what} are full: {self.held(key)} of your {self.per_key} "
                                  f"and {self.in_use} of {self.total} in all are held")  # fmt: skip
            taken += units

        try:
            yield hold
        finally:
            if taken:
                self.give(key, taken)


class BodyRefused(Exception):
    """The request's body was not read whole: `status` and `reason` are the answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class ClientGone(Exception):
    """The client disconnected before its request's body was read."""


def _hold_nothing(_: int) -> None:
    return None


async def read_body(
    receive: Receive, limit: int, hold: Callable[[int], None] = _hold_nothing
) -> bytes:
    """The request's whole body. BodyRefused: 413 once it passes `limit` bytes, 408 once it
    comes slower than its deadline allows, or what `hold` (called with each chunk's size
    before the chunk is kept: it raises BodyRefused when no buffer is left) raises.
    ClientGone if the client leaves."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    chunks: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(BODY_GRACE_S) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk: bytes = message.get("body", b"")
                total += len(chunk)
                if total > limit:
                    raise BodyRefused(413, f"a body is at most {limit} bytes here")
                if chunk:
                    hold(len(chunk))
                    chunks.append(chunk)
                    deadline.reschedule(started + BODY_GRACE_S + total / MIN_BODY_RATE)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError as error:
        raise BodyRefused(408, f"the body stopped after {total} bytes: a body must start "
                          f"within {BODY_GRACE_S:g} s and come at {MIN_BODY_RATE} bytes/s "
                          "or more") from error  # fmt: skip
