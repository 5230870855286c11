"""The renter's endpoint client against the provider's real gateway (provider/gateway/app.py under
uvicorn, its channel book and endpoint book on disk, a real uvicorn upstream; no chain: the
channel is opened in the book directly, as tests/provider/test_gateway.py does): each request
paid one price more and each IOU stored by the provider, a restart going on from the renter's
persisted IOU, a gateway counting more than the renter received refused unsigned, and a 5xx
paid only when the gateway charged it (the upstream's 500 yes, the gateway's own 502 and 404
no)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.endpoint_client import EndpointClient, EndpointRefused, GatewayControl, pay_due
from consumer.sdk.errors import ConsumerError
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.keys import ConsumerKey
from provider.gateway.app import gateway_app
from provider.money.channel_book import ChannelBook
from provider.rentals.book import RentalBook
from tests.consumer.test_channels import record
from tests.provider.test_gateway_support import (
    CHANNEL,
    NETWORK,
    OTHER_CHANNEL,
    RENTER,
    SCRIPT,
    book_with_channels,
    running,
    serving,
    stored,
    upstream,
)

PRICE = 1_500
PER_SECOND = 1_000
NOWHERE = "http://127.0.0.1:9"  # no upstream listens there: the gateway answers 502 itself


async def failing(scope: Any, receive: Any, send: Any) -> None:
    """The gateway tests' upstream, whose `/fail` answers 500 (a service failing)."""
    if scope["type"] == "http" and scope["path"] == "/fail":
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"the model crashed"})
        return
    await upstream(scope, receive, send)


@pytest.fixture
def books(tmp_path: Path) -> Iterator[tuple[ChannelBook, RentalBook]]:
    with serving(failing) as upstream_url:
        book = book_with_channels(tmp_path / "channels.sqlite")
        endpoints = RentalBook(tmp_path / "endpoints.sqlite")
        endpoints.add(running("echo", upstream_url, PRICE))
        endpoints.add(running("down", NOWHERE, PRICE, channel=OTHER_CHANNEL))
        yield book, endpoints
        book.close()
        endpoints.close()


@pytest.fixture
def gateway(books: tuple[ChannelBook, RentalBook]) -> Iterator[str]:
    with serving(gateway_app(*books)) as url:
        yield url


@pytest.fixture
def store(tmp_path: Path) -> ChannelStore:
    made = ChannelStore(tmp_path / "renter")
    for channel in (CHANNEL, OTHER_CHANNEL):
        made.save(record(ConsumerKey(RENTER), channel.hex()))
    return made


def new_signer(store: ChannelStore, channel: bytes = CHANNEL) -> IouSigner:
    return IouSigner(ConsumerKey(RENTER), NETWORK, SCRIPT, store.get(channel.hex()), store)


def test_requests_through_the_real_gateway(books, gateway, store):
    book, endpoints = books
    with EndpointClient(gateway, "echo", new_signer(store), PRICE) as client:
        for n in range(1, 4):
            answer = client.post("/predict", json={"n": n})
            assert answer.status_code == 200, answer.text
            assert answer.json()["path"] == "/predict"
            entry = book.get(CHANNEL)
            assert entry is not None and entry.iou is not None
            assert entry.iou.amount == n * PRICE == client.paid  # stored by the provider
    served = endpoints.get(stored("echo"))
    assert served is not None and (served.requests, served.served) == (3, 3 * PRICE)

    with EndpointClient(gateway, "echo", new_signer(store), PRICE) as again:  # a restart
        assert again.get("/predict").status_code == 200
        assert again.paid == 4 * PRICE

    endpoints.charge(stored("echo"), 2 * PRICE)  # a provider counting a request never answered
    with (
        EndpointClient(gateway, "echo", new_signer(store), PRICE) as greedy,
        pytest.raises(EndpointRefused, match=r"asks for 0\.010500 ADA in all") as refused,
    ):
        greedy.get("/predict")
    assert refused.value.details["due"] == 7 * PRICE and store.signed(CHANNEL.hex()) == 5 * PRICE


def test_a_5xx_is_paid_only_if_the_real_gateway_charged_it(books, gateway, store):
    _, endpoints = books
    with EndpointClient(gateway, "echo", new_signer(store), PRICE) as client:
        assert client.post("/fail").status_code == 500  # the upstream answered: charged
        assert client.post("/predict").status_code == 200  # its 402 asks for it: paid
        assert (client.received, client.unsure, client.paid) == (2 * PRICE, 0, 2 * PRICE)
    with EndpointClient(gateway, "down", new_signer(store, OTHER_CHANNEL), PRICE) as client:
        for _ in range(3):  # the gateway's own 502, never charged: the same IOU each time
            assert client.post("/predict").status_code == 502
        assert (client.received, client.unsure, client.paid) == (0, 3 * PRICE, PRICE)
    down = endpoints.get(stored("down"))
    assert down is not None and (down.requests, down.served) == (0, 0)


def test_a_misspelt_endpoint_costs_one_price_at_most(gateway, store):
    """The gateway's 404 for an endpoint it does not have charges nothing; the client signs the
    same IOU for each attempt, so the next client on the channel (which starts from the last
    IOU) is one price ahead, not one per attempt."""
    with EndpointClient(gateway, "ehco", new_signer(store), PRICE) as client:
        for _ in range(3):
            assert client.post("/predict").status_code == 404
        assert (client.received, client.unsure, client.paid) == (0, 3 * PRICE, PRICE)


def test_per_second_dues_are_paid_up_to_the_renters_own_count(books, gateway, store):
    """`pay_due` through the real gateway's control routes: a per-second endpoint's seconds
    paid (and a little ahead, so the next request is covered), a greedy due refused unsigned,
    a stop ending the seconds; a deploy's refusal carried as the gateway's words."""
    book, endpoints = books
    started = time.time_ns() // 1_000_000 - 3_500  # ran 3.5 s: 3 whole seconds
    with serving(upstream) as upstream_url:
        endpoints.add(running("timed", upstream_url, PRICE, PER_SECOND, started_ms=started))
    signer = new_signer(store)
    deployed = [("timed", started)]
    with GatewayControl(gateway, ConsumerKey(RENTER), NETWORK) as control:
        iou = pay_due(control, signer, deployed, ahead_s=2)
        assert iou is not None and iou.amount in {PER_SECOND * s for s in (5, 6)}  # 3 or 4 run
        assert book.get(CHANNEL).iou.amount == iou.amount  # type: ignore[union-attr]
        assert pay_due(control, signer, deployed) is None  # paid ahead: nothing owed yet
        endpoints.charge(
            stored("timed"), 100 * PER_SECOND
        )  # a provider counting what it never served
        with pytest.raises(EndpointRefused, match="more than the"):  # served <= signed
            pay_due(control, signer, deployed)
        with pytest.raises(EndpointRefused, match="more than the"):  # seconds by its clock
            now = time.time_ns() // 1_000_000  # deployed now, "started" 100 s ago
            with serving(upstream) as upstream_url:
                endpoints.add(running("young", upstream_url, PRICE, PER_SECOND,
                                      channel=OTHER_CHANNEL, started_ms=now - 100_000))  # fmt: skip
            pay_due(control, new_signer(store, OTHER_CHANNEL), [("young", now)])
        with pytest.raises(ConsumerError, match="403: this gateway takes no deployments"):
            control.deploy("x", CHANNEL, {"kind": "service"})
        stopped = control.stop("timed", CHANNEL)
        assert stopped["state"] == "stopped"
        assert control.status("timed", CHANNEL)["due"] == stopped["due"]  # its seconds ended
