"""The daemon's deployments loop on the real engine with the sample service (its channels in the
book already: no chain): a pending deployment runs, holding a slot per replica, and the gateway
round-robins over its replicas; a renter's stop removes its containers and frees its slots;
its channel's IOUs lagging past the credit, or its renter starting a close, stops it with the
reason; a start that cannot be made fails with the reason and holds nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from offchain.protocol.job.jobspec import Resources, ServiceSpec
from offchain.protocol.ledger.iou import IOU_HEADER
from provider.capacity import Capacity, Slot
from provider.config import DaemonSettings, RunnerSettings
from provider.daemon.rentals import Rentals
from provider.gateway.app import gateway_app
from provider.money.channel_book import ChannelBook
from provider.rentals.book import PENDING, Rental, RentalBook
from provider.rentals.services import LABEL_SERVICE, Services
from provider.rentals.starters import engine_logs
from samples import images as sample_images
from tests.provider.test_gateway_support import (
    CHANNEL,
    OTHER_CHANNEL,
    RENTER,
    book_with_channels,
    iou,
    serving,
)

PRICE = 1_000
PER_SECOND = 1_000
CREDIT = 1_500  # a per-second deployment lags once it ran 2 s unpaid
SLOTS = 3


@pytest.fixture(scope="module")
def sample(client: docker.DockerClient) -> str:
    return sample_images.sample_service_image(client)


@dataclasses.dataclass
class World:
    channels: ChannelBook
    book: RentalBook
    loop: Rentals
    capacity: Capacity
    services: Services

    async def until(
        self, name: str, done: Callable[[Rental], bool], timeout_s: float = 60
    ) -> Rental:
        """Rounds of the loop until `done` holds of deployment `name`."""
        deadline = time.monotonic() + timeout_s
        while True:
            await self.loop.tick()
            found = self.book.get(name)
            assert found is not None
            if done(found) and not self.loop._starting:
                await self.loop.tick()  # one more: what ended is cleared
                return found
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.1)


@pytest.fixture
async def world(client: docker.DockerClient, tmp_path: Path) -> AsyncIterator[World]:
    settings = RunnerSettings(state_dir=tmp_path / "state")
    channels = book_with_channels(tmp_path / "channels.sqlite", credit=CREDIT)
    book = RentalBook.in_state_dir(settings.state_dir)
    bundle = Resources(cpu_cores=1, memory_mib=512)
    capacity = Capacity([Slot(n, (), bundle) for n in range(SLOTS)])
    loop = Rentals(None, channels, book, client, settings, DaemonSettings(), capacity)  # type: ignore[arg-type]  # no chain: the channels are in the book
    services = Services(client, settings)
    yield World(channels, book, loop, capacity, services)
    await loop.aclose()
    for name in set(services.leftovers()["networks"]):
        services.stop(name)
    channels.close()
    book.close()


def pending(name: str, image: str, channel: bytes = CHANNEL, **spec: Any) -> Rental:
    fields = {"kind": "service", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
              "price_per_request": PRICE, "resources": {"cpu_cores": 1, "memory_mib": 256},
              **spec}  # fmt: skip
    parsed = ServiceSpec.model_validate(fields)
    return Rental(name, "endpoint", channel, RENTER.to_verification_key().payload,
                    parsed.canonical_json().decode(), PENDING, "", "", "", 0,
                    parsed.price_per_request, parsed.price_per_second, created_ms=1)  # fmt: skip


async def test_a_deployment_runs_round_robin_and_stops_when_asked(
    world: World, sample: str, client: docker.DockerClient
) -> None:
    world.book.add(pending("two", sample, replicas=2))
    running = await world.until("two", lambda d: d.state == "running")
    assert len(running.upstreams) == 2 and running.image_digest == client.images.get(sample).id
    assert world.capacity.free() == SLOTS - 2
    app = gateway_app(world.channels, world.book, logs=engine_logs(client, world.services.settings))
    with serving(app) as url:
        for n in range(1, 5):
            answer = httpx.post(f"{url}/endpoints/two/predict", json={"values": [n]},
                                headers={IOU_HEADER: iou(n * PRICE).to_header()})  # fmt: skip
            assert answer.json()["score"] == 2 * n + 1
    containers = client.containers.list(filters={"label": f"{LABEL_SERVICE}=two"})
    assert len(containers) == 2
    for container in containers:  # each replica answered two of the four
        assert container.logs().decode().count("POST /predict") == 2
    world.book.finish("two", "stopped", "stopped by its renter", time.time_ns() // 1_000_000)
    await world.until("two", lambda d: True)
    assert world.services.leftovers() == {"containers": [], "networks": []}
    assert world.capacity.free() == SLOTS


async def test_lagging_ious_and_a_closing_channel_stop_their_deployments(
    world: World, sample: str
) -> None:
    world.book.add(pending("timed", sample, price_per_second=PER_SECOND))
    world.book.add(pending("closed", sample, channel=OTHER_CHANNEL))
    await world.until("timed", lambda d: d.state == "running")
    await world.until("closed", lambda d: d.state == "running")
    entry = world.channels.get(OTHER_CHANNEL)
    assert entry is not None
    world.channels.seen(dataclasses.replace(entry.view, closing_at=1))
    closed = await world.until("closed", lambda d: d.state == "stopped")
    assert "is closing (its renter started a close)" in closed.reason
    lagged = await world.until("timed", lambda d: d.state == "stopped", timeout_s=10)
    assert (
        lagged.reason.startswith("IOUs lag: 2000 lovelace owed") and "credit 1500" in lagged.reason
    )
    assert lagged.stopped_ms - lagged.started_ms < 3_000  # stopped in the round it lagged
    assert world.services.leftovers() == {"containers": [], "networks": []}
    assert world.capacity.free() == SLOTS


async def test_what_cannot_start_fails_with_the_reason(world: World, sample: str) -> None:
    world.book.add(pending("absent", "unchained/absent:1"))
    world.book.add(dataclasses.replace(pending("stranger", sample), renter_vkey=b"\x05" * 32))
    world.book.add(pending("nowhere", sample, channel=b"\x0b" * 28))
    world.book.add(pending("huge", sample, replicas=SLOTS + 1))
    reasons = {name: (await world.until(name, lambda d: d.state == "failed")).reason
               for name in ("absent", "stranger", "nowhere", "huge")}  # fmt: skip
    assert "unchained/absent:1 is not on this machine" in reasons["absent"]
    assert f"is not the renter key of channel {CHANNEL.hex()}" in reasons["stranger"]
    assert "0b0b0b" in reasons["nowhere"] and "is not served here" in reasons["nowhere"]
    assert reasons["huge"].startswith(f"{SLOTS + 1} slot(s) asked, ")  # others may hold some
    assert world.services.leftovers() == {"containers": [], "networks": []}
    assert world.capacity.free() == SLOTS
