"""Scale to zero through the real gateway (uvicorn, its channel and endpoint books on disk) and
the real sample service's hardened containers (`Services`, as the daemon starts them; no
chain: the channel is opened in the book directly, as tests/provider/test_gateway.py does).
An endpoint with `min_replicas: 0` has its containers stopped after `scale_down_after_s`
without a request and bills no second while at zero, to the lovelace; the next request is
served after a cold start, with requests arriving meanwhile waiting on that same start; a cold
start that fails answers 503 and costs nothing. A spec without `min_replicas` never scales."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import httpx
import pytest

from offchain.protocol.job.jobspec import JobSpecError, ServiceSpec, parse_servicespec
from offchain.protocol.ledger.iou import IOU_HEADER
from provider.config import RunnerSettings
from provider.gateway.app import gateway_app
from provider.gateway.scaler import IN_FLIGHT_PER_REPLICA, Scaler, scaling_spec
from provider.money.channel_book import ChannelBook
from provider.rentals.book import ENDPOINT, RUNNING, Rental, RentalBook, due_of
from provider.rentals.services import LABEL_SERVICE, Services
from provider.sandbox.hardening import LABEL_RUNNER
from samples import images as sample_images
from tests.provider.test_gateway_support import (
    CHANNEL,
    RENTER,
    book_with_channels,
    iou,
    serving,
    stored,
)

PRICE = 1_000  # lovelace a request
PER_SECOND = 1_000_000  # lovelace a warm second: a second billed at zero would show
NAME = "scaled"
AT_ZERO_WITHIN_S = 60  # evidence awaited: the sweep scales it down after its 1 s idle


def spec_of(image: str, **changes: object) -> ServiceSpec:
    fields: dict = {
        "kind": "service", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
        "price_per_request": PRICE, "price_per_second": PER_SECOND,
        "resources": {"cpu_cores": 1, "memory_mib": 256},
        "replicas": 2, "min_replicas": 0, "scale_down_after_s": 1,
    }  # fmt: skip
    return ServiceSpec.model_validate({**fields, **changes})


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def deployed(
    client: docker.DockerClient, settings: RunnerSettings, tmp_path: Path
) -> Iterator[tuple[str, ChannelBook, RentalBook, Services, Scaler]]:
    """The sample service started as the daemon starts it (both replicas healthy, then in the
    book, billed from now), behind a gateway that scales: its URL and the books."""
    services = Services(client, settings, health_timeout_s=30)
    spec = spec_of(sample_images.sample_service_image(client))
    name = stored(NAME)
    started = services.start(name, spec)
    book = book_with_channels(tmp_path / "channels.sqlite")
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    endpoints.add(Rental(
        name, ENDPOINT, CHANNEL, RENTER.to_verification_key().payload,
        spec.canonical_json().decode(), RUNNING, "", started.image_digest, started.upstream, 0,
        PRICE, PER_SECOND, created_ms=now_ms(), started_ms=now_ms(),
    ))  # fmt: skip
    scaler = Scaler(endpoints, services)
    try:
        with serving(gateway_app(book, endpoints, scaler=scaler)) as url:
            yield url, book, endpoints, services, scaler
    finally:
        services.stop(name)
        book.close()
        endpoints.close()


def running_replicas(client: docker.DockerClient, services: Services) -> int:
    labels = [f"{LABEL_RUNNER}={services.runner_id}", f"{LABEL_SERVICE}={stored(NAME)}"]
    found = client.containers.list(all=True, filters={"label": labels})
    assert len(found) == 2  # stopped, never removed: a cold start starts the same container
    return sum(container.status == "running" for container in found)


def at_zero(client: docker.DockerClient, services: Services, endpoints: RentalBook) -> Rental:
    """The endpoint's row once the gateway has scaled it to zero (the row says so first, then
    its containers stop)."""
    deadline = time.monotonic() + AT_ZERO_WITHIN_S
    while True:
        row = endpoints.get(stored(NAME))
        assert row is not None
        if row.scaled_to_zero and running_replicas(client, services) == 0:
            return row
        assert time.monotonic() < deadline, f"never scaled to zero: {row}"
        time.sleep(0.1)


def stored_iou(book: ChannelBook, amount: int) -> None:
    """Once the gateway has stored the renter's IOU of `amount` (before it waits on a start)."""
    deadline = time.monotonic() + AT_ZERO_WITHIN_S
    while (entry := book.get(CHANNEL)) is None or entry.iou is None or entry.iou.amount < amount:
        assert time.monotonic() < deadline, "the IOU was never stored"
        time.sleep(0.01)


def warm_upstreams(endpoints: RentalBook) -> list[str]:
    row = endpoints.get(stored(NAME))
    return [] if row is None else row.upstreams


def until(check: Callable[[], bool], what: str) -> None:
    """Wait for evidence: `check` true."""
    deadline = time.monotonic() + AT_ZERO_WITHIN_S
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def predict(url: str, amount: int) -> httpx.Response:
    """A request paid by an IOU of `amount` in all on the channel."""
    return httpx.post(f"{url}/endpoints/{NAME}/predict", json={"values": [1, 2, 3]},
                      headers={IOU_HEADER: iou(amount).to_header()}, timeout=60)  # fmt: skip


def test_idle_it_scales_to_zero_bills_no_second_there_and_wakes_for_a_request(client, deployed):
    url, book, endpoints, services, _ = deployed
    cold = at_zero(client, services, endpoints)
    assert running_replicas(client, services) == 0 and cold.upstreams == []
    warm_s = (cold.cold_since_ms - cold.started_ms) // 1000
    owed = PER_SECOND * warm_s
    assert due_of(cold, cold.cold_since_ms) == owed
    time.sleep(1.5)  # a second and more at zero: none of it billed
    assert endpoints.due_on(CHANNEL, now_ms()) == owed

    capacity = 100 * PER_SECOND  # the IOUs cover the seconds: the renter pays up to a bound
    with ThreadPoolExecutor(3) as pool:  # three at zero: one cold start wakes one replica
        waiting = []
        for n in range(1, 4):  # each sent once the last one's IOU is stored: IOUs only grow
            waiting.append(pool.submit(predict, url, capacity + n * PRICE))
            stored_iou(book, capacity + n * PRICE)
        answers = [future.result() for future in waiting]
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert [a.json()["score"] for a in answers] == [13, 13, 13]  # served by the sample model
    assert running_replicas(client, services) == 1  # one replica woken, for the three
    warm = endpoints.get(stored(NAME))
    assert warm is not None and not warm.scaled_to_zero and len(warm.upstreams) == 1
    assert (warm.requests, warm.served) == (3, 3 * PRICE)
    spell = warm.cold_ms  # at zero from cold_since_ms until the cold start answered
    assert spell >= 1500 and warm.cold_since_ms == 0
    now = now_ms()
    billed_s = (now - warm.started_ms - spell) // 1000
    assert due_of(warm, now) == 3 * PRICE + PER_SECOND * billed_s

    again = at_zero(
        client, services, endpoints
    )  # idle again: back to zero, the two spells' seconds unbilled
    assert running_replicas(client, services) == 0
    warm_ms = again.cold_since_ms - again.started_ms - again.cold_ms
    assert due_of(again, now_ms() + 5_000) == 3 * PRICE + PER_SECOND * (warm_ms // 1000)


def test_a_failed_cold_start_answers_503_and_costs_nothing(client, deployed):
    url, _, endpoints, services, _ = deployed
    cold = at_zero(client, services, endpoints)
    for container in client.containers.list(
        all=True, filters={"label": f"{LABEL_SERVICE}={stored(NAME)}"}
    ):
        container.remove(force=True)  # the engine lost them: no replica can start
    owed = endpoints.due_on(CHANNEL, now_ms())
    for _ in range(2):  # the IOU of the first is not spent: the second may name the same
        answer = predict(url, owed + PRICE)
        assert answer.status_code == 503, answer.text
        assert "cold start failed" in answer.json()["error"] and "0 replicas" in answer.text
    after = endpoints.get(stored(NAME))
    assert after is not None and (after.requests, after.served) == (0, 0)
    assert after.scaled_to_zero and after.cold_since_ms == cold.cold_since_ms
    assert endpoints.due_on(CHANNEL, now_ms()) == owed


def test_more_in_flight_than_a_replica_serves_starts_another(client, deployed):
    """Requests held in flight (their bodies trickle in) beyond `IN_FLIGHT_PER_REPLICA` per
    warm replica start one more; all are served; idle, both go back to zero."""
    url, book, endpoints, services, scaler = deployed
    at_zero(client, services, endpoints)
    paid = 100 * PER_SECOND
    assert predict(url, paid).status_code == 200  # a cold start: one replica warm
    assert running_replicas(client, services) == 1
    body = json.dumps({"values": [1, 2, 3]}).encode()
    host, port = url.removeprefix("http://").split(":")
    held = []
    for n in range(1, IN_FLIGHT_PER_REPLICA + 2):  # one more than a replica's share
        paid += PRICE
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            f"POST /endpoints/{NAME}/predict HTTP/1.1\r\nHost: gateway\r\n"
            f"Content-Length: {len(body)}\r\n{IOU_HEADER}: {iou(paid).to_header()}\r\n\r\n"
            .encode() + body[:1]
        )  # fmt: skip
        held.append(sock)
        stored_iou(book, paid)
        until(lambda n=n: scaler.in_flight(stored(NAME)) == n, "the request in flight")
    until(lambda: len(warm_upstreams(endpoints)) == 2, "a second replica warm")
    assert running_replicas(client, services) == 2
    for sock in held:
        sock.sendall(body[1:])
        with sock.makefile("rb") as answer:
            assert answer.readline().split()[1] == b"200"
        sock.close()
    at_zero(client, services, endpoints)  # idle: both stop


def test_a_spec_scales_only_when_it_says_min_replicas_below_replicas():
    base = {"kind": "service", "image": "example.org/svc:1", "port": 8000,
            "price_per_second": 1}  # fmt: skip
    assert scaling_spec(json.dumps({**base, "replicas": 3})) is None  # today's: all run
    assert scaling_spec(json.dumps({**base, "replicas": 3, "min_replicas": 3})) is None
    scaled = scaling_spec(json.dumps({**base, "replicas": 3, "min_replicas": 1}))
    assert scaled is not None and scaled.warm_replicas == 1
    assert parse_servicespec({**base, "replicas": 2}).warm_replicas == 2
    with pytest.raises(JobSpecError, match="min_replicas 3 is above replicas 2"):
        parse_servicespec({**base, "replicas": 2, "min_replicas": 3})
    with pytest.raises(JobSpecError, match="scale_down_after_s"):
        parse_servicespec({**base, "min_replicas": 0, "scale_down_after_s": 0})


def test_a_book_made_before_scaling_gets_its_columns(tmp_path):
    """A book on disk from before scale to zero (no cold_ms, cold_since_ms) opens, its rows
    warm, billed as before."""
    path = tmp_path / "endpoints.sqlite"
    RentalBook(path).close()
    with sqlite3.connect(path) as old:
        for column in ("cold_ms", "cold_since_ms"):
            old.execute(f"ALTER TABLE deployment DROP COLUMN {column}")
        old.execute("INSERT INTO deployment VALUES (?, 'endpoint', ?, ?, '{}', 'running', '', "
                    "'', 'http://127.0.0.1:9', 0, 0, 7, 0, 1000, 0, 0, 0)",
                    (stored("old"), CHANNEL, RENTER.to_verification_key().payload))  # fmt: skip
    book = RentalBook(path)
    row = book.get(stored("old"))
    assert row is not None and (row.cold_ms, row.cold_since_ms, row.scaled_to_zero) == (0, 0, False)
    assert due_of(row, 4_500) == 7 * 3
    book.set_warm(row.name, "", 2_000)  # at zero from 2 s: 1 s billed, then none
    assert due_of(book.get(row.name), 9_999) == 7  # type: ignore[arg-type]
    book.close()
