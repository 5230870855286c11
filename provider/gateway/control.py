"""The gateway's control routes: a renter deploys, watches, stops, reads the logs of and pays
for its deployments (endpoints and pods) on this provider directly, each request signed with
the renter key of the channel that pays (`offchain.protocol.api.control`).

- `POST /deployments`: a signed deploy. Checked (signature, the channel's renter key, the time,
  the spec as the CLI checks it, prices not below this provider's and a bundle within its
  offer's), then stored `pending` in the book: the daemon admits its channel and starts it.
  A channel the book does not hold yet needs `channel_utxo` and `channel_terms` in the
  request: the daemon admits it on chain as `unchained provider channel admit` does.
- `POST /deployments/check`: `{"name", "spec", "renter"}` (the renter's key, hex), unsigned:
  would a deploy of `spec` as `name` by that renter be taken? 200 `{"name", "comes_back"}` or
  the refusal the deploy would get (its spec, the prices and bundle, its own name taken).
  Nothing is stored: a renter asks before it opens and funds a channel for the deploy.
- `POST /deployments/<name>/status`: a signed ask for its state (no spec, no key; its
  upstream and ports are the renter's alone) and what its channel owes now.
- `POST /deployments/<name>/stop`: a signed stop; per-second billing ends now, the daemon
  removes its containers.
- `POST /deployments/<name>/logs`: a signed ask for the last lines its containers wrote.
- `POST /deployments/<name>/receipt`, `.../results`: a signed ask for a batch job's signed
  receipt (JSON) and result archive (a tar), once it ended (`provider.gateway.job_routes`).
- `POST /deployments/<name>/pay`: no body, an IOU in the `Unchained-Iou` header covering what
  its channel owes now (per-second billing between requests; a pod's agent calls it). 402 as
  for a request.

Names are per renter (`provider.rentals.book.qualified`): a signed request acts on its
signer's deployment of that name, a check asks for the renter it names, a pay for the one on
its IOU's channel.

Every signed request is taken once: its nonce is kept until its time window ends
(`SeenRequests`), so a captured request replayed is refused 409; a renter coming back to its
stopped pod signs a deploy made after the stop (a deploy signed before it restarts nothing).

Refusals are `{"error": reason}` with 400 (malformed, invalid spec), 401 (bad signature),
403 (not the renter's key, out of time, unknown channel, below the prices or above the bundle),
404 (no such deployment of the renter's), 408 (a body too slow), 409 (the renter's name taken,
a replay), 429 (too many requests of one renter in a window).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from offchain.protocol.api.control import (
    NAME,
    TOLERANCE_MS,
    ControlRefused,
    SignedControl,
)
from offchain.protocol.job.channel_job import CHANNEL_JOB, JOB_NAME, parse_channel_job
from offchain.protocol.job.jobspec import Bundle, JobSpecError, parse_spec
from offchain.protocol.ledger.iou import IOU_HEADER, SignedIou
from provider.gateway.job_routes import ended_job, send_archive
from provider.gateway.limits import BodyRefused, ClientGone, read_body
from provider.money.channel_book import IouRefused
from provider.rentals.book import ENDED, ENDPOINT, JOB, PENDING, POD, STOPPED, Rental, qualified

if TYPE_CHECKING:
    from provider.capacity import Bundle as OfferBundle
    from provider.gateway.app import Gateway
    from provider.rentals.jobs import JobFiles

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
LogReader = Callable[[Rental, int], str]  # a deployment's last lines of output

CONTROL_PREFIX = "/deployments"
DUE_HEADER = b"unchained-due"
MAX_CONTROL_BYTES = 64 * 1024  # a signed request with its spec
LOG_LINES = 200
SEEN_PER_RENTER = 1_000  # signed requests of one renter key kept at once (one window's)
SEEN_IN_ALL = 100_000
# a spec's `kind` -> the deployment's
KIND_OF_SPEC = {"service": ENDPOINT, "llm": ENDPOINT, "pod": POD, CHANNEL_JOB: JOB}
SIGNED_ACTIONS = ("stop", "logs", "status", "receipt", "results")


@dataclasses.dataclass(frozen=True)
class DeployTerms:
    """What this provider deploys: at most its offer's bundle per container, per second at
    least its offer's `price_per_unit` for each, per request at least `request_price` (None:
    it sells no per-request endpoints), per input and output token of an llm endpoint at
    least `token_prices` (None: it sells no llm endpoints)."""

    bundle: Bundle
    price_per_unit: int
    request_price: int | None
    token_prices: tuple[int, int] | None = None

    @classmethod
    def of(
        cls, offer: OfferBundle, request_price: int | None,
        token_prices: tuple[int, int] | None = None,
    ) -> DeployTerms:  # fmt: skip
        """The terms of the daemon's offer (one slot's bundle at its price)."""
        resources = offer.resources
        bundle = Bundle(gpus=resources.gpus, min_vram_mib=resources.min_vram_mib,
                        cpu_cores=resources.cpu_cores, memory_mib=resources.memory_mib)  # fmt: skip
        return cls(bundle, offer.price_per_unit, request_price, token_prices)

    def check(self, spec: BaseModel) -> None:
        """ControlRefused (403) if `spec` asks more than the bundle or pays less."""
        resources: Bundle = getattr(spec, "resources")  # noqa: B009 - both kinds have it
        # a fraction of a GPU is above the whole bundle's 0: deployments take whole slots
        for field in ("gpus", "min_vram_mib", "gpu_memory_mib", "gpu_sm_percent", "cpu_cores",
                      "memory_mib"):  # fmt: skip
            asked, offered = getattr(resources, field), getattr(self.bundle, field)
            if asked > offered:
                raise ControlRefused(403, f"resources.{field}: {asked} is above this "
                                     f"provider's {offered}")  # fmt: skip
        replicas = getattr(spec, "replicas", 1)
        per_second = getattr(spec, "price_per_second", 0)
        per_request = getattr(spec, "price_per_request", 0)
        if per_request and self.request_price is None:
            raise ControlRefused(403, "this provider sells no per-request endpoints: price "
                                 "it per second")  # fmt: skip
        if per_request and per_request < (self.request_price or 0):
            raise ControlRefused(403, f"price_per_request: {per_request} lovelace is below "
                                 f"this provider's {self.request_price}")  # fmt: skip
        if getattr(spec, "kind", "") == "llm":
            self._tokens_paid(spec)
        least = self.price_per_unit * replicas  # a pure per-request endpoint: request_price
        if per_second and per_second < least:
            raise ControlRefused(403, f"price_per_second: {per_second} lovelace is below "
                                 f"this provider's {least} ({replicas} x "
                                 f"{self.price_per_unit})")  # fmt: skip

    def _tokens_paid(self, spec: BaseModel) -> None:
        """ControlRefused (403) if this provider sells no llm endpoints or `spec`'s token
        prices are below its."""
        if self.token_prices is None:
            raise ControlRefused(403, "this provider sells no llm endpoints (its offer names "
                                 "no token_prices)")  # fmt: skip
        for field, floor in zip(("price_per_input_token", "price_per_output_token"),
                                self.token_prices, strict=True):  # fmt: skip
            if getattr(spec, field) < floor:
                raise ControlRefused(403, f"{field}: {getattr(spec, field)} lovelace is below "
                                     f"this provider's {floor}")  # fmt: skip


def public(endpoint: Rental, due: int) -> dict[str, Any]:
    """A deployment as anyone may see it: every field but its spec and key, and `due`, what
    its channel owes now (every deployment on it), and whether it is scaled to zero (running,
    no replica warm: billed no seconds until a request starts one)."""
    shown = dataclasses.asdict(endpoint)
    shown["scaled_to_zero"] = endpoint.scaled_to_zero
    del shown["spec_json"], shown["renter_vkey"]
    shown["name"] = endpoint.public_name
    shown["channel"] = endpoint.channel.hex()
    shown["due"] = due
    return shown


class SeenRequests:
    """The signed requests taken whose time window is still open, by key and nonce: one seen
    again is a replay. Bounded per renter key and in all (429 beyond)."""

    def __init__(self, window_ms: int = TOLERANCE_MS, per_key: int = SEEN_PER_RENTER,
                 total: int = SEEN_IN_ALL) -> None:  # fmt: skip
        self.window_ms, self.per_key, self.total = window_ms, per_key, total
        self._seen: set[tuple[bytes, str]] = set()
        self._by_key: dict[bytes, int] = {}
        self._expiry: list[tuple[int, bytes, str]] = []  # a heap: (forget at, key, nonce)

    def admit(self, signed: SignedControl, now_ms: int) -> None:
        """Take `signed` (checked: signed, in its window) once; ControlRefused otherwise."""
        self._forget(now_ms)
        seen = (signed.key, signed.request.nonce)
        if seen in self._seen:
            request = signed.request
            raise ControlRefused(409, f"this {request.action} request (nonce {request.nonce}) "
                                 "was taken already: sign a new one")  # fmt: skip
        if self._by_key.get(signed.key, 0) >= self.per_key or len(self._seen) >= self.total:
            raise ControlRefused(429, f"too many signed requests within "
                                 f"{self.window_ms // 1000} s: wait a moment")  # fmt: skip
        self._seen.add(seen)
        self._by_key[signed.key] = self._by_key.get(signed.key, 0) + 1
        # past issued_ms + window the time check refuses it: no need to remember it longer
        heapq.heappush(self._expiry, (signed.request.issued_ms + self.window_ms, *seen))

    def _forget(self, now_ms: int) -> None:
        while self._expiry and self._expiry[0][0] < now_ms:
            _, key, nonce = heapq.heappop(self._expiry)
            self._seen.discard((key, nonce))
            left = self._by_key[key] - 1
            if left:
                self._by_key[key] = left
            else:
                del self._by_key[key]


class ControlRoutes:
    """`/deployments...` for one gateway (its books, IOU store and due rule)."""

    def __init__(
        self, gateway: Gateway, terms: DeployTerms | None, logs: LogReader | None,
        files: JobFiles | None = None,
    ) -> None:  # fmt: skip
        self.gateway = gateway
        self.terms = terms
        self.logs = logs
        self.files = files
        self.seen = SeenRequests()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        parts = scope["path"][len(CONTROL_PREFIX) :].strip("/").split("/")
        route = (method, len(parts), parts[-1] if len(parts) == 2 else "")
        try:
            if route == ("POST", 1, "") and parts == [""]:
                await self._deploy(await _signed(receive), send)
            elif route == ("POST", 1, "") and parts == ["check"]:
                await self._check_deploy(await _json_body(receive), send)
            elif route[:2] == ("GET", 1) and parts[0]:
                where = f"{CONTROL_PREFIX}/{parts[0]}/status"
                raise ControlRefused(401, "a deployment's status is its renter's: POST a signed "
                                     f"status request to {where}")  # fmt: skip
            elif route[:2] == ("POST", 2) and parts[1] == "pay":
                await self._pay(parts[0], scope["headers"], send)
            elif route[:2] == ("POST", 2) and parts[1] in SIGNED_ACTIONS:
                await self._signed_action(parts[0], parts[1], await _signed(receive), send)
            else:
                await reply(send, 404, {"error": f"no route {method} {scope['path']}"})
        except ControlRefused as refusal:
            await reply(send, refusal.status, {"error": str(refusal)})
        except BodyRefused as refusal:
            await reply(
                send, refusal.status, {"error": refusal.reason}, [(b"connection", b"close")]
            )
        except ClientGone:
            return

    def _now(self) -> int:
        return time.time_ns() // 1_000_000

    def _check(self, signed: SignedControl, renter_vkey: bytes) -> None:
        network = self.gateway.book.network_id
        now = self._now()
        signed.check(network, renter_vkey, now)
        self.seen.admit(signed, now)

    async def _deploy(self, signed: SignedControl, send: Send) -> None:
        request = signed.request
        if request.action != "deploy":
            raise ControlRefused(
                400, f"POST {CONTROL_PREFIX} takes a deploy, not a {request.action}"
            )
        if self.terms is None:
            raise ControlRefused(403, "this gateway takes no deployments")
        entry = self.gateway.book.get(request.channel_id)
        if entry is not None and not entry.ended:
            self._check(signed, entry.view.renter_vkey)
        elif request.channel_utxo is None or request.channel_terms is None:
            raise ControlRefused(403, f"channel {request.channel} is not served here: a "
                                 "first deploy on it names its channel_utxo and "
                                 "channel_terms")  # fmt: skip
        else:  # the daemon admits it on chain and compares its renter key with this one
            self._check(signed, signed.key)
        spec, kind = self._vetted(request.spec)
        if kind == JOB and not JOB_NAME.fullmatch(request.name):
            raise ControlRefused(400, f"name {request.name!r}: a job's name is lower-case "
                                 "letters, digits and '_' (a letter or digit first)")  # fmt: skip
        if kind == JOB and entry is not None and not entry.ended:
            self._job_fits(spec, entry.view.capacity, request.channel_id)
        endpoint = Rental(
            name=qualified(signed.key, request.name), kind=kind, channel=request.channel_id,
            renter_vkey=signed.key,
            spec_json=spec.canonical_json().decode(), state=PENDING, reason="",  # type: ignore[attr-defined]
            image_digest="", upstream="", public_port=0,
            price_per_request=getattr(spec, "price_per_request", 0),
            price_per_second=getattr(spec, "price_per_second", 0), created_ms=self._now(),
        )  # fmt: skip
        book = self.gateway.endpoints
        try:
            book.add(endpoint)
        except ValueError as error:
            if not self._came_back(endpoint, request.issued_ms):
                raise ControlRefused(
                    409,
                    f"you have a deployment named {request.name} here already: choose another name",
                ) from error
        if entry is None or entry.ended:
            book.note_admission(request.channel_id, request.channel_utxo or "",
                                request.channel_terms or "")  # fmt: skip
        await reply(send, 201, public(endpoint, self.gateway.due(endpoint.channel)))

    def _job_fits(self, spec: BaseModel, capacity: int, channel: bytes) -> None:
        """ControlRefused (403) when a job's most cost is above its channel's room (what it
        can pay in all less what it owes now); the daemon checks it again before it starts."""
        cost = int(getattr(spec, "max_cost"))  # noqa: B009 - a ChannelJobSpec's
        room = capacity - self.gateway.due(channel)
        if cost > room:
            raise ControlRefused(403, f"the job may cost {cost} lovelace, more than channel "
                                 f"{channel.hex()} has room for ({room})")  # fmt: skip

    def _vetted(self, spec_wire: object) -> tuple[BaseModel, str]:
        """The spec and the deployment kind it asks for, if this gateway takes it."""
        if self.terms is None:
            raise ControlRefused(403, "this gateway takes no deployments")
        spec = _spec_of(spec_wire)
        self.terms.check(spec)
        return spec, KIND_OF_SPEC[spec_wire["kind"]]  # type: ignore[index]  # _spec_of checked

    async def _check_deploy(self, wire: object, send: Send) -> None:
        """Whether a deploy would be taken: its spec, terms and name (`POST /deployments/check`)."""
        if not isinstance(wire, dict) or set(wire) != {"name", "spec", "renter"}:
            raise ControlRefused(400, 'a deploy check is {"name", "spec", "renter"}')
        name, renter = wire["name"], wire["renter"]
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ControlRefused(400, f"name {name!r}: letters, digits, '.', '_', '-' (a letter "
                                 "or digit first), at most 64")  # fmt: skip
        if not isinstance(renter, str) or not re.fullmatch(r"[0-9a-f]{64}", renter):
            raise ControlRefused(400, "renter: the renter key, 64 lower-case hex digits")
        _, kind = self._vetted(wire["spec"])
        renter_vkey = bytes.fromhex(renter)
        old = self.gateway.endpoints.get(qualified(renter_vkey, name))
        comes_back = old is not None and (old.kind, kind) == (POD, POD) and old.state in ENDED
        if old is not None and not (comes_back and old.renter_vkey == renter_vkey):
            raise ControlRefused(409, f"you have a deployment named {name} on this gateway "
                                 "already: choose another name")  # fmt: skip
        await reply(send, 200, {"name": name, "comes_back": old is not None})

    def _came_back(self, pod: Rental, issued_ms: int) -> bool:
        """Whether `pod` took the place of its renter's stopped pod of that name on the same
        channel, whose workspace is kept: the renter comes back to it (what the old one earned
        stays due on the channel) with a deploy signed after the stop (`issued_ms`). 409
        naming the channel when only the channel differs."""
        old = self.gateway.endpoints.get(pod.name)  # the same renter's of that name
        if old is None or (old.kind, pod.kind) != (POD, POD) or old.state not in ENDED:
            return False
        if old.renter_vkey != pod.renter_vkey:
            return False
        if issued_ms <= old.stopped_ms:
            raise ControlRefused(409, f"{pod.public_name} stopped at {old.stopped_ms}: a come-back "
                                 f"is a deploy signed after that, not at {issued_ms}")  # fmt: skip
        if old.channel != pod.channel:
            where = old.channel.hex()
            raise ControlRefused(409, f"{pod.public_name} is your stopped pod on channel {where}: "
                                 "come back to it on that channel")  # fmt: skip
        return self.gateway.endpoints.revive(pod, old)

    async def _signed_action(
        self, name: str, action: str, signed: SignedControl, send: Send
    ) -> None:
        request = signed.request
        if (request.action, request.name) != (action, name):
            raise ControlRefused(400, f"this route takes a {action} of {name}, not a "
                                 f"{request.action} of {request.name}")  # fmt: skip
        endpoint = self._deployment(qualified(signed.key, name), name)  # the signer's
        if request.channel_id != endpoint.channel:
            raise ControlRefused(403, f"{name} is paid on channel {endpoint.channel.hex()}")
        self._check(signed, endpoint.renter_vkey)
        if action in ("stop", "status"):
            if action == "stop" and endpoint.state not in ENDED:
                book = self.gateway.endpoints
                book.finish(endpoint.name, STOPPED, "stopped by its renter", self._now())
            shown = self._deployment(endpoint.name, name)
            await reply(send, 200, public(shown, self.gateway.due(shown.channel)))
            return
        if action == "receipt":
            await reply(send, 200, ended_job(self.files, endpoint))
            return
        if action == "results":
            ended_job(self.files, endpoint)  # the archive of a job that ended, with a receipt
            assert self.files is not None
            await send_archive(send, self.files.archive(endpoint.name))
            return
        if self.logs is None:
            raise ControlRefused(403, "this gateway shows no logs")
        text = await asyncio.to_thread(self.logs, endpoint, LOG_LINES)
        await reply(send, 200, {"name": name, "logs": text})

    async def _pay(self, name: str, headers: list[tuple[bytes, bytes]], send: Send) -> None:
        endpoint = self.gateway.paid_for(name, headers)
        if endpoint is None:
            raise ControlRefused(404, f"no deployment named {name!r} on the IOU's channel")
        due = self.gateway.due(endpoint.channel)
        try:
            iou = iou_of(headers, endpoint.channel, due, f"deployment {name}", 0)
            await self.gateway.store.store(iou, due)
        except (ValueError, IouRefused) as error:
            await payment_required(send, endpoint.channel, str(error), due, 0)
            return
        self.gateway.paid_up(endpoint.channel, iou.amount)
        await reply(send, 200, {"name": name, "due": due, "acknowledged": iou.amount})

    def _deployment(self, stored: str, name: str) -> Rental:
        """The book's deployment `stored` (the renter's `name`), or 404."""
        endpoint = self.gateway.endpoints.get(stored)
        if endpoint is None:
            raise ControlRefused(404, f"you have no deployment named {name!r}")
        return endpoint


def _spec_of(spec: object) -> BaseModel:
    """A deploy's spec, validated as the CLI validates it (the same messages)."""
    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind not in KIND_OF_SPEC:
        raise ControlRefused(400, f"spec: kind must be one of {', '.join(KIND_OF_SPEC)}, not "
                             f"{kind!r}")  # fmt: skip
    try:
        return parse_channel_job(spec) if kind == CHANNEL_JOB else parse_spec(spec)
    except JobSpecError as error:
        raise ControlRefused(400, f"spec:\n{error}") from error


async def _signed(receive: Receive) -> SignedControl:
    """The request's body: a signed control request (ControlRefused 400 if it is not one)."""
    return SignedControl.from_wire(await _json_body(receive))


async def _json_body(receive: Receive) -> object:
    """The request's body, JSON (ControlRefused 400 if it is not)."""
    body = await read_body(receive, MAX_CONTROL_BYTES)
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ControlRefused(400, f"the body is not JSON: {error}") from error


def header_iou(headers: Iterable[tuple[bytes, bytes]]) -> SignedIou:
    """The IOU in the request's header, unchecked; ValueError when there is none, or more than
    one, or it cannot be read."""
    wanted = IOU_HEADER.lower().encode()
    found = [v for k, v in headers if k == wanted]
    if not found:
        raise ValueError(f"no {IOU_HEADER} header: this endpoint is paid by IOU")
    if len(found) > 1:
        raise ValueError(f"more than one {IOU_HEADER} header")
    try:
        return SignedIou.from_header(found[0].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"malformed {IOU_HEADER} header: {error}") from error


def iou_of(
    headers: Iterable[tuple[bytes, bytes]], channel: bytes, due: int, what: str, price: int
) -> SignedIou:
    """The request's IOU if it may pay `due` on `channel` (`what` it pays for, at `price`
    this request); ValueError saying why not."""
    iou = header_iou(headers)
    if iou.channel != channel:
        raise ValueError(f"IOU on channel {iou.channel.hex()}: {what} is paid on channel "
                         f"{channel.hex()}")  # fmt: skip
    if iou.amount < due:
        raise ValueError(f"IOU of {iou.amount} lovelace does not cover the {due} due: "
                         f"{due - price} owed on the channel so far plus this request's "
                         f"{price}")  # fmt: skip
    return iou


async def reply(
    send: Send, status: int, body: object, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        *headers]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})


async def payment_required(send: Send, channel: bytes, reason: str, due: int, price: int) -> None:
    body = {"error": reason, "due": due, "channel": channel.hex(), "price": price}
    await reply(send, 402, body, [(DUE_HEADER, str(due).encode())])
