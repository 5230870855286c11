"""Connection bounds uvicorn lacks, for a gateway that faces anyone: a request's headers must
be complete within HEADER_TIMEOUT_S of its first byte (or of the connection, for the first
request), and a peer address holds at most `per_address` open connections, all peers at most
`total`. uvicorn's own keep-alive timer starts only after a response: a request whose headers
never end (slowloris) would stay open for good.

A connection over a bound is answered 503 and closed at once; headers that come too late are
answered 408 and the connection closed; each with a warning in the log naming the peer.
`guarded_protocol(limits)` is the uvicorn HTTP protocol class (`uvicorn.run(..., http=...)`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 1024
MAX_CONNECTIONS_PER_ADDRESS = 128
REASONS = {408: b"Request Timeout", 503: b"Service Unavailable"}


@dataclasses.dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = HEADER_TIMEOUT_S
    total: int = MAX_CONNECTIONS
    per_address: int = MAX_CONNECTIONS_PER_ADDRESS


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol under `limits`, counted across the class's connections."""
    per_address: collections.Counter[str] = collections.Counter()

    class Guarded(HttpToolsProtocol):
        _address: str | None = None  # counted against its address while open
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            address = self.client[0] if self.client else ""
            if len(self.connections) > limits.total:
                self._refuse(503, f"{len(self.connections) - 1} connections are open")
            elif per_address[address] >= limits.per_address:
                self._refuse(503, f"{address} has {per_address[address]} connections open")
            else:
                per_address[address] += 1
                self._address = address
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._address is not None:
                per_address[self._address] -= 1
                if not per_address[self._address]:
                    del per_address[self._address]
                self._address = None
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout_s, self._late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _late(self) -> None:
            self._header_timer = None
            self._refuse(408, f"no complete request headers within {limits.header_timeout_s:g} s")

        def _refuse(self, status: int, why: str) -> None:
            log.warning("gateway: %s closed (%d): %s", self.client, status, why)
            if self.transport.is_closing():
                return
            body = why.encode()
            self.transport.write(
                b"HTTP/1.1 %d %b\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%b" % (status, REASONS[status], len(body), body)
            )
            self.transport.close()

    return Guarded
