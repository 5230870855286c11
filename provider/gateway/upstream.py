"""The gateway's upstream client: HTTP/1.1 over a bounded pool of keep-alive connections to the
endpoints' containers, each answer parsed by httptools as it arrives and streamed back.

Lean on purpose (a paid request's overhead is mostly this): one asyncio Protocol a connection,
no per-request task or timer beyond the read's deadline, no header rewriting but Host and
Content-Length. The request's body comes whole (the gateway reads it before it takes a
connection: `provider.gateway.limits`) and goes with its Content-Length; the answer's body is
streamed with back-pressure (reading from the upstream
pauses while a chunk waits to be sent on). A connection goes back to the pool only once its
answer was read whole and the upstream keeps it alive; a kept connection the upstream closed
meanwhile is dropped, and a request without a body that finds it closed is sent once more on a
fresh one.

Errors: `PoolTimeout` (every connection busy for `timeout_s`), `UpstreamError` (no connection,
a malformed answer, the upstream closed, even while the request was sent, or fell silent for
`timeout_s`).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator
from typing import cast
from urllib.parse import urlsplit

import httptools

from offchain.core.errors import UnchainedError

Headers = list[tuple[bytes, bytes]]

READ_PAUSE_BYTES = 256 * 1024  # answer bytes buffered before reading from the upstream pauses
_END = b""  # the body queue's end mark (body chunks are never empty)
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})  # sent once more if a kept connection fails
_Idle = collections.OrderedDict["_Connection", None]  # a pool's idle connections, oldest first
_FRAMING = frozenset({b"host", b"content-length", b"transfer-encoding"})  # the pool's own


class UpstreamError(UnchainedError):
    """The upstream did not answer (connection refused or lost, malformed, silent)."""


class PoolTimeout(UpstreamError):
    """Every upstream connection stayed busy: none was free within the timeout."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, key: tuple[str, str, int], idle: _Idle
    ) -> None:
        self.loop, self.key, self._idle = loop, key, idle  # the pool's idle connections
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = False  # has served a request already (a close on reuse may be a race)
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[None] | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._error: UpstreamError | None = None
        self.status = 0
        self.headers: Headers = []
        self.complete = False
        self._head_only = False  # a HEAD: no body follows, whatever the headers say
        self._framed = False  # Content-Length or chunked: the end is known before a close
        self._keep_alive = False  # the upstream keeps the connection after this answer

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(UpstreamError(f"malformed answer: {error}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._idle.pop(self, None)
        started = self._head is not None and self._head.done() and not self.complete
        if started and not self._framed and not self._head_only:  # a body read to the close
            self.on_message_complete()
            return
        self._fail(UpstreamError(f"the upstream closed the connection{f': {exc}' if exc else ''}"))

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None:
            _settle(self._drained)
            self._drained = None

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value):
            self._framed = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue...): the real one follows
            self.headers = []
            self._framed = False
            return
        self.status = status
        self._keep_alive = self._parser.should_keep_alive()  # known once the headers are
        if self._head is not None:
            _settle(self._head)
        if self._head_only:
            self.on_message_complete()

    def on_body(self, body: bytes) -> None:
        if self._head_only or not body:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > READ_PAUSE_BYTES and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.status or self.complete:
            return  # an interim answer's end
        self.complete = True
        self._chunks.append(_END)
        self._wake()

    # the request
    async def request(self, head: bytes, body: bytes, head_only: bool, timeout_s: float) -> None:
        """Send the request (`head`, then `body`) and wait for its answer's status and headers."""
        assert self.transport is not None
        if self.closed or self.transport.is_closing():
            raise UpstreamError("the upstream closed the connection")
        self.used = True
        self._head_only = head_only
        self._head = self.loop.create_future()
        self.transport.write(head + body if body else head)
        await self._drain()  # the upstream may close while it is sent: UpstreamError
        await self._wait(self._head, timeout_s)

    async def body(self, timeout_s: float) -> AsyncIterator[bytes]:
        """The answer's body as it arrives."""
        while True:
            if not self._chunks:
                self._waiter = self.loop.create_future()
                await self._wait(self._waiter, timeout_s)
            chunk = self._chunks.popleft()
            if chunk is _END:
                return
            self._buffered -= len(chunk)
            if self._buffered <= READ_PAUSE_BYTES and self.transport is not None:
                self.transport.resume_reading()
            yield chunk

    def reusable(self) -> bool:
        return self.complete and self._keep_alive and not (self.closed or self._head_only)

    def reset(self) -> None:
        """Ready for the next request (its answer was read whole)."""
        self._parser = httptools.HttpResponseParser(self)
        self._head = self._waiter = None
        self._chunks.clear()
        self._buffered = 0
        self.status, self.headers, self.complete = 0, [], False
        self._framed = self._keep_alive = False

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _drain(self) -> None:
        if self._drained is not None:
            await self._drained
        if self._error is not None:
            raise self._error

    async def _wait(self, future: asyncio.Future[None], timeout_s: float) -> None:
        if self._error is not None:
            raise self._error
        timer = self.loop.call_later(timeout_s, _expire, future, timeout_s)
        try:
            await future
        finally:
            timer.cancel()

    def _wake(self) -> None:
        if self._waiter is not None:
            _settle(self._waiter)
            self._waiter = None

    def _fail(self, error: UpstreamError) -> None:
        if self._error is None:
            self._error = error
        for future in (self._head, self._waiter, self._drained):
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # raised by whichever wait comes first: the rest need not


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _expire(future: asyncio.Future[None], timeout_s: float) -> None:
    if not future.done():
        future.set_exception(UpstreamError(f"the upstream was silent for {timeout_s:g} s"))


class Answer:
    """An upstream's answer: its status and headers (names lower-case, as sent otherwise),
    then its body (`chunks`); `aclose` once done with it, read whole or not."""

    def __init__(self, pool: UpstreamPool, connection: _Connection) -> None:
        self._pool, self._connection = pool, connection
        self.status = connection.status
        self.headers = connection.headers

    def chunks(self) -> AsyncIterator[bytes]:
        return self._connection.body(self._pool.timeout_s)

    def aclose(self) -> None:
        self._pool.release(self._connection)


class UpstreamPool:
    """At most `max_connections` connections to the upstreams (kept alive between requests,
    any upstream's): a request waits for one at most `timeout_s`, a connect at most
    `connect_timeout_s`, an answer's head or next body chunk at most `timeout_s`."""

    def __init__(self, max_connections: int, timeout_s: float, connect_timeout_s: float) -> None:
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self._slots = asyncio.Semaphore(max_connections)
        self._max = max_connections
        self._idle: _Idle = collections.OrderedDict()
        self._busy = 0
        self._ssl: ssl.SSLContext | None = None

    async def send(
        self, method: str, upstream: str, target: str, headers: Headers, body: bytes | None
    ) -> Answer:
        """Send the request for `target` (its path and query, percent-encoded: no space or
        control character) to `upstream` (scheme://host[:port]); answer its status and headers
        (the body to be read from it). `headers` are sent as given but Host, Content-Length
        and Transfer-Encoding."""
        parts = urlsplit(upstream)
        scheme = parts.scheme
        host = parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        if not target.isprintable() or " " in target:
            raise UpstreamError(f"{target!r} is not a request target")
        head = _request_head(method, target, parts.netloc, headers, body)
        if self._slots.locked():  # wait_for costs a task: only when a wait is likely
            try:
                await asyncio.wait_for(self._slots.acquire(), self.timeout_s)
            except TimeoutError as error:
                raise PoolTimeout("every upstream connection is busy") from error
        else:
            await self._slots.acquire()
        retried = body is None and method in IDEMPOTENT
        self._busy += 1
        try:
            for attempt in (1, 2):
                connection = await self._connection((scheme, host, port))
                reused = connection.used
                try:
                    await connection.request(head, body or b"", method == "HEAD", self.timeout_s)
                except UpstreamError:
                    connection.close()
                    if reused and retried and attempt == 1:
                        continue  # closed by the upstream as it was taken: once more, fresh
                    raise
                except BaseException:
                    connection.close()
                    raise
                return Answer(self, connection)
            raise AssertionError("unreachable")
        except BaseException:
            self._release_slot()
            raise

    async def _connection(self, key: tuple[str, str, int]) -> _Connection:
        connection = next((c for c in self._idle if c.key == key), None)
        if connection is not None:
            del self._idle[connection]
            return connection
        while self._idle and len(self._idle) + self._busy > self._max:
            self._idle.popitem(last=False)[0].close()
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        if scheme == "https" and self._ssl is None:
            self._ssl = ssl.create_default_context()
        connection = _Connection(loop, key, self._idle)
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: connection, host, port,
                                       ssl=self._ssl if scheme == "https" else None),
                self.connect_timeout_s,
            )  # fmt: skip
        except (OSError, TimeoutError) as error:
            raise UpstreamError(f"could not connect to {host}:{port}: {error!r}") from error
        return connection

    def release(self, connection: _Connection) -> None:
        if connection.reusable():
            connection.reset()
            self._idle[connection] = None
        else:
            connection.close()
        self._release_slot()

    def _release_slot(self) -> None:
        self._busy -= 1
        self._slots.release()

    async def aclose(self) -> None:
        while self._idle:
            self._idle.popitem()[0].close()


def _request_head(
    method: str, target: str, host: str, headers: Headers, body: bytes | None
) -> bytes:
    """The request line and headers, the body's length its own."""
    lines = [f"{method} {target} HTTP/1.1\r\nhost: {host}\r\n".encode("latin-1")]
    lines += [b"%b: %b\r\n" % (name, value) for name, value in headers
              if name not in _FRAMING]  # fmt: skip
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(b"content-length: %d\r\n" % len(body or b""))
    lines.append(b"\r\n")
    return b"".join(lines)
