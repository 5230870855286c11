"""The provider's gateway: renters reach its endpoints (`provider.rentals.book`) at
`/endpoints/<name>/<path>`, each request paid by the IOU in its `Unchained-Iou` header.

The 402 rule: a request without an IOU, with a malformed one, one on another channel than the
endpoint's, one the channel book refuses (signature, stale, above the channel) or one whose
amount does not cover everything served on the endpoint so far (requests in flight included)
plus this request's price gets 402 with `{"error", "due", "channel", "price"}` and an
`Unchained-Due` header: the least the next IOU must name. An IOU taken is durably stored
(`ChannelBook.accept`, through `IouStore`'s group commit) before the request goes upstream, so
before the answer's first byte; the channel must still be one `may_serve` allows.

The request then takes a slot of its endpoint and of its renter (503 at once when either is
full: `provider.gateway.limits`), its body is read whole within its deadline (408) into
buffers bounded per renter (503), and only then sent to the endpoint's upstream, its answer
streamed back (`provider.gateway.upstream`: a bounded pool of keep-alive upstream
connections). The request body is bounded whatever its framing (a declared Content-Length
above the bound is refused before the IOU is looked at, a chunked one is cut at the bound:
413), the answer's body too (502 if declared above it, else the connection is cut). A request
is charged (`RentalBook.charge`) when the upstream's answer starts: one the upstream never
answers (or refused for a slot, a buffer or its body) is not charged, and the renter's IOU for
it pays the next one. The connections themselves are bounded by `provider.gateway.guard`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from urllib.parse import quote

from offchain.protocol.ledger.iou import IOU_HEADER
from provider.gateway.commit import IouStore
from provider.gateway.control import (
    CONTROL_PREFIX,
    ControlRoutes,
    DeployTerms,
    LogReader,
    Message,
    Receive,
    Scope,
    Send,
    header_iou,
    iou_of,
    payment_required,
    reply,
)
from provider.gateway.limits import BodyRefused, ClientGone, Quota, read_body
from provider.gateway.scaler import ColdStartFailed, Scaler
from provider.gateway.tokens import (
    CANCEL_PREFIX,
    STREAM_HEADER,
    Streams,
    TokenPrices,
    UsageMeter,
    token_prices,
    with_usage,
)
from provider.gateway.upstream import PoolTimeout, UpstreamError, UpstreamPool
from provider.money.channel_book import ChannelBook, IouRefused
from provider.rentals.book import RUNNING, Rental, RentalBook, channel_due
from provider.rentals.jobs import JobFiles

log = logging.getLogger(__name__)


PREFIX = "/endpoints"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_UPSTREAM_CONNECTIONS = 256  # requests in flight to the upstreams, all endpoints'
ENDPOINT_SLOTS = 64  # ... of one endpoint
RENTER_SLOTS = 128  # ... of one renter's endpoints
MAX_BUFFERED_BYTES = 256 * 1024 * 1024  # request bodies read, not yet sent on: all renters'
RENTER_BUFFERED_BYTES = 64 * 1024 * 1024  # ... one renter's
CLOSE = [(b"connection", b"close")]  # after a body left unread
UPSTREAM_TIMEOUT_S = 300.0  # an inference may take minutes; a silent upstream no longer
CONNECT_TIMEOUT_S = 10.0
PATH_SAFE = "/:@!$&'()*+,;=~"  # kept as they are in a path: the rest percent-encoded again
# Hop-by-hop headers (RFC 9110 7.6.1) and what the gateway itself sets or keeps to itself.
NOT_FORWARDED = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
    b"upgrade", b"proxy-authorization", b"proxy-authenticate", b"host",
    IOU_HEADER.lower().encode(),
})  # fmt: skip


class Gateway:
    """The ASGI app (`gateway_app`)."""

    def __init__(
        self,
        book: ChannelBook,
        endpoints: RentalBook,
        *,
        max_request_bytes: int,
        max_response_bytes: int,
        max_upstream_connections: int,
        endpoint_slots: int,
        renter_slots: int,
        upstream_timeout_s: float,
        terms: DeployTerms | None,
        logs: LogReader | None,
        job_files: JobFiles | None = None,
        scaler: Scaler | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.scaler = scaler
        self.book = book
        self.store = IouStore(book)
        self.max_request_bytes = max_request_bytes
        self.max_response_bytes = max_response_bytes
        self._pool_terms = (max_upstream_connections, upstream_timeout_s, CONNECT_TIMEOUT_S)
        self._endpoint_slots = Quota(endpoint_slots, max_upstream_connections)
        self._renter_slots = Quota(renter_slots, max_upstream_connections)
        self._buffers = Quota(RENTER_BUFFERED_BYTES, MAX_BUFFERED_BYTES)
        self._pool: UpstreamPool | None = None  # made in the event loop that serves
        # lovelace of requests taken but not charged yet (their upstream has not answered),
        # by channel: the next IOU on it must cover them too
        self._in_flight: dict[bytes, int] = {}
        self._turns: dict[str, int] = {}  # requests routed, by endpoint: picks its replica
        # lovelace of llm answers metered but not yet covered by a stored IOU, by channel and
        # deployment: the renter pays an answer's tokens with its next IOU, so the book (what
        # the daemon's IOUs-lag rule reads) takes them only once paid; the 402 rule sees them
        self._unpaid: dict[bytes, dict[str, int]] = {}
        self.streams = Streams()  # llm endpoints' streams being forwarded
        self.control = ControlRoutes(self, terms, logs, job_files)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def aclose(self) -> None:
        """Stop scaling; close the upstream connections and the IOU store's thread."""
        if self.scaler is not None:
            await self.scaler.aclose()
        if self._pool is not None:
            await self._pool.aclose()
        self.store.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.scaler is not None:
                    self.scaler.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if path.rstrip("/") == PREFIX and scope["method"] in ("GET", "HEAD"):
            listed = [
                {"name": e.public_name, "price_per_request": e.price_per_request,
                 "price_per_second": e.price_per_second}
                for e in self.endpoints.list() if e.kind == "endpoint" and e.state == RUNNING
            ]  # fmt: skip
            await reply(send, 200, listed)
            return
        if path.startswith(CANCEL_PREFIX) and path.endswith("/cancel"):
            found = self.streams.cancel(path[len(CANCEL_PREFIX) : -len("/cancel")])
            await reply(send, 200 if found else 404, {"cancelled": found})
            return
        if path == CONTROL_PREFIX or path.startswith(CONTROL_PREFIX + "/"):
            await self.control.handle(scope, receive, send)
            return
        if not path.startswith(PREFIX + "/"):
            await reply(send, 404, {"error": f"no route {path}: try {PREFIX}/<name>/<path>"})
            return
        name, _, rest = path[len(PREFIX) + 1 :].partition("/")
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        endpoint = self.paid_for(name, headers)
        if endpoint is None or endpoint.kind != "endpoint":
            await reply(send, 404, {"error": f"no endpoint named {name!r} on your channel"})
            return
        if endpoint.state != RUNNING:
            why = f": {endpoint.reason}" if endpoint.reason else ""
            await reply(send, 409, {"error": f"endpoint {name} is {endpoint.state}{why}"})
            return
        try:
            declared = _content_length(headers)
        except ValueError as error:
            await reply(send, 400, {"error": str(error)})
            return
        if declared is not None and declared > self.max_request_bytes:
            await reply(send, 413, {"error": f"a body of {declared} bytes is above the "
                                    f"gateway's {self.max_request_bytes} bytes"})  # fmt: skip
            return
        price = endpoint.price_per_request
        due = self.due(endpoint.channel) + price
        try:
            iou = iou_of(headers, endpoint.channel, due, f"endpoint {name}", price)
        except ValueError as error:
            await payment_required(send, endpoint.channel, str(error), due, price)
            return
        held = _Held(self._in_flight, self.endpoints, endpoint, price)

        async def settled_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                held.release()  # no-op once charged: an answer of the gateway's own
            await send(message)

        try:
            try:
                await self.store.store(iou, due)
            except IouRefused as refusal:
                await payment_required(settled_send, endpoint.channel, str(refusal), due, price)
                return
            self.paid_up(endpoint.channel, iou.amount)
            await self._forward(scope, receive, settled_send, endpoint, rest, declared, held)
        finally:
            held.release()

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Rental, rest: str,
        declared: int | None, held: _Held,
    ) -> None:  # fmt: skip
        """A paid request to `endpoint`'s path `rest`: a slot taken, its body read, proxied."""
        busy = self._take_slots(endpoint)
        if busy:
            await reply(send, 503, {"error": busy}, CLOSE)
            return
        renter = endpoint.renter_vkey
        try:
            if self.scaler is None:
                await self._read_and_proxy(scope, receive, send, endpoint, rest, declared, held)
            else:
                async with self.scaler.serving(endpoint) as warm:  # a cold start if at zero
                    await self._read_and_proxy(scope, receive, send, warm, rest, declared, held)
        except ColdStartFailed as failed:
            await reply(send, 503, {"error": str(failed)}, CLOSE)
        finally:
            self._endpoint_slots.give(endpoint.name)
            self._renter_slots.give(renter)

    async def _read_and_proxy(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Rental, rest: str,
        declared: int | None, held: _Held,
    ) -> None:  # fmt: skip
        """The request's body read (bounded), then proxied to one of `endpoint`'s replicas."""
        if not endpoint.upstreams:  # a fleet's: its replicas' node died, placed again now
            raise ColdStartFailed(f"endpoint {endpoint.public_name} has no replica running now")
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        try:
            with self._buffers.holding(endpoint.renter_vkey, "the gateway's body buffers") as hold:
                has_body = declared != 0 and (declared is not None or _chunked(headers))
                body = await read_body(receive, self.max_request_bytes, hold) if has_body else None
                prices = token_prices(endpoint.spec_json)
                if prices is not None:
                    body = with_usage(body)
                target = "/" + quote(rest, safe=PATH_SAFE)  # the path as sent, however encoded
                if scope["query_string"]:
                    target += "?" + scope["query_string"].decode("latin-1")
                forwarded = [(k, v) for k, v in headers if k not in NOT_FORWARDED]
                metered = None if prices is None else _Metered(self, endpoint, prices, receive)
                await self._proxy(scope["method"], self._next_upstream(endpoint), target,
                                  forwarded, body, send, held, metered)  # fmt: skip
        except BodyRefused as refusal:
            await reply(send, refusal.status, {"error": refusal.reason}, CLOSE)
        except ClientGone:
            return

    def _take_slots(self, endpoint: Rental) -> str:
        """Take a slot of `endpoint` and one of its renter: "" if taken, else why not."""
        if not self._endpoint_slots.take(endpoint.name):
            return (f"endpoint {endpoint.name} has {self._endpoint_slots.per_key} requests in "
                    "flight, its most: try again in a moment")  # fmt: skip
        if not self._renter_slots.take(endpoint.renter_vkey):
            self._endpoint_slots.give(endpoint.name)
            return (f"your endpoints have {self._renter_slots.held(endpoint.renter_vkey)} "
                    f"requests in flight (at most {self._renter_slots.per_key}), or the "
                    f"gateway its {self._renter_slots.total}: try again in a moment")  # fmt: skip
        return ""

    def paid_for(self, name: str, headers: list[tuple[bytes, bytes]]) -> Rental | None:
        """The deployment a request for `name` is for: names are per renter, and a paid
        request's IOU names its channel, so the renter's own. Else (no readable IOU, or one on
        a channel without it) the only deployment of that name, if only one renter has one:
        its 402 then says which channel pays for it."""
        try:
            mine = self.endpoints.named_on(header_iou(headers).channel, name)
        except ValueError:
            mine = None
        if mine is not None:
            return mine
        named = [e for e in self.endpoints.list() if e.public_name == name]
        return named[0] if len(named) == 1 else None

    def due(self, channel: bytes) -> int:
        """What `channel` owes now, requests in flight and llm answers not paid yet included:
        every deployment on it."""
        now = time.time_ns() // 1_000_000
        unpaid = sum(self._unpaid.get(channel, {}).values())
        return channel_due(self.endpoints, channel, now) + self._in_flight.get(channel, 0) + unpaid

    def owe(self, channel: bytes, name: str, lovelace: int) -> None:
        """An llm answer on `name` metered at `lovelace`: owed until an IOU covers it."""
        owed = self._unpaid.setdefault(channel, {})
        owed[name] = owed.get(name, 0) + lovelace

    def paid_up(self, channel: bytes, acknowledged: int) -> None:
        """An IOU of `acknowledged` on `channel` is stored: the unpaid answers it covers go
        into the book (charged to their deployments)."""
        owed = self._unpaid.get(channel)
        if not owed:
            return
        room = acknowledged - channel_due(self.endpoints, channel, time.time_ns() // 1_000_000)
        for name, lovelace in list(owed.items()):
            if lovelace <= room:
                room -= lovelace
                del owed[name]
                with contextlib.suppress(KeyError):  # removed meanwhile: nothing to charge
                    self.endpoints.charge(name, lovelace, requests=0)
        if not owed:
            del self._unpaid[channel]

    def _next_upstream(self, endpoint: Rental) -> str:
        """Its replicas in turn (round-robin, counted per endpoint)."""
        upstreams = endpoint.upstreams
        turn = self._turns.get(endpoint.name, 0)
        self._turns[endpoint.name] = turn + 1
        return upstreams[turn % len(upstreams)]

    async def _proxy(
        self,
        method: str,
        upstream: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes | None,
        send: Send,
        held: _Held,
        metered: _Metered | None = None,
    ) -> None:
        """Stream the request to `target` on `upstream` and its answer back, charged as the
        answer starts (and, for an llm endpoint, by the usage forwarded once it ends)."""
        if self._pool is None:
            self._pool = UpstreamPool(*self._pool_terms)
        try:
            answer = await self._pool.send(method, upstream, target, headers, body)
        except PoolTimeout:
            await reply(send, 503, {"error": "the gateway's upstream connections are all busy"})
            return
        except UpstreamError as error:
            await reply(send, 502, {"error": f"upstream did not answer: {error}"})
            return
        try:
            kept = []
            for name, value in answer.headers:
                too_long = value.isdigit() and int(value) > self.max_response_bytes
                if name == b"content-length" and too_long:
                    await reply(send, 502, {"error": f"upstream answer of {value.decode()} "
                                            f"bytes is above the gateway's "
                                            f"{self.max_response_bytes}"})  # fmt: skip
                    return
                if name not in NOT_FORWARDED:
                    kept.append((name, value))
            held.charge()
            if metered is not None:
                kept = metered.start(answer.status, kept)
            await send({"type": "http.response.start", "status": answer.status, "headers": kept})
            sent = 0
            async for chunk in answer.chunks():
                sent += len(chunk)
                if sent > self.max_response_bytes:  # the status is sent: cut the connection
                    raise RuntimeError(f"upstream {upstream}{target} answered more than "
                                       f"{self.max_response_bytes} bytes: cut")  # fmt: skip
                if metered is not None and metered.ended():
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if metered is not None:
                    metered.meter.feed(chunk)
            if metered is not None:
                metered.bill()  # before the answer ends: the renter's next request owes it
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if metered is not None:
                metered.bill()
            answer.aclose()


class _Held:
    """A request's price held on its channel from its IOU's check until it is charged on its
    endpoint (its upstream's answer starts) or let go (anything else): the next IOU on that
    channel must cover it meanwhile. Settled before the request's answer starts, so the
    renter's next request sees the due this one leaves."""

    def __init__(
        self, in_flight: dict[bytes, int], endpoints: RentalBook, endpoint: Rental, price: int
    ) -> None:
        self._in_flight, self._endpoints = in_flight, endpoints
        self._name, self._channel, self._price = endpoint.name, endpoint.channel, price
        in_flight[self._channel] = in_flight.get(self._channel, 0) + price
        self._settled = False

    def charge(self) -> None:
        if not self._settled:
            self.release()
            self._endpoints.charge(self._name, self._price)

    def release(self) -> None:
        if not self._settled:
            self._settled = True
            self._in_flight[self._channel] -= self._price


class _Metered:
    """An llm endpoint's answer, metered as it is forwarded (`provider.gateway.tokens`): a
    stream gets an id its renter may cancel by, and ends early on a cancel or a disconnect;
    `bill` charges the usage forwarded, once."""

    def __init__(
        self, gateway: Gateway, endpoint: Rental, prices: TokenPrices, receive: Receive
    ) -> None:
        self._gateway, self._name, self._prices = gateway, endpoint.name, prices
        self._channel = endpoint.channel
        self._receive = receive
        self.meter = UsageMeter(streaming=False)
        self._stream = ""
        self._watch: asyncio.Task[None] | None = None
        self._billed = False

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The answer's headers, a stream's id added; metering starts."""
        streaming = any(k == b"content-type" and v.startswith(b"text/event-stream")
                        for k, v in headers)  # fmt: skip
        self.meter = UsageMeter(streaming)
        if status != 200 or not streaming:
            return headers
        self._stream = self._gateway.streams.open()
        self._watch = asyncio.ensure_future(self._left())
        return [*headers, (STREAM_HEADER, self._stream.encode())]

    async def _left(self) -> None:
        """The renter hung up: the stream ends at its next chunk."""
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._gateway.streams.cancel(self._stream)

    def ended(self) -> bool:
        return bool(self._stream) and self._gateway.streams.cancelled(self._stream)

    def bill(self) -> None:
        if self._billed:
            return
        self._billed = True
        if self._watch is not None:
            self._watch.cancel()
        self._gateway.streams.close(self._stream)
        self.meter.finish()
        cost = self._prices.cost(self.meter.usage)
        if cost:
            self._gateway.owe(self._channel, self._name, cost)


def gateway_app(
    book: ChannelBook,
    endpoints: RentalBook,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    max_upstream_connections: int = MAX_UPSTREAM_CONNECTIONS,
    endpoint_slots: int = ENDPOINT_SLOTS,
    renter_slots: int = RENTER_SLOTS,
    upstream_timeout_s: float = UPSTREAM_TIMEOUT_S,
    terms: DeployTerms | None = None,
    logs: LogReader | None = None,
    job_files: JobFiles | None = None,
    scaler: Scaler | None = None,
) -> Gateway:
    """The gateway over `book` (IOUs) and `endpoints` (where and at what price), for uvicorn;
    `terms`: what this provider deploys and at what prices (None: it takes no deploy),
    `logs`: how it reads a deployment's output (None: it shows none), `job_files`: where a
    channel job's receipt and results are (None: it serves none), `scaler`: how endpoints
    scale with their requests (None: every replica runs from start to stop)."""
    return Gateway(
        book, endpoints, max_request_bytes=max_request_bytes,
        max_response_bytes=max_response_bytes,
        max_upstream_connections=max_upstream_connections, endpoint_slots=endpoint_slots,
        renter_slots=renter_slots, upstream_timeout_s=upstream_timeout_s, terms=terms, logs=logs,
        job_files=job_files, scaler=scaler,
    )  # fmt: skip


def _content_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    values = {v for k, v in headers if k == b"content-length"}
    if not values:
        return None
    if len(values) > 1 or not (value := values.pop()).isdigit():
        raise ValueError("Content-Length must be one decimal number")
    return int(value)


def _chunked(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(k == b"transfer-encoding" for k, _ in headers)
