"""A renter's client for an inference endpoint behind a provider's gateway, paid per request
over a payment channel: each request carries a cumulative IOU (`Unchained-Iou` header) for
everything received so far plus this request's price, signed by the channel's `IouSigner`.

    signer = channels.signer(channel_id)
    with EndpointClient("http://gateway:8700", "my-model", signer, price_per_request=2_000) as c:
        answer = c.post("/predict", json={"x": [1, 2, 3]})

The gateway answers a request whose IOU does not cover what it served plus this request with
402 and the `due` amount (design: "402 rule"). The client pays a due only up to what it received
plus this request's price (the one increment a renter risks), and only once per request; a due
above that is refused without signing (`EndpointRefused` names the amounts). Received counts
the requests answered with success (below 400); a request with no answer is not paid for twice.
An error answer may be the service's (the gateway charges it: its upstream answered) or the
gateway's own (404 unknown endpoint, 413, 502 no upstream answer: not charged), which the
client cannot tell apart: it is counted as `unsure`, not paid ahead, and paid only when a later
402 asks for it, so the renter pays for a failed request at most what the gateway counted (an
SDK pointed at a misspelt endpoint signs one price, not one per attempt).

Thread-safe. Concurrent requests on one channel each pay received + price when they are sent,
so the gateway, which counts every request it served, answers all but the first with a 402; such
a request waits for the requests still in flight (whose answers may make the due acceptable) and
then pays or refuses. For parallel throughput, open one channel per stream of requests."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from consumer.sdk.errors import ConsumerError
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.iou import IOU_HEADER, SignedIou
from offchain.protocol.ledger.payloads import VKEY_BYTES

if TYPE_CHECKING:  # a paid request needs neither pycardano nor the control requests' pydantic
    from consumer.sdk.iou_signer import IouSigner
    from consumer.sdk.keys import ConsumerKey
    from offchain.protocol.api.control import Action

PAYMENT_REQUIRED = 402
ERROR = 400  # a status from here on may be the gateway's own, uncharged
DEFAULT_TIMEOUT_S = 60.0  # an inference may take a while; httpx's 5 s default is short


class EndpointRefused(ConsumerError):
    """The gateway asked for more than the renter received plus one request, or refused the
    IOU itself (another channel's, not signed by the channel's key): nothing more is signed."""


class EndpointClient:
    """Requests to one endpoint of one gateway, each paid by the channel `signer` signs for.

    `received` is what the renter received so far in lovelace: it starts at the signer's last
    IOU (a restart continues from the persisted total: every IOU paid for an answer, bar
    perhaps the last one, lost on the way, the one increment at risk) and grows by the price
    with each successful answer; `unsure` holds the error answers' prices until a 402 asks
    for them."""

    def __init__(
        self,
        gateway_url: str,
        endpoint: str,
        signer: IouSigner,
        price_per_request: int,
        client: httpx.Client | None = None,
    ) -> None:
        if price_per_request <= 0:
            raise ValueError("an endpoint's price per request is a positive number of lovelace")
        self.gateway_url = gateway_url
        self.base = f"{gateway_url.rstrip('/')}/endpoints/{endpoint}"
        self.endpoint, self.signer, self.price = endpoint, signer, price_per_request
        self.owned = client is None
        self.client = httpx.Client(timeout=DEFAULT_TIMEOUT_S) if client is None else client
        self.received = signer.signed
        self.unsure = 0  # lovelace of error answers: paid only if a 402 asks for them
        self.in_flight = 0  # requests sent and not answered yet
        self.changed = threading.Condition()  # received, unsure or in_flight changed

    def __enter__(self) -> EndpointClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP client if this made it (one passed in is the caller's)."""
        if self.owned:
            self.client.close()

    @property
    def paid(self) -> int:
        """The channel's last IOU: lovelace the provider may take in all."""
        return self.signer.signed

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """`method path` on the endpoint (httpx's keyword arguments: json, content, params,
        headers, ...), paid with an IOU for received + price; a 402 whose due the renter
        accepts is paid and the request sent once more (so a body must be bytes or JSON, not a
        stream). EndpointRefused when the gateway asks too much or refuses the IOU."""
        with self.changed:
            amount = self.received + self.price
        response = self.sent(method, path, self.signer.pay(amount, amount), kwargs)
        if response.status_code != PAYMENT_REQUIRED:
            return response
        due, reason = self.due_of(response)
        iou = self.agreed(due, amount, reason)
        response = self.sent(method, path, iou, kwargs)
        if response.status_code == PAYMENT_REQUIRED:
            again, reason = self.due_of(response)
            raise EndpointRefused(
                f"{self.endpoint}: the gateway refused the IOU for {ada(iou.amount)} too "
                f"({reason}; it asks for {ada(again)}): not paid again",
                endpoint=self.endpoint, due=again, sent=iou.amount, reason=reason,
            )  # fmt: skip
        return response

    def sent(
        self, method: str, path: str, iou: SignedIou, kwargs: dict[str, Any]
    ) -> httpx.Response:
        """The request sent with `iou`; a success counts as received, an error as unsure."""
        with self.changed:
            self.in_flight += 1
        status = PAYMENT_REQUIRED  # no answer: nothing received
        try:
            headers = {**(kwargs.get("headers") or {}), IOU_HEADER: iou.to_header()}
            url = f"{self.base}/{path.lstrip('/')}"
            response = self.client.request(method, url, **{**kwargs, "headers": headers})
            status = response.status_code
            return response
        finally:
            with self.changed:
                self.in_flight -= 1
                if status < ERROR:
                    self.received += self.price
                elif status != PAYMENT_REQUIRED:
                    self.unsure += self.price
                self.changed.notify_all()

    def due_of(self, response: httpx.Response) -> tuple[int, str]:
        """A 402's `due` (lovelace the next IOU must name at least) and its reason."""
        try:
            body = response.json()
            due, reason = body["due"], str(body.get("error", "payment required"))
        except (ValueError, KeyError, TypeError) as exc:
            raise EndpointRefused(
                f"{self.endpoint}: the gateway answered 402 without a due amount "
                f"({response.text[:200]!r})", endpoint=self.endpoint,
            ) from exc  # fmt: skip
        if not isinstance(due, int) or isinstance(due, bool) or due < 0:
            raise EndpointRefused(f"{self.endpoint}: a 402 whose due is not lovelace: {due!r}",
                                  endpoint=self.endpoint)  # fmt: skip
        return due, reason

    def agreed(self, due: int, sent: int, reason: str) -> SignedIou:
        """The IOU for `due`, once the requests in flight are answered if their answers could
        make it acceptable: at most received + unsure + price, the unsure part it takes then
        counted as received. EndpointRefused, unsigned, otherwise."""
        with self.changed:
            self.changed.wait_for(lambda: self.in_flight == 0 or not (
                self.ceiling < due <= self.ceiling + self.price * self.in_flight))  # fmt: skip
            received, unsure, ceiling = self.received, self.unsure, self.ceiling
            facts = {"endpoint": self.endpoint, "due": due, "sent": sent, "received": received,
                     "unsure": unsure, "price": self.price, "reason": reason}  # fmt: skip
            if due > ceiling:
                failed = f" and {ada(unsure)} of error answers" if unsure else ""
                raise EndpointRefused(
                    f"{self.endpoint}: the gateway asks for {ada(due)} in all ({reason}), more "
                    f"than the {ada(received)} received{failed} plus this request's "
                    f"{ada(self.price)}: not signed", **facts,
                )  # fmt: skip
            if due <= sent:
                raise EndpointRefused(
                    f"{self.endpoint}: the gateway refused the IOU for {ada(sent)}: {reason}",
                    **facts,
                )  # fmt: skip
            taken = max(due - self.price - received, 0)  # error answers the gateway charged
            self.received, self.unsure = received + taken, unsure - taken
        return self.signer.pay(max(due, self.signer.signed), ceiling)

    @property
    def ceiling(self) -> int:
        """The most an IOU may name now: received, the error answers and one request."""
        return self.received + self.unsure + self.price


class GatewayControl:
    """A renter's control requests to a provider's gateway (`offchain.protocol.api.control`):
    deploy, status, stop, logs and pay, each but pay signed with the renter key `key` for
    `network_id`. ConsumerError carries the gateway's refusal."""

    def __init__(
        self, gateway_url: str, key: ConsumerKey, network_id: int,
        client: httpx.Client | None = None,
    ) -> None:  # fmt: skip
        self.base = f"{gateway_url.rstrip('/')}/deployments"
        self.key, self.network_id = key, network_id
        self.owned = client is None
        self.client = httpx.Client(timeout=DEFAULT_TIMEOUT_S) if client is None else client

    def __enter__(self) -> GatewayControl:
        return self

    def __exit__(self, *_: object) -> None:
        if self.owned:
            self.client.close()

    def deploy(
        self, name: str, channel: bytes, spec: dict[str, Any],
        admission: tuple[str, str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Ask for `spec` as deployment `name`, paid on `channel` (`admission`: its TXID#IX
        and terms CBOR hex, for a channel the provider may not serve yet)."""
        request = self.signed("deploy", name, channel, spec, admission)
        return self.sent("POST", self.base, request, {201})

    def check(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Whether the gateway would take `spec` deployed as `name` by this renter (nothing
        signed, nothing stored): asked before a channel is opened and funded for it."""
        renter = self.key.key.to_verification_key().payload[:VKEY_BYTES]  # as SignedControl.sign
        body = {"name": name, "spec": spec, "renter": renter.hex()}
        return self.sent("POST", f"{self.base}/check", body, {200})

    def status(self, name: str, channel: bytes) -> dict[str, Any]:
        """Deployment `name`'s state and what its channel (`channel`) owes now."""
        request = self.signed("status", name, channel)
        return self.sent("POST", f"{self.base}/{name}/status", request, {200})

    def stop(self, name: str, channel: bytes) -> dict[str, Any]:
        request = self.signed("stop", name, channel)
        return self.sent("POST", f"{self.base}/{name}/stop", request, {200})

    def logs(self, name: str, channel: bytes) -> str:
        request = self.signed("logs", name, channel)
        return str(self.sent("POST", f"{self.base}/{name}/logs", request, {200})["logs"])

    def receipt(self, name: str, channel: bytes) -> dict[str, Any]:
        """A batch job's receipt, as its provider signed it, once the job ended."""
        request = self.signed("receipt", name, channel)
        return self.sent("POST", f"{self.base}/{name}/receipt", request, {200})

    def download(self, name: str, channel: bytes, into: Path) -> str:
        """Stream a batch job's result archive into `into`, hashing as it arrives; its sha256
        (hex). ConsumerError carries the gateway's refusal."""
        url = f"{self.base}/{name}/results"
        digest = hashlib.sha256()
        try:
            with self.client.stream("POST", url, json=self.signed("results", name, channel)) as got:
                if got.status_code != 200:
                    got.read()
                    error = got.json().get("error") if got.headers.get("content-type") == (
                        "application/json") else got.text[:200]  # fmt: skip
                    raise ConsumerError(f"POST {url}: {got.status_code}: {error}",
                                        status=got.status_code)  # fmt: skip
                with into.open("wb") as file:
                    for chunk in got.iter_bytes():
                        digest.update(chunk)
                        file.write(chunk)
        except httpx.HTTPError as exc:
            raise ConsumerError(f"cannot reach the gateway at {url} ({exc or type(exc).__name__})",
                                gateway=url) from exc  # fmt: skip
        return digest.hexdigest()

    def pay(self, name: str, iou: SignedIou) -> dict[str, Any]:
        """Hand the gateway `iou` for what the deployment's channel owes (a 402 is an error)."""
        url = f"{self.base}/{name}/pay"
        return self.sent("POST", url, None, {200}, {IOU_HEADER: iou.to_header()})

    def signed(
        self, action: Action, name: str, channel: bytes, spec: dict[str, Any] | None = None,
        admission: tuple[str, str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The request made now, signed with the renter key, as the wire carries it (the
        control requests are imported here: a paid request needs none of them)."""
        from offchain.protocol.api.control import ControlRequest, SignedControl

        request = ControlRequest.of(action, name, channel, spec, admission)
        return SignedControl.sign(self.key.key, self.network_id, request).to_wire()

    def sent(
        self, method: str, url: str, body: dict[str, Any] | None, ok: set[int],
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        try:
            response = self.client.request(method, url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise ConsumerError(f"cannot reach the gateway at {url} ({exc or type(exc).__name__})",
                                gateway=url) from exc  # fmt: skip
        try:
            answer = response.json()
        except ValueError:
            answer = {"error": response.text[:200]}
        if response.status_code not in ok:
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise ConsumerError(f"{method} {url}: {response.status_code}: {error}",
                                status=response.status_code, answer=answer)  # fmt: skip
        if not isinstance(answer, dict):
            raise ConsumerError(f"{method} {url} answered {answer!r}, not a JSON object")
        return answer


def seconds_run(status: dict[str, Any], created_ms: int, now_ms: int) -> int:
    """Whole seconds a deployment ran by the renter's count: from when it started, never
    before the renter deployed it, to when it stopped or now."""
    if not status.get("started_ms"):
        return 0
    start = max(int(status["started_ms"]), created_ms)
    end = int(status.get("stopped_ms") or 0) or now_ms
    return max(0, min(end, now_ms) - start) // 1000


def pay_due(
    control: GatewayControl, signer: IouSigner, deployments: list[tuple[str, int]],
    ahead_s: int = 0,
) -> SignedIou | None:  # fmt: skip
    """Pay what the channel `signer` signs for owes its provider now, plus `ahead_s` seconds
    of every deployment's per-second price (so a request a moment later is covered).
    `deployments`: the name and local creation ms of each deployment on that channel. The due
    the gateway names is paid only up to the renter's own count: the requests served (the
    gateway's `served`, never more than the IOUs signed so far: each request was paid by one)
    plus each deployment's price per second for the seconds it ran by the renter's clock, one
    second of slack each. None: nothing owed beyond the last IOU."""
    now = time.time_ns() // 1_000_000
    statuses = [(control.status(name, signer.channel), created) for name, created in deployments]
    if not statuses:
        return None
    due = int(statuses[0][0]["due"])
    per_second = sum(int(s["price_per_second"]) for s, _ in statuses if not s.get("stopped_ms"))
    served = min(sum(int(s["served"]) for s, _ in statuses), signer.signed)
    ceiling = (
        served
        + per_second * ahead_s
        + sum(
            int(s["price_per_second"]) * (seconds_run(s, created, now) + 1)
            for s, created in statuses
        )
    )
    amount = min(due + per_second * ahead_s, ceiling)
    if amount < due:
        raise EndpointRefused(f"the gateway asks for {ada(due)} on channel "
                              f"{signer.channel.hex()[:16]}, more than the {ada(ceiling)} "
                              "counted here: not signed", due=due, ceiling=ceiling)  # fmt: skip
    if amount <= signer.signed:
        return None
    iou = signer.pay(amount, amount)
    control.pay(statuses[0][0]["name"], iou)
    return iou
