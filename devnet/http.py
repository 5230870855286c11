"""Plain HTTP beside the WebSocket on one port, as Ogmios serves it.

websockets answers only WebSocket handshakes (it refuses request bodies), so each connection
first reads its opening request head: a WebSocket upgrade goes on to websockets unchanged;
anything else is served here as HTTP/1.1 (keep-alive, Content-Length bodies) by an `HttpApp`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.server import ServerConnection

OPEN_TIMEOUT_S = 10  # websockets' default, for the opening request of either kind
IDLE_TIMEOUT_S = 30  # a keep-alive connection with no request for this long is closed
MAX_HEAD_BYTES = 64 << 10
LINGER_S = 2  # after the last answer, how long to wait for the client to close first


@dataclasses.dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str  # without the query string
    body: bytes


@dataclasses.dataclass
class HttpApp:
    """What plain HTTP requests are answered with, and every open connection of either kind."""

    respond: Callable[[HttpRequest], Awaitable[HttpResponse]]
    max_body_bytes: int
    connections: set[HttpOrWebSocket] = dataclasses.field(default_factory=set)

    async def end_connections(self, grace_s: float) -> None:
        """At a stop: HTTP ones at once, the rest after `grace_s` unless they ended already.

        A keep-alive connection or a client that never answers the close handshake (its
        event loop busy elsewhere) would otherwise hold the stop for many seconds.
        """
        for connection in self.connections:
            if connection.serves_http:
                connection.transport.close()
        lost = [connection.connection_lost_waiter for connection in self.connections]
        if lost:
            await asyncio.wait(lost, timeout=grace_s)
        for connection in list(self.connections):
            connection.transport.abort()


class HttpOrWebSocket(ServerConnection):
    """A websockets connection that serves plain HTTP when the client does not upgrade.

    Serve with `open_timeout=None`: the opening timeout is applied here, to the WebSocket
    handshake only, so a keep-alive HTTP connection is not cut after it.
    """

    def __init__(self, *args: Any, app: HttpApp, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app = app
        self._head = bytearray()
        self._http: asyncio.StreamReader | None = None
        self._http_done = False  # answered all it will: what still arrives is dropped
        self._kind_known: asyncio.Future[None] = self.loop.create_future()

    @property
    def serves_http(self) -> bool:
        return self._http is not None

    # --- asyncio protocol: choose the kind on the first request head ----------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.app.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._http_done:
            return
        if self._http is not None:
            self._http.feed_data(data)
        elif self._kind_known.done():
            super().data_received(data)
        else:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0 and len(self._head) <= MAX_HEAD_BYTES:
                return
            head, self._head = bytes(self._head), bytearray()
            if _is_upgrade(head[: max(end, 0)]):
                self._kind_known.set_result(None)
                super().data_received(head)
            else:
                self._http = asyncio.StreamReader(limit=MAX_HEAD_BYTES, loop=self.loop)
                self._http.set_transport(self.transport)  # pauses reading while it is full
                self._http.feed_data(head)
                self._kind_known.set_result(None)

    def eof_received(self) -> bool | None:
        if self._http is None:
            return super().eof_received()
        self._http.feed_eof()
        return not self._http_done  # while serving, stay open to answer what was asked

    def connection_lost(self, exc: Exception | None) -> None:
        self.app.connections.discard(self)
        if self._http is not None:
            self._http.feed_eof()
        super().connection_lost(exc)

    # --- lifecycle, called by websockets' connection handler ------------------------------

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        """The WebSocket handshake, or (for plain HTTP) the whole HTTP session."""
        async with asyncio.timeout(OPEN_TIMEOUT_S):
            await asyncio.wait(
                [self._kind_known, self.connection_lost_waiter],
                return_when=asyncio.FIRST_COMPLETED,
            )
            if self._http is None:
                await super().handshake(*args, **kwargs)
                return
        try:
            await self._serve_http(self._http)
        finally:
            await self._linger()

    async def _linger(self) -> None:
        """Close after the answers have gone out, reading and dropping what still comes.

        Closing with unread data resets the connection, and the client may lose the answer
        (a 413 while it is still uploading the body it was refused for).
        """
        self._http_done = True
        self.transport.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER_S):
                await asyncio.shield(self.connection_lost_waiter)
        self.transport.close()
        await self.connection_lost_waiter

    async def _serve_http(self, reader: asyncio.StreamReader) -> None:
        """Answer requests one after another until the client closes, idles or asks to close."""
        while (read := await self._read_request(reader)) is not None:
            if isinstance(read, HttpResponse):  # the request cannot be read: say why, then close
                self._send(read, close=True)
                return
            request, close = read
            self._send(await self.app.respond(request), close)
            await self.drain()
            if close:
                return

    async def _read_request(
        self, reader: asyncio.StreamReader
    ) -> tuple[HttpRequest, bool] | HttpResponse | None:
        """The next request and whether to close after it, a refusal, or None at the end."""
        try:
            async with asyncio.timeout(IDLE_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return http_error(
                http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"The request head may have at most {MAX_HEAD_BYTES} bytes.",
            )
        except (asyncio.IncompleteReadError, TimeoutError):
            return None
        try:
            method, target, version, headers = _parse_head(head)
        except ValueError as exc:
            return http_error(http.HTTPStatus.BAD_REQUEST, str(exc))
        refusal = self._refusal(headers)
        if refusal is not None:
            return refusal
        try:
            body = await reader.readexactly(int(headers.get("content-length", "0")))
        except asyncio.IncompleteReadError:
            return None
        close = version == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
        return HttpRequest(method, target.partition("?")[0], body), close

    def _refusal(self, headers: dict[str, str]) -> HttpResponse | None:
        """Bodies this server cannot read: it takes Content-Length bodies only, and not huge."""
        if "transfer-encoding" in headers:
            return http_error(http.HTTPStatus.LENGTH_REQUIRED, "Send the body with Content-Length.")
        length = headers.get("content-length", "0")
        if not length.isdigit():
            return http_error(http.HTTPStatus.BAD_REQUEST, "Bad Content-Length.")
        if int(length) > self.app.max_body_bytes:
            return http_error(
                http.HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"The body may have at most {self.app.max_body_bytes} bytes.",
            )
        return None

    def _send(self, response: HttpResponse, close: bool) -> None:
        status = http.HTTPStatus(response.status)
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("Access-Control-Allow-Origin", "*"),
            *response.headers,
            *([("Connection", "close")] if close else []),
        ]
        head = f"HTTP/1.1 {status.value} {status.phrase}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in headers
        )
        self.transport.write(head.encode("latin-1") + b"\r\n" + response.body)


def _is_upgrade(head: bytes) -> bool:
    try:
        _, _, _, headers = _parse_head(head + b"\r\n\r\n")
    except ValueError:
        return False
    return headers.get("upgrade", "").lower() == "websocket"


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, target, version, headers with lower-case names) of an HTTP/1.x request head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise ValueError(f"Not an HTTP/1.x request line: {lines[0][:100]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"Bad header line: {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1], parts[2], headers


def http_error(status: http.HTTPStatus, detail: str) -> HttpResponse:
    """A plain-text error answer that says what to do instead."""
    return HttpResponse(status, f"{status.value} {status.phrase}. {detail}".encode())
