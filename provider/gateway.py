"""The provider's gateway: renters reach its endpoints (`provider.endpoints`) at
`/endpoints/<name>/<path>`, each request paid by the IOU in its `Unchained-Iou` header.

The 402 rule: a request without an IOU, with a malformed one, one on another channel than the
endpoint's, one the channel book refuses (signature, stale, above the channel) or one whose
amount does not cover everything served on the endpoint so far (requests in flight included)
plus this request's price gets 402 with `{"error", "due", "channel", "price"}` and an
`Unchained-Due` header: the least the next IOU must name. An IOU taken is durably stored
(`ChannelBook.accept`, through `IouStore`'s group commit) before the request goes upstream, so
before the answer's first byte; the channel must still be one `may_serve` allows.

The request is then streamed to the endpoint's upstream and the answer streamed back (httpx,
a bounded pool of upstream connections); the request body is bounded whatever its framing (a
declared Content-Length above the bound is refused before the IOU is looked at, a chunked one
is cut at the bound: 413), the answer's body too (502 if declared above it, else the
connection is cut). A request is charged (`EndpointBook.charge`) when the upstream's answer
starts: one the upstream never answers is not charged, and the renter's IOU for it pays the
next one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import httpx

from offchain.protocol.iou import IOU_HEADER, SignedIou
from provider.channels import ChannelBook, IouRefused
from provider.endpoints import Endpoint, EndpointBook
from provider.gateway_commit import IouStore

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PREFIX = "/endpoints"
DUE_HEADER = b"unchained-due"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_UPSTREAM_CONNECTIONS = 64
UPSTREAM_TIMEOUT_S = 300.0  # an inference may take minutes; a silent upstream no longer
# Hop-by-hop headers (RFC 9110 7.6.1) and what the gateway itself sets or keeps to itself.
NOT_FORWARDED = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
    b"upgrade", b"proxy-authorization", b"proxy-authenticate", b"host",
    IOU_HEADER.lower().encode(),
})  # fmt: skip


class BodyTooLarge(Exception):
    """The request's body passed the gateway's bound while it was streamed."""


class ClientGone(Exception):
    """The client disconnected before its request's body was read."""


class Gateway:
    """The ASGI app (`gateway_app`)."""

    def __init__(
        self,
        book: ChannelBook,
        endpoints: EndpointBook,
        *,
        max_request_bytes: int,
        max_response_bytes: int,
        max_upstream_connections: int,
        upstream_timeout_s: float,
    ) -> None:
        self.endpoints = endpoints
        self.store = IouStore(book)
        self.max_request_bytes = max_request_bytes
        self.max_response_bytes = max_response_bytes
        self._limits = httpx.Limits(
            max_connections=max_upstream_connections,
            max_keepalive_connections=max_upstream_connections,
        )
        self._timeout = httpx.Timeout(upstream_timeout_s, connect=10.0)
        self._client: httpx.AsyncClient | None = None
        # lovelace of requests taken but not charged yet (their upstream has not answered),
        # by endpoint: the next IOU must cover them too
        self._in_flight: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def aclose(self) -> None:
        """Close the upstream connections and the IOU store's thread."""
        if self._client is not None:
            await self._client.aclose()
        self.store.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if path.rstrip("/") == PREFIX and scope["method"] in ("GET", "HEAD"):
            listed = [
                {"name": e.name, "price_per_request": e.price_per_request,
                 "price_per_second": e.price_per_second}
                for e in self.endpoints.list()
            ]  # fmt: skip
            await _json(send, 200, listed)
            return
        if not path.startswith(PREFIX + "/"):
            await _json(send, 404, {"error": f"no route {path}: try {PREFIX}/<name>/<path>"})
            return
        name, _, rest = path[len(PREFIX) + 1 :].partition("/")
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            await _json(send, 404, {"error": f"no endpoint named {name!r}"})
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        try:
            declared = _content_length(headers)
        except ValueError as error:
            await _json(send, 400, {"error": str(error)})
            return
        if declared is not None and declared > self.max_request_bytes:
            await _too_large(send, declared, self.max_request_bytes)
            return
        price = endpoint.price_per_request
        due = endpoint.served + self._in_flight.get(name, 0) + price
        try:
            iou = _iou_of(headers, endpoint, due)
        except ValueError as error:
            await _payment_required(send, endpoint, str(error), due)
            return
        held = _Held(self._in_flight, self.endpoints, name, price)

        async def settled_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                held.release()  # no-op once charged: an answer of the gateway's own
            await send(message)

        try:
            try:
                await self.store.store(iou, due)
            except IouRefused as refusal:
                await _payment_required(settled_send, endpoint, str(refusal), due)
                return
            has_body = declared != 0 and (declared is not None or _chunked(headers))
            body = _bounded(receive, self.max_request_bytes) if has_body else None
            upstream = f"{endpoint.upstream}/{rest}"
            if scope["query_string"]:
                upstream += "?" + scope["query_string"].decode("latin-1")
            forwarded = [(k, v) for k, v in headers if k not in NOT_FORWARDED]
            await self._proxy(scope["method"], upstream, forwarded, body, settled_send, held)
        finally:
            held.release()

    async def _proxy(
        self,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterator[bytes] | None,
        send: Send,
        held: _Held,
    ) -> None:
        """Stream the request to `url` and its answer back, charged as the answer starts."""
        if self._client is None:
            self._client = httpx.AsyncClient(limits=self._limits, timeout=self._timeout)
        request = self._client.build_request(method, url, headers=headers, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except BodyTooLarge:
            await _too_large(send, None, self.max_request_bytes)
            return
        except ClientGone:
            return
        except httpx.PoolTimeout:
            await _json(send, 503, {"error": "the gateway's upstream connections are all busy"})
            return
        except httpx.HTTPError as error:
            await _json(send, 502, {"error": f"upstream did not answer: {error!r}"})
            return
        try:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_response_bytes:
                await _json(send, 502, {"error": f"upstream answer of {declared} bytes is above "
                                        f"the gateway's {self.max_response_bytes}"})  # fmt: skip
                return
            held.charge()
            kept = [(k, v) for k, v in response.headers.raw if k.lower() not in NOT_FORWARDED]
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": kept})  # fmt: skip
            sent = 0
            async for chunk in response.aiter_raw():
                sent += len(chunk)
                if sent > self.max_response_bytes:  # the status is sent: cut the connection
                    raise RuntimeError(f"upstream {url} answered more than "
                                       f"{self.max_response_bytes} bytes: cut")  # fmt: skip
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


class _Held:
    """A request's price held on its endpoint from its IOU's check until it is charged (its
    upstream's answer starts) or let go (anything else): the next IOU must cover it meanwhile.
    Settled before the request's answer starts, so the renter's next request sees the served
    total this one leaves."""

    def __init__(
        self, in_flight: dict[str, int], endpoints: EndpointBook, name: str, price: int
    ) -> None:
        self._in_flight, self._endpoints = in_flight, endpoints
        self._name, self._price = name, price
        in_flight[name] = in_flight.get(name, 0) + price
        self._settled = False

    def charge(self) -> None:
        if not self._settled:
            self.release()
            self._endpoints.charge(self._name, self._price)

    def release(self) -> None:
        if not self._settled:
            self._settled = True
            self._in_flight[self._name] -= self._price


def gateway_app(
    book: ChannelBook,
    endpoints: EndpointBook,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    max_upstream_connections: int = MAX_UPSTREAM_CONNECTIONS,
    upstream_timeout_s: float = UPSTREAM_TIMEOUT_S,
) -> Gateway:
    """The gateway over `book` (IOUs) and `endpoints` (where and at what price), for uvicorn."""
    return Gateway(
        book, endpoints, max_request_bytes=max_request_bytes,
        max_response_bytes=max_response_bytes,
        max_upstream_connections=max_upstream_connections, upstream_timeout_s=upstream_timeout_s,
    )  # fmt: skip


def _iou_of(headers: Iterable[tuple[bytes, bytes]], endpoint: Endpoint, due: int) -> SignedIou:
    """The request's IOU if it may pay `due` on `endpoint`; ValueError saying why not."""
    wanted = IOU_HEADER.lower().encode()
    found = [v for k, v in headers if k == wanted]
    if not found:
        raise ValueError(f"no {IOU_HEADER} header: this endpoint is paid by IOU")
    if len(found) > 1:
        raise ValueError(f"more than one {IOU_HEADER} header")
    try:
        iou = SignedIou.from_header(found[0].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"malformed {IOU_HEADER} header: {error}") from error
    if iou.channel != endpoint.channel:
        raise ValueError(f"IOU on channel {iou.channel.hex()}: endpoint {endpoint.name} is "
                         f"paid on channel {endpoint.channel.hex()}")  # fmt: skip
    if iou.amount < due:
        raise ValueError(f"IOU of {iou.amount} lovelace does not cover the {due} due: "
                         f"{due - endpoint.price_per_request} served so far plus this "
                         f"request's {endpoint.price_per_request}")  # fmt: skip
    return iou


def _content_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    values = {v for k, v in headers if k == b"content-length"}
    if not values:
        return None
    if len(values) > 1 or not (value := values.pop()).isdigit():
        raise ValueError("Content-Length must be one decimal number")
    return int(value)


def _chunked(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(k == b"transfer-encoding" for k, _ in headers)


async def _bounded(receive: Receive, limit: int) -> AsyncIterator[bytes]:
    """The request's body as it arrives; BodyTooLarge once it passes `limit` bytes."""
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            raise BodyTooLarge
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _json(
    send: Send, status: int, body: object, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        *headers]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})


async def _payment_required(send: Send, endpoint: Endpoint, reason: str, due: int) -> None:
    body = {"error": reason, "due": due, "channel": endpoint.channel.hex(),
            "price": endpoint.price_per_request}  # fmt: skip
    await _json(send, 402, body, [(DUE_HEADER, str(due).encode())])


async def _too_large(send: Send, declared: int | None, limit: int) -> None:
    size = "a body" if declared is None else f"a body of {declared} bytes"
    await _json(send, 413, {"error": f"{size} is above the gateway's {limit} bytes"})
