"""The pod agent's rounds against the provider's real gateway (under uvicorn, its channel and
deployment books on disk; the channel opened in the book directly, as the gateway tests do):
each round pays exactly what the channel owes, stored by the provider; once the pod stops the
last round pays the frozen due to the lovelace and says nothing is live; a due above the
renter's count of seconds is refused unsigned; a deployment the provider removed is skipped.
And the channel's lock: one agent at a time, a second one waiting for the first."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumer.cli.pod_agent import PodAgent, holding, running
from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.endpoint_client import EndpointRefused, GatewayControl
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.rental_store import RentalRecord, RentalStore
from provider.gateway.app import gateway_app
from provider.money.channel_book import ChannelBook
from provider.rentals.book import RentalBook
from tests.consumer.test_channels import record
from tests.consumer.test_endpoint_gateway import new_signer
from tests.provider.test_gateway_support import (
    CHANNEL,
    NETWORK,
    RENTER,
    book_with_channels,
    serving,
    stored,
)
from tests.provider.test_gateway_support import (
    running as running_row,
)

PRICE = 1_000  # lovelace per second
RAN_MS = 3_000  # the pod has run this long when the test starts


@pytest.fixture
def books(tmp_path: Path) -> Iterator[tuple[ChannelBook, RentalBook]]:
    book = book_with_channels(tmp_path / "channels.sqlite")
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    started = time.time_ns() // 1_000_000 - RAN_MS
    pod = running_row("lab", "http://127.0.0.1:9", 0, PRICE, started_ms=started)
    endpoints.add(dataclasses.replace(pod, kind="pod"))
    yield book, endpoints
    book.close()
    endpoints.close()


@pytest.fixture
def agent(books, tmp_path: Path) -> Iterator[PodAgent]:
    _, endpoints = books
    with serving(gateway_app(*books)) as url:
        renter = tmp_path / "renter"
        channels = ChannelStore(renter)
        channels.save(record(ConsumerKey(RENTER), CHANNEL.hex()))
        records = RentalStore(renter)
        pod = endpoints.get(stored("lab"))
        for name in ("lab", "gone"):  # "gone": removed by the provider since
            records.save(RentalRecord(name, "pod", url, "ab" * 28, CHANNEL.hex(), {}, 0,
                                          PRICE, pod.started_ms - 200))  # fmt: skip
        with GatewayControl(url, ConsumerKey(RENTER), NETWORK) as control:
            yield PodAgent(control, new_signer(channels), lambda: records.on_channel(CHANNEL.hex()))


def acknowledged(book: ChannelBook) -> int:
    entry = book.get(CHANNEL)
    return 0 if entry is None or entry.iou is None else entry.iou.amount


def test_each_round_pays_the_exact_due_and_the_last_the_seconds_run(books, agent):
    book, endpoints = books
    first = agent.round()
    assert first.live == ["lab"]
    assert first.signed in (PRICE * 3, PRICE * 4)  # 3 s run, a fourth if one passed meanwhile
    assert acknowledged(book) == first.signed  # stored by the provider
    pod = endpoints.get(stored("lab"))
    stopped_ms = time.time_ns() // 1_000_000  # the renter's stop, now
    endpoints.finish(stored("lab"), "stopped", "stopped by its renter", stopped_ms)
    owed = PRICE * ((stopped_ms - pod.started_ms) // 1000)
    last = agent.round()
    assert (last.live, last.signed, acknowledged(book)) == ([], owed, owed)  # to the lovelace
    assert agent.round().signed == owed  # nothing more owed: nothing more signed


def test_a_due_above_the_renters_count_is_not_signed(books, agent):
    book, endpoints = books
    paid = agent.round().signed
    endpoints.charge(stored("lab"), 50 * PRICE)  # a provider counting what never ran
    with pytest.raises(EndpointRefused, match=r"more than the .* counted here: not signed"):
        agent.round()
    assert agent.signer.signed == paid == acknowledged(book)


def test_one_agent_per_channel_and_a_second_waits_for_the_first(tmp_path: Path):
    channel = CHANNEL.hex()
    assert not running(tmp_path, channel)
    taken = []
    with holding(tmp_path, channel) as held:
        assert held and running(tmp_path, channel)
        with holding(tmp_path, channel) as again:
            assert not again  # without waiting: another holds it
        waiter = threading.Thread(target=lambda: taken.append(
            holding(tmp_path, channel, wait=True).__enter__()))  # fmt: skip
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive() and taken == []  # waits while the first holds it
    waiter.join(5)
    assert taken == [True]
