"""Batch jobs paid over a channel, provider side, on the real engine (the channels in the book
already: no chain): a job deployed through the gateway's signed control route runs with the
hardened runner, ends by itself with the reason, its billing frozen at the whole seconds of its
signed receipt; the renter alone fetches the receipt and the result archive with signed
requests (a replay, a bad signature, a stranger's key are refused) and they verify as an
escrowed job's do. A job above its channel's room is refused before it is stored; one past its
max duration is killed and billed that long; one whose IOUs lag is stopped, billed to the stop,
and still gets its receipt."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from pycardano import PaymentSigningKey

from consumer.sdk.channel_jobs import JobPayer, channel_job, deploy_job
from consumer.sdk.channel_store import ChannelRecord, ChannelStore
from consumer.sdk.endpoint_client import EndpointRefused, GatewayControl
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.rental_store import RentalStore
from offchain.chain.utxo import format_out_ref
from offchain.protocol.api.control import ControlRequest, SignedControl
from offchain.protocol.job.channel_job import receipt_ref
from offchain.protocol.job.jobspec import Bundle, JobSpec, Resources
from offchain.protocol.job.receipt import Receipt
from provider.capacity import Capacity, Slot
from provider.config import DaemonSettings, RunnerSettings
from provider.daemon.rentals import Rentals
from provider.gateway.app import gateway_app
from provider.gateway.control import DeployTerms
from provider.rentals.book import RentalBook, due_of
from provider.rentals.jobs import ChannelJobs, JobFiles, JobReceipts
from tests.provider.test_deployments_daemon import World
from tests.provider.test_gateway_support import (
    CAPACITY,
    CHANNEL,
    NETWORK,
    RENTER,
    SCRIPT,
    book_with_channels,
    iou,
    running,
    serving,
    stored,
)

PRICE = 1_000  # lovelace per second: the offer's
CREDIT = 1_500  # IOUs may lag 1.5 s
PROVIDER = PaymentSigningKey.generate()
TERMS = DeployTerms(Bundle(cpu_cores=1, memory_mib=512), PRICE, None)


def job(image: str, script: str, seconds: int = 20, price: int = PRICE) -> dict[str, Any]:
    return {
        "kind": "job", "price_per_second": price,
        "job": {"image": image, "command": ["sh", "-c", script], "max_duration_s": seconds,
                "max_price_lovelace": price * seconds,
                "resources": {"cpu_cores": 1, "memory_mib": 128, "disk_mib": 8}},
    }  # fmt: skip


def signed(action: str, name: str, spec: dict[str, Any] | None = None,
           key: PaymentSigningKey = RENTER) -> dict[str, Any]:  # fmt: skip
    request = ControlRequest.of(action, name, CHANNEL, spec)  # type: ignore[arg-type]
    return SignedControl.sign(key, NETWORK, request).to_wire()


@pytest.fixture
async def world(client: docker.DockerClient, tmp_path: Path) -> AsyncIterator[World]:
    settings = RunnerSettings(state_dir=tmp_path / "state")
    channels = book_with_channels(tmp_path / "channels.sqlite", credit=CREDIT)
    book = RentalBook.in_state_dir(settings.state_dir)
    capacity = Capacity([Slot(n, (), Resources(cpu_cores=1, memory_mib=512)) for n in range(2)])
    receipts = JobReceipts(PROVIDER, NETWORK, SCRIPT, settings.state_dir / "results")
    loop = Rentals(None, channels, book, client, settings, DaemonSettings(), capacity, receipts)  # type: ignore[arg-type]  # no chain: the channels are in the book
    jobs = ChannelJobs(client, settings)
    yield World(channels, book, loop, capacity, jobs)  # type: ignore[arg-type]  # its starter
    await loop.aclose()
    channels.close()
    book.close()


@pytest.fixture
def gateway(world: World) -> Iterator[httpx.Client]:
    files = JobFiles.of(world.services.settings)
    app = gateway_app(world.channels, world.book, terms=TERMS, job_files=files)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def deployed(gateway: httpx.Client, name: str, spec: dict[str, Any]) -> None:
    answer = gateway.post("/deployments", json=signed("deploy", name, spec))
    assert answer.status_code == 201, answer.text
    assert (answer.json()["kind"], answer.json()["price_per_second"]) == (
        "job",
        spec["price_per_second"],
    )


async def test_a_job_runs_ends_by_itself_and_its_renter_alone_fetches_what_verifies(
    world: World, gateway: httpx.Client, busybox: str
) -> None:
    deployed(gateway, "j1", job(busybox, "sleep 1; echo result > /out/r.txt; echo done"))
    early = gateway.post("/deployments/j1/receipt", json=signed("receipt", "j1"))
    assert early.status_code == 409 and "its receipt comes once it ends" in early.text
    ended = await world.until(stored("j1"), lambda d: d.state == "stopped")
    assert ended.reason == "job succeeded: exit code 0", ended
    receipt_wire = gateway.post("/deployments/j1/receipt", json=signed("receipt", "j1"))
    assert receipt_wire.status_code == 200, receipt_wire.text
    record = receipt_wire.json()
    ref = receipt_ref(CHANNEL, "j1")
    assert record["escrow"] == format_out_ref(ref) and record["status"] == "succeeded"
    receipt = Receipt.from_body(ref, record)
    assert receipt.signed_by(PROVIDER.to_verification_key().payload, NETWORK, SCRIPT)
    assert receipt.units >= 1  # a second's sleep: rounded up, never below one
    # billing frozen at the receipt's whole seconds, to the lovelace
    assert ended.stopped_ms - ended.started_ms == receipt.units * 1000
    assert due_of(ended, time.time_ns() // 1_000_000 + 60_000) == PRICE * receipt.units
    archive = gateway.post("/deployments/j1/results", json=signed("results", "j1"))
    assert archive.status_code == 200 and archive.headers["content-type"] == "application/x-tar"
    assert hashlib.sha256(archive.content).digest() == receipt.result_hash
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        member = tar.extractfile("r.txt")
        assert member is not None and member.read() == b"result\n"

    replay = signed("results", "j1")
    assert gateway.post("/deployments/j1/results", json=replay).status_code == 200
    again = gateway.post("/deployments/j1/results", json=replay)
    assert again.status_code == 409 and "taken already" in again.json()["error"]
    forged = {**signed("receipt", "j1"), "signature": "00" * 64}
    assert gateway.post("/deployments/j1/receipt", json=forged).status_code == 401
    stranger = signed("results", "j1", key=PaymentSigningKey.generate())
    refused = gateway.post("/deployments/j1/results", json=stranger)
    assert refused.status_code == 404 and "you have no deployment named" in refused.text  # theirs
    unsigned = gateway.post("/deployments/j1/results", json={"request": {}})
    assert unsigned.status_code == 400
    assert world.capacity.free() == 2


async def test_a_job_above_its_channels_room_is_refused_before_it_is_stored(
    world: World, gateway: httpx.Client, busybox: str
) -> None:
    seconds = 10
    big = job(busybox, "true", seconds=seconds, price=CAPACITY // seconds + 1)
    answer = gateway.post("/deployments", json=signed("deploy", "big", big))
    assert answer.status_code == 403, answer.text
    assert (
        "more than channel" in answer.json()["error"] and "has room for" in answer.json()["error"]
    )
    assert world.book.get(stored("big")) is None


async def test_a_job_past_its_max_duration_is_killed_and_billed_that_long(
    world: World, gateway: httpx.Client, busybox: str
) -> None:
    deployed(gateway, "slow", job(busybox, "sleep 30", seconds=1))
    ended = await world.until(stored("slow"), lambda d: d.state == "stopped")
    assert ended.reason == "job timeout: killed at its max duration (1 s)"
    record = gateway.post("/deployments/slow/receipt", json=signed("receipt", "slow")).json()
    assert (record["status"], record["units"]) == ("timeout", 1)
    assert ended.stopped_ms - ended.started_ms == 1000


async def test_a_job_whose_ious_lag_is_stopped_and_still_gets_its_receipt(
    world: World, gateway: httpx.Client, busybox: str
) -> None:
    deployed(gateway, "lag", job(busybox, "sleep 30"))
    running = await world.until(stored("lag"), lambda d: d.state == "running")
    world.channels.accept(iou(PRICE))  # the first second paid, then nothing
    stopped = await world.until(stored("lag"), lambda d: d.state == "stopped", timeout_s=30)
    assert stopped.reason.startswith("IOUs lag: "), stopped
    owed = due_of(stopped, stopped.stopped_ms)
    assert owed - PRICE <= CREDIT + PRICE  # at most the credit beyond what was paid (one round)
    record = gateway.post("/deployments/lag/receipt", json=signed("receipt", "lag")).json()
    assert record["status"] == "cancelled" and record["units"] >= 2
    assert running.started_ms == stopped.started_ms and world.capacity.free() == 2


async def test_the_renter_pays_a_jobs_seconds_and_never_signs_above_its_own_count(
    world: World, gateway: httpx.Client, busybox: str, tmp_path: Path
) -> None:
    renter = ConsumerKey(RENTER)
    store = ChannelStore(tmp_path / "renter")
    record = ChannelRecord(CHANNEL.hex(), "00", "ab" * 28, "addr_test1", CAPACITY, 3_600_000, 0,
                           "cd" * 32)  # fmt: skip
    store.save(record)
    control = GatewayControl(str(gateway.base_url), renter, NETWORK, gateway)
    spec = channel_job(JobSpec.model_validate(job(busybox, "sleep 2")["job"]), PRICE)
    rentals = RentalStore(tmp_path / "renter")
    deployed_job = deploy_job(control, rentals, "paid", spec, record, CAPACITY,
                              str(gateway.base_url), None)  # fmt: skip
    payer = JobPayer(control, IouSigner(renter, NETWORK, SCRIPT, record, store), deployed_job)
    while (status := payer.round())["state"] not in ("stopped", "failed"):
        await world.loop.tick()
        await asyncio.sleep(0.1)
    payer.round()  # the last due, frozen at the receipt's seconds
    row = world.book.get(stored("paid"))
    assert row is not None and row.reason == "job succeeded: exit code 0", status
    owed = due_of(row, row.stopped_ms)
    assert payer.signer.signed == owed == PRICE * ((row.stopped_ms - row.started_ms) // 1000)
    assert store.signed(CHANNEL.hex()) == owed and owed >= 2 * PRICE

    # the provider's book names more than this renter counted for the job: nothing is signed
    world.book.add(running("extra", "http://127.0.0.1:9", PRICE))
    world.book.charge(stored("extra"), 5 * PRICE)
    with pytest.raises(EndpointRefused, match=r"more than the .* counted here for job paid"):
        payer.round()
    assert store.signed(CHANNEL.hex()) == owed


async def test_a_job_started_while_a_round_awaited_is_not_started_again(
    world: World, gateway: httpx.Client, busybox: str
) -> None:
    deployed(gateway, "once", job(busybox, "sleep 1"))
    stale = world.book.list()  # the round's rows, read before its awaits
    await world.loop.tick()
    await asyncio.gather(*world.loop._starting.values())  # the start ran meanwhile: running
    assert world.book.get(stored("once")).state == "running"
    # the interleaving made deterministic: a round whose rows were read before the start ended
    world.book.list = lambda: stale  # type: ignore[method-assign]
    await world.loop.tick()
    del world.book.list  # the book's own again
    assert not world.loop._starting  # not started twice (it would fail: "already run here")
    ended = await world.until(stored("once"), lambda d: d.state != "running")
    assert ended.reason == "job succeeded: exit code 0", ended
