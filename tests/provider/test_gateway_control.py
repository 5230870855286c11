"""The gateway's control routes and its channel-wide due, under uvicorn over real books on disk
(the channels opened in the book directly, no chain): a signed deploy is stored pending; the
refusals (bad signature, another key, a stale or future issued_ms, a replay finding its name
taken, an invalid spec with the CLI's own message, prices below the offer's, a bundle above
it, an unknown channel without its admission, the wrong action); status (the renter's alone),
stop, logs and pay; replays refused, a stopped pod revived only by a deploy signed after its
stop; and what a channel owes summed over every deployment on it, per request and per
second."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pycardano import PaymentSigningKey
from pydantic import ValidationError

from offchain.protocol.api.control import ControlRefused, ControlRequest, SignedControl
from offchain.protocol.job.jobspec import Bundle, ServiceSpec, describe
from offchain.protocol.ledger.iou import IOU_HEADER, SignedIou
from offchain.protocol.tx.channel import OPEN
from provider.gateway.app import gateway_app
from provider.gateway.control import DeployTerms, SeenRequests
from provider.money.channel_book import ChannelBook, ChannelView
from provider.rentals.book import RentalBook
from tests.provider.test_gateway_support import (
    CAPACITY,
    CHANNEL,
    NETWORK,
    OTHER_CHANNEL,
    POINT,
    RENTER,
    SCRIPT,
    book_with_channels,
    iou,
    running,
    serving,
    stored,
)

PRICE = 1_000
PER_SECOND = 7
UNIT = 50  # the offer's lovelace per second of its bundle
TERMS = DeployTerms(Bundle(cpu_cores=2, memory_mib=1024), UNIT, PRICE)
SPEC: dict[str, Any] = {
    "kind": "service", "image": "unchained/sample-service:1", "port": 8000,
    "price_per_request": PRICE, "resources": {"cpu_cores": 1, "memory_mib": 256},
}  # fmt: skip
UNKNOWN_CHANNEL = b"\x0a" * 28


@pytest.fixture
def books(tmp_path: Path) -> Iterator[tuple[ChannelBook, RentalBook]]:
    book = book_with_channels(tmp_path / "channels.sqlite")
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    yield book, endpoints
    book.close()
    endpoints.close()


@pytest.fixture
def gateway(books: tuple[ChannelBook, RentalBook]) -> Iterator[httpx.Client]:
    app = gateway_app(*books, terms=TERMS, logs=lambda d, n: f"{d.public_name}: {n} lines\n")
    with serving(app) as url, httpx.Client(base_url=url) as client:
        yield client


def signed(
    action: str = "deploy", name: str = "svc", spec: dict[str, Any] | None = None,
    channel: bytes = CHANNEL, key: PaymentSigningKey = RENTER, **changes: Any,
) -> dict[str, Any]:  # fmt: skip
    spec = (SPEC if action == "deploy" else None) if spec is None else spec
    request = ControlRequest.of(action, name, channel, spec)  # type: ignore[arg-type]
    request = request.model_copy(update=changes)
    return SignedControl.sign(key, NETWORK, request).to_wire()


def status_of(gateway: httpx.Client, name: str, channel: bytes = CHANNEL) -> httpx.Response:
    return gateway.post(f"/deployments/{name}/status", json=signed("status", name, channel=channel))


def refused(response: httpx.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert error in response.json()["error"], response.json()


def test_a_signed_deploy_is_stored_pending_and_shown(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    answer = gateway.post("/deployments", json=signed())
    assert answer.status_code == 201, answer.text
    shown = answer.json()
    assert (shown["name"], shown["kind"], shown["state"], shown["channel"]) == (
        "svc", "endpoint", "pending", CHANNEL.hex())  # fmt: skip
    assert "spec_json" not in shown and "renter_vkey" not in shown and shown["due"] == 0
    kept = books[1].get(stored("svc"))
    assert kept is not None and kept.renter_vkey == RENTER.to_verification_key().payload
    assert kept.spec_json == ServiceSpec.model_validate(SPEC).canonical_json().decode()
    assert status_of(gateway, "svc").json() == shown
    refused(status_of(gateway, "nope"), 404, "no deployment named 'nope'")
    refused(gateway.get("/endpoints/svc/predict"), 409, "endpoint svc is pending")


def test_control_requests_that_are_refused(gateway: httpx.Client) -> None:
    forged = signed()
    forged["signature"] = signed(name="other")["signature"]
    refused(gateway.post("/deployments", json=forged), 401, "does not verify")
    other_key = PaymentSigningKey.generate()
    refused(gateway.post("/deployments", json=signed(key=other_key)), 403,
            f"is not the renter key of channel {CHANNEL.hex()}")  # fmt: skip
    now = time.time_ns() // 1_000_000
    for issued in (now - 121_000, now + 121_000):
        refused(gateway.post("/deployments", json=signed(issued_ms=issued)), 403,
                "more than 120 s from the gateway's clock")  # fmt: skip
    bad_spec = {**SPEC, "port": 0, "gpu": 1}
    with pytest.raises(ValidationError) as error:
        ServiceSpec.model_validate(bad_spec)
    refused(gateway.post("/deployments", json=signed(spec=bad_spec)), 400, describe(error.value))
    refused(gateway.post("/deployments", json=signed(spec={**SPEC, "kind": "batch"})), 400,
            "spec: kind must be one of service, llm, pod, job, not 'batch'")  # fmt: skip
    refused(gateway.post("/deployments", json=signed(spec={**SPEC, "kind": "job"})), 400,
            "spec:\nprice_per_second: required field is missing")  # fmt: skip
    cheap = {**SPEC, "price_per_request": PRICE - 1}
    refused(gateway.post("/deployments", json=signed(spec=cheap)), 403,
            f"price_per_request: {PRICE - 1} lovelace is below this provider's")  # fmt: skip
    slow = {**SPEC, "price_per_second": 2 * UNIT - 1, "replicas": 2}
    refused(gateway.post("/deployments", json=signed(spec=slow)), 403,
            f"price_per_second: {2 * UNIT - 1} lovelace is below this provider's "
            f"{2 * UNIT} (2 x {UNIT})")  # fmt: skip
    big = {**SPEC, "resources": {"cpu_cores": 4, "memory_mib": 256}}
    refused(gateway.post("/deployments", json=signed(spec=big)), 403,
            "resources.cpu_cores: 4 is above this provider's 2")  # fmt: skip
    sliced = {**SPEC, "resources": {"gpu_memory_mib": 1024, "gpu_sm_percent": 25}}
    refused(gateway.post("/deployments", json=signed(spec=sliced)), 403,
            "resources.gpu_memory_mib: 1024 is above this provider's 0")  # fmt: skip
    refused(gateway.post("/deployments", json=signed(channel=UNKNOWN_CHANNEL)), 403,
            "is not served here: a first deploy on it names its channel_utxo")  # fmt: skip
    refused(gateway.post("/deployments", json=signed("stop")), 400, "takes a deploy, not a stop")
    refused(gateway.post("/deployments", content=b"{"), 400, "not JSON")
    refused(gateway.post("/deployments", json={"request": {}}), 400, '{"request", "key"')
    first = signed()
    assert gateway.post("/deployments", json=first).status_code == 201
    refused(gateway.post("/deployments", json=first), 409, "was taken already")  # a replay


def test_a_status_is_the_renters_alone(gateway: httpx.Client, upstream_url: str) -> None:
    """Its upstream's local address and its ports are not for anyone who asks."""
    assert gateway.post("/deployments", json=signed()).status_code == 201
    refused(gateway.get("/deployments/svc"), 401, "POST a signed status request")
    stranger = signed("status", "svc", key=PaymentSigningKey.generate())  # names are per renter
    refused(gateway.post("/deployments/svc/status", json=stranger), 404,
            "you have no deployment named 'svc'")  # fmt: skip
    assert status_of(gateway, "svc").json()["upstream"] == ""  # pending: none yet


def test_a_signed_request_is_taken_once(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook], upstream_url: str
) -> None:
    books[1].add(running("web", upstream_url, PRICE))
    logs = signed("logs", "web")
    assert gateway.post("/deployments/web/logs", json=logs).status_code == 200
    refused(gateway.post("/deployments/web/logs", json=logs), 409, "was taken already")
    assert gateway.post("/deployments/web/logs", json=signed("logs", "web")).status_code == 200


def test_seen_requests_are_bounded_per_renter_and_forgotten_when_their_window_ends() -> None:
    seen = SeenRequests(window_ms=1_000, per_key=2, total=10)
    now = time.time_ns() // 1_000_000

    def logs(issued_ms: int, key: PaymentSigningKey = RENTER) -> SignedControl:
        request = ControlRequest.of("logs", "web", CHANNEL).model_copy(
            update={"issued_ms": issued_ms}
        )
        return SignedControl.sign(key, NETWORK, request)

    first, second, third = logs(now), logs(now), logs(now + 800)
    seen.admit(first, now)
    seen.admit(second, now)
    with pytest.raises(ControlRefused, match="too many signed requests") as refusal:
        seen.admit(third, now)
    assert refusal.value.status == 429
    seen.admit(logs(now, PaymentSigningKey.generate()), now)  # another renter's own quota
    seen.admit(third, now + 1_001)  # the first two are forgotten: their window is over
    with pytest.raises(ControlRefused, match="taken already"):
        seen.admit(third, now + 1_001)


def test_a_first_deploy_on_an_unknown_channel_notes_its_admission(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    utxo, terms = "ab" * 32 + "#1", "d87980"
    answer = gateway.post("/deployments", json=signed(channel=UNKNOWN_CHANNEL,
                          channel_utxo=utxo, channel_terms=terms))  # fmt: skip
    assert answer.status_code == 201, answer.text
    assert books[1].admission(UNKNOWN_CHANNEL) == (utxo, terms)  # the daemon admits it


def test_stop_logs_and_pay(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook], upstream_url: str
) -> None:
    book, endpoints = books
    started = time.time_ns() // 1_000_000 - 5_500
    endpoints.add(running("web", upstream_url, PRICE, PER_SECOND, started_ms=started))
    stranger = signed("stop", "web", key=PaymentSigningKey.generate())  # names are per renter
    refused(gateway.post("/deployments/web/stop", json=stranger), 404, "no deployment named")
    refused(gateway.post("/deployments/web/stop", json=signed("stop", "other")), 400,
            "takes a stop of web, not a stop of other")  # fmt: skip
    elsewhere = signed("stop", "web", channel=OTHER_CHANNEL)
    refused(gateway.post("/deployments/web/stop", json=elsewhere), 403,
            f"web is paid on channel {CHANNEL.hex()}")  # fmt: skip
    logs = gateway.post("/deployments/web/logs", json=signed("logs", "web"))
    assert logs.json() == {"name": "web", "logs": "web: 200 lines\n"}
    stopped = gateway.post("/deployments/web/stop", json=signed("stop", "web")).json()
    assert (stopped["state"], stopped["reason"]) == ("stopped", "stopped by its renter")
    due = stopped["due"]  # its seconds end at the stop: the due stands still
    assert due == PER_SECOND * ((stopped["stopped_ms"] - started) // 1000) >= 5 * PER_SECOND
    assert status_of(gateway, "web").json()["due"] == due
    refused(gateway.get("/endpoints/web/"), 409, "endpoint web is stopped: stopped by its renter")
    short = gateway.post("/deployments/web/pay", headers={IOU_HEADER: iou(due - 1).to_header()})
    assert short.status_code == 402 and short.json()["due"] == due
    paid = gateway.post("/deployments/web/pay", headers={IOU_HEADER: iou(due).to_header()})
    assert paid.json() == {"name": "web", "due": due, "acknowledged": due}
    assert book.get(CHANNEL).iou.amount == due  # type: ignore[union-attr]


def test_the_due_is_channel_wide_across_two_deployments(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook], upstream_url: str
) -> None:
    """Two endpoints on one channel: an IOU that covers one's requests but not the other's is
    refused (the bug of a per-endpoint due: IOUs are cumulative per channel)."""
    _, endpoints = books
    endpoints.add(running("a", upstream_url, PRICE))
    endpoints.add(running("b", upstream_url, 3 * PRICE))
    endpoints.add(running("elsewhere", upstream_url, PRICE, channel=OTHER_CHANNEL))
    paid = {IOU_HEADER: iou(PRICE).to_header()}
    assert gateway.get("/endpoints/a/", headers=paid).status_code == 200
    stale = gateway.get("/endpoints/b/", headers={IOU_HEADER: iou(3 * PRICE).to_header()})
    assert stale.status_code == 402 and stale.json()["due"] == 4 * PRICE  # a's 1,000 + b's 3,000
    assert gateway.get("/endpoints/b/", headers={IOU_HEADER: iou(4 * PRICE).to_header()}).is_success
    again = gateway.get("/endpoints/a/", headers={IOU_HEADER: iou(2 * PRICE).to_header()})
    assert again.status_code == 402 and again.json()["due"] == 5 * PRICE
    other = {IOU_HEADER: iou(PRICE, OTHER_CHANNEL).to_header()}
    assert gateway.get("/endpoints/elsewhere/", headers=other).is_success  # its own channel
    assert status_of(gateway, "a").json()["due"] == 4 * PRICE


def test_the_due_counts_each_second_run(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook], upstream_url: str
) -> None:
    _, endpoints = books
    started = time.time_ns() // 1_000_000 - 10_500  # ran 10.5 s: 10 whole seconds
    endpoints.add(running("timed", upstream_url, PRICE, PER_SECOND, started_ms=started))
    short = gateway.get("/endpoints/timed/", headers={IOU_HEADER: iou(PRICE).to_header()})
    assert short.status_code == 402
    due = short.json()["due"]
    elapsed = (time.time_ns() // 1_000_000 - started) // 1000
    assert due in {PRICE + PER_SECOND * s for s in (10, elapsed)}  # the second may turn
    ahead = {IOU_HEADER: iou(due + PER_SECOND).to_header()}  # a second ahead: the clock turns
    assert gateway.get("/endpoints/timed/", headers=ahead).is_success
    assert dataclasses.asdict(endpoints.get(stored("timed")))["served"] == PRICE  # type: ignore[arg-type]


POD_SPEC: dict[str, Any] = {
    "kind": "pod", "price_per_second": PER_SECOND + UNIT,
    "ssh_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBt9dZ9l5J6GZkU3Y7kY0mN9B1p4rJ0G2m7c8a9b0c1d",
    "resources": {"cpu_cores": 1, "memory_mib": 256},
}  # fmt: skip


def test_a_renter_comes_back_to_its_stopped_pod_and_owes_what_it_ran(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    """A stopped pod keeps its workspace: its renter deploys the name again on the same
    channel and gets it back, pending, with the 12 s it ran still due on the channel; on
    another channel, or by another renter, the name stays taken; an endpoint's never comes
    back."""
    _, endpoints = books
    assert gateway.post("/deployments", json=signed(name="lab", spec=POD_SPEC)).status_code == 201
    now = time.time_ns() // 1_000_000
    endpoints.set_running(
        stored("lab"), "http://127.0.0.1:2222", "sha256:" + "1" * 64, now - 12_000
    )
    endpoints.finish(stored("lab"), "stopped", "stopped by its renter", now)
    owed = (PER_SECOND + UNIT) * 12
    assert status_of(gateway, "lab").json()["due"] == owed

    elsewhere = signed(name="lab", spec=POD_SPEC, channel=OTHER_CHANNEL)
    refused(gateway.post("/deployments", json=elsewhere), 409,
            "come back to it on that channel")  # fmt: skip
    request = ControlRequest.of("deploy", "lab", CHANNEL, POD_SPEC)
    stranger = SignedControl.sign(PaymentSigningKey.generate(), NETWORK, request)
    assert gateway.post("/deployments", json=stranger.to_wire()).status_code in (401, 403)

    back = gateway.post("/deployments", json=signed(name="lab", spec=POD_SPEC))
    assert back.status_code == 201, back.text
    assert (back.json()["state"], back.json()["due"]) == ("pending", owed)
    revived = endpoints.get(stored("lab"))
    assert revived is not None and (revived.started_ms, revived.stopped_ms) == (0, 0)
    assert revived.served == owed  # carried: the channel's due never drops

    assert gateway.post("/deployments", json=signed(name="svc")).status_code == 201
    endpoints.finish(stored("svc"), "stopped", "stopped by its renter", now)
    refused(gateway.post("/deployments", json=signed(name="svc")), 409,
            "you have a deployment named svc here already")  # fmt: skip


def test_a_captured_deploy_replayed_after_the_stop_revives_nothing(
    books: tuple[ChannelBook, RentalBook],
) -> None:
    """The attack: a deploy captured on the wire, replayed after its renter stopped the pod,
    would restart it and bill the renter per second. Within the gateway's life its nonce
    refuses it; after a restart (its nonces forgotten) its time does: signed before the stop."""
    _, endpoints = books
    captured = signed(name="lab", spec=POD_SPEC)
    app = gateway_app(*books, terms=TERMS)
    with serving(app) as url, httpx.Client(base_url=url) as gateway:
        assert gateway.post("/deployments", json=captured).status_code == 201
        now = time.time_ns() // 1_000_000
        endpoints.set_running(
            stored("lab"), "http://127.0.0.1:2222", "sha256:" + "1" * 64, now - 3_000
        )
        stop = gateway.post("/deployments/lab/stop", json=signed("stop", "lab"))
        assert stop.json()["state"] == "stopped"
        refused(gateway.post("/deployments", json=captured), 409, "was taken already")
    with serving(gateway_app(*books, terms=TERMS)) as url:  # restarted: no nonce kept
        refused(httpx.post(f"{url}/deployments", json=captured), 409,
                "a come-back is a deploy signed after that")  # fmt: skip
    lab = endpoints.get(stored("lab"))
    assert lab is not None and lab.state == "stopped"  # nothing restarted, nothing billed


def test_a_deploy_is_checked_before_any_money_moves(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    """What a deploy would be refused for is said before the renter opens and funds a
    channel for it: its name taken by its own deployment (names are per renter: another
    renter's is free), its spec, its prices; a renter's own stopped pod is a come-back.
    Nothing is stored."""
    _, endpoints = books
    mine = RENTER.to_verification_key().payload[:32].hex()

    def check(name: str, spec: dict[str, Any], renter: str = mine) -> httpx.Response:
        return gateway.post("/deployments/check", json={"name": name, "spec": spec,
                                                        "renter": renter})  # fmt: skip

    assert check("lab", POD_SPEC).json() == {"name": "lab", "comes_back": False}
    assert endpoints.get(stored("lab")) is None
    assert gateway.post("/deployments", json=signed(name="lab", spec=POD_SPEC)).status_code == 201
    refused(check("lab", POD_SPEC), 409, "you have a deployment named lab on this gateway")
    endpoints.finish(stored("lab"), "stopped", "stopped by its renter", time.time_ns() // 1_000_000)
    assert check("lab", POD_SPEC).json() == {"name": "lab", "comes_back": True}
    assert check("lab", POD_SPEC, "ab" * 32).json() == {"name": "lab", "comes_back": False}
    refused(check("lab", SPEC), 409, "a deployment named lab")  # an endpoint never comes back
    refused(check("svc", {**SPEC, "price_per_request": PRICE - 1}), 403, "below this provider's")
    refused(check("svc", {**SPEC, "kind": "batch"}), 400, "kind must be one of")
    refused(check("bad name", SPEC), 400, "letters, digits")
    refused(gateway.post("/deployments/check", json={"name": "svc"}), 400, '{"name", "spec"')


def test_names_are_per_renter(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook], upstream_url: str
) -> None:
    """Two renters both deploy an endpoint named "llm" on one gateway: each call reaches the
    caller's own (its IOU's channel says whose) and is charged there; a stop, a status and a
    check are each renter's alone; and a renter still cannot take one name twice."""
    book, endpoints = books
    other = PaymentSigningKey.generate()
    other_channel = b"\x0b" * 28
    vkey = other.to_verification_key().payload
    view = ChannelView(other_channel, "cd" * 32 + "#0", "addr_test1other", vkey, 0, CAPACITY, OPEN)
    book.open(view, POINT)
    now = time.time_ns() // 1_000_000
    for key, channel in ((RENTER, CHANNEL), (other, other_channel)):
        deployed = gateway.post("/deployments", json=signed(name="llm", key=key, channel=channel))
        assert deployed.status_code == 201, deployed.text
        endpoints.set_running(stored("llm", key), upstream_url, "sha256:" + "2" * 64, now)

    mine = gateway.get("/endpoints/llm/", headers={IOU_HEADER: iou(PRICE).to_header()})
    theirs_iou = SignedIou.sign(other, NETWORK, SCRIPT, other_channel, PRICE)
    theirs = gateway.get("/endpoints/llm/", headers={IOU_HEADER: theirs_iou.to_header()})
    assert mine.status_code == theirs.status_code == 200
    charged = [endpoints.get(stored("llm", key)) for key in (RENTER, other)]
    assert [(e.channel, e.requests) for e in charged if e] == [(CHANNEL, 1), (other_channel, 1)]
    unpaid = gateway.get("/endpoints/llm/")  # two renters' "llm": only an IOU says whose
    assert unpaid.status_code == 404 and "on your channel" in unpaid.json()["error"]

    stop = signed("stop", "llm", key=other, channel=other_channel)
    assert gateway.post("/deployments/llm/stop", json=stop).json()["state"] == "stopped"
    assert status_of(gateway, "llm").json()["state"] == "running"  # RENTER's own
    refused(gateway.post("/deployments", json=signed(name="llm")), 409,
            "you have a deployment named llm here already")  # fmt: skip
    listed = gateway.get("/endpoints").json()
    assert [e["name"] for e in listed] == ["llm"]  # the running one, by the name its renter chose
