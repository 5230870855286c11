"""The fleet placement on a real Ray cluster of separate `ray start` processes on this machine
(tests/provider/ray_cluster.py): the offer adds up the nodes, a job runs on the node Ray
placed it on and its results come home, a node killed mid-job has the job finish on the other
node from its checkpoint, and the last node killed fails the job with nothing metered (the
daemon's zero-unit receipt). One cluster for the module; the tests run in order."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import re
import subprocess
import tarfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import docker
import httpx
import pytest
import ray
from pycardano import PaymentSigningKey
from ray.util.placement_group import remove_placement_group

from offchain.protocol.job.channel_job import parse_channel_job
from offchain.protocol.job.jobspec import JobSpec, Resources
from offchain.protocol.ledger.iou import IOU_HEADER
from offchain.protocol.ledger.split import settle_split
from provider.capacity import Capacity, Slot
from provider.config import DaemonSettings, RunnerSettings
from provider.daemon.rentals import Rentals
from provider.gateway.app import gateway_app
from provider.gateway.scaler import Scaler
from provider.money.channel_book import ChannelBook
from provider.placement.fleet_gateway import FleetLogs, FleetScaling
from provider.placement.fleet_rentals import (
    FleetPods,
    FleetServices,
    Replica,
    fleet_starters,
    target,
)
from provider.placement.ray_fleet import Attempt, RayPlacement
from provider.placement.warm_asks import WarmAsks
from provider.rentals.book import Rental, RentalBook, due_of
from provider.rentals.jobs import RECEIPT_FILE, JobReceipts, job_id
from provider.rentals.pods import Pods
from provider.rentals.services import Services, service_container_name
from provider.sandbox.runner import runner_id
from samples import images as sample_images
from tests.protocol.onchain import balance
from tests.provider import test_gateway_support as support
from tests.provider.conftest import assert_no_leftovers
from tests.provider.daemon_harness import (
    consumer_of,
    daemon_on_market,
    request_and_lock,
    settling_market,
    spec,
    wait_state,
)
from tests.provider.ray_cluster import RayCluster
from tests.provider.test_deployments_daemon import PRICE, pending
from tests.provider.test_gateway_control import signed
from tests.provider.test_pods import pod_spec, ssh

pytestmark = [pytest.mark.docker, pytest.mark.slow]
WAIT_S = 120.0
PER_SECOND = 1_000  # lovelace a warm second of the scaling endpoint
AHEAD = 10_000 * PER_SECOND  # what its renter paid ahead (an IOU in the book)

# counts to 6, a second a step, keeping its step in /out (renamed into place: a copy never
# holds half a file) and where each run started from
COUNTER = (
    "i=$(cat /out/step 2>/dev/null || echo 0); echo from $i >> /out/starts; "
    "while [ $i -lt 6 ]; do i=$((i+1)); echo $i > /out/step.new; mv /out/step.new /out/step; "
    "echo step $i; sleep 1; done"
)


@pytest.fixture(scope="module")
def fleet_state(tmp_path_factory: pytest.TempPathFactory) -> RunnerSettings:
    return RunnerSettings(state_dir=tmp_path_factory.mktemp("fleet") / "state")


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, fleet_state: RunnerSettings
) -> Iterator[RayCluster]:
    made = RayCluster(tmp_path_factory.mktemp("ray"), fleet_state.state_dir)
    try:
        made.start_head()
        made.wait_head()
        ray.init(address=made.address, logging_level="WARNING", log_to_driver=False)
        made.add_node("a")
        made.add_node("b", gpus=1)  # a GPU it lends to Ray but has not (no NVML here)
        yield made
    finally:
        ray.shutdown()
        made.stop()


@pytest.fixture(scope="module")
def fleet(cluster: RayCluster, fleet_state: RunnerSettings) -> RayPlacement:
    daemon = DaemonSettings(
        placement="ray", ray_address=cluster.address, ray_place_timeout_s=3,
        ray_checkpoint_every_s=1,
    )  # fmt: skip
    return RayPlacement(daemon, fleet_state)


def counter(busybox: str, seconds: int = 60) -> JobSpec:
    return JobSpec.model_validate({
        "image": busybox, "command": ["sh", "-c", COUNTER], "max_duration_s": seconds,
        "max_price_lovelace": 10_000_000,
        "resources": {"cpu_cores": 1, "memory_mib": 256, "disk_mib": 16},
    })  # fmt: skip


def out_files(archive: Path) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        return {
            m.name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers() if m.isfile()
        }  # fmt: skip


def wait_for(what: str, check: object) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_S} s for {what}")
        time.sleep(0.2)


def running(fleet: RayPlacement, job_id: str, spec: JobSpec) -> tuple[Future, list[str]]:
    """The job run on the fleet on a thread; its log, as it streams, in the list."""
    lines: list[str] = []
    pool = ThreadPoolExecutor(1)
    future = pool.submit(fleet.run, job_id, spec, [], lines.append)
    pool.shutdown(wait=False)
    return future, lines


def checkpointed(fleet: RayPlacement, job_id: str, step: int) -> Attempt:
    """Once the daemon holds a checkpoint of the job at `step` or beyond: its attempt."""

    def copy_at_step() -> bool:
        attempt = fleet.attempts.get(job_id)
        if attempt is None or attempt.checkpoint is None:
            return False
        with tarfile.open(fileobj=io.BytesIO(attempt.checkpoint)) as tar:
            member = tar.extractfile("step")
            return member is not None and int(member.read()) >= step

    wait_for(f"a checkpoint of {job_id} at step {step}", copy_at_step)
    return fleet.attempts[job_id]


async def test_one_daemon_runs_a_market_job_on_a_node_and_is_paid(
    devnet, tmp_path: Path, busybox: str, client: docker.DockerClient, cluster: RayCluster
) -> None:
    """`provider run` with `placement = "ray"`: its offer is the nodes', a renter's job runs
    on the node Ray chose, and the receipt signed from that node's metering is settled."""
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    async with daemon_on_market(
        devnet, tmp_path, deployment_file, settings, placement="ray",
        ray_address=cluster.address,
    ) as (daemon, provider, url), consumer_of(devnet, url) as consumer:  # fmt: skip
        before = balance(devnet, provider.address)
        script = "echo started; sleep 2; echo 42 > /out/answer; echo done"
        job = await request_and_lock(devnet, deployment, consumer, spec(busybox, script))
        status = await wait_state(consumer, job.job, {"settled"}, timeout_s=WAIT_S)
        placed = re.search(rf"job {job.job} placed on node (\w+)", daemon.log())
        assert placed is not None, daemon.log()
        params = job.params
        split = settle_split(params["lovelace"], params["price_per_unit"],
                             status["receipt_units"], params["max_units"],
                             params["fee_allowance"])  # fmt: skip
        assert status["receipt_units"] >= 2
        assert balance(devnet, provider.address) == before + split.provider
        logs = (await consumer.send("GET", f"/jobs/{job.job}/logs")).json()
        assert [line["text"] for line in logs] == ["started", "done"]
        answer = await consumer.send("GET", f"/jobs/{job.job}/result")
        assert answer.headers["x-result-sha256"] == status["result_sha256"]
    node_settings = RunnerSettings(state_dir=daemon.state_dir)
    for name in ("a", "b"):
        assert_no_leftovers(cluster.reap(name, client, node_settings))


def test_the_offer_adds_up_the_nodes(fleet: RayPlacement) -> None:
    inventory = fleet.inventory()
    assert inventory.cpu_cores == 2  # each node advertises 1 CPU to Ray
    assert inventory.gpu.gpus == ()  # b lends Ray a GPU NVML does not see: none offered
    assert inventory.memory_bytes == 2 * (2048 << 20)
    assert sorted(node.name for node in fleet.nodes()) == ["a", "b"]


def test_a_job_runs_on_its_node_and_its_results_come_home(
    fleet: RayPlacement, busybox: str, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster,
) -> None:  # fmt: skip
    started = threading.Event()
    lines: list[str] = []
    spec = counter(busybox)
    result = fleet.run("fleet_whole", spec, [], lines.append, "ab" * 32 + "#0", None, started.set)
    assert result.status == "succeeded" and started.is_set()
    assert result.record is not None and result.record.billable_units >= 6
    assert result.output is not None
    assert result.output.path == fleet.results_dir / "fleet_whole" / "out.tar"
    assert out_files(result.output.path) == {"starts": "from 0\n", "step": "6\n"}
    assert "step 6" in "".join(lines)
    assert (fleet.results_dir / "fleet_whole" / "log.txt").read_bytes().count(b"step") == 6
    for name in ("a", "b"):  # the node shipped everything and kept nothing
        node = cluster.reap(name, client, fleet_state)
        assert not (node.results_dir / "fleet_whole").exists()
        assert_no_leftovers(node)


def test_a_node_without_the_gpus_it_lent_fails_the_job_unmetered(
    fleet: RayPlacement, busybox: str
) -> None:
    """Ray placed a GPU job on node b (it advertises a GPU), whose engine has none: the node
    says so and nothing is metered (a zero-unit receipt), rather than a job on no GPU."""
    spec = counter(busybox).model_copy(
        update={"resources": counter(busybox).resources.model_copy(update={"gpus": 1})}
    )
    result = fleet.run("fleet_gpu", spec, ["GPU-slot"])
    assert result.status == "error" and result.record is None
    assert result.error == "node b: 1 GPUs asked, 0 free"


def test_the_providers_stop_reaches_the_jobs_node(fleet: RayPlacement, busybox: str) -> None:
    """`stop_all` (the daemon stopping past its grace): the job ends "stopped" on its node,
    metered, its /out as far as it got packed as its results, and is not placed again."""
    future, _ = running(fleet, "fleet_stopped", counter(busybox))
    checkpointed(fleet, "fleet_stopped", 1)
    assert fleet.stop_all() == ["fleet_stopped"]
    result = future.result(timeout=WAIT_S)
    assert result.status == "stopped" and result.record is not None
    assert result.output is not None and out_files(result.output.path)["starts"] == "from 0\n"
    assert fleet.stop_all() == []


def test_a_restarted_daemon_collects_what_a_node_ran_meanwhile(
    fleet: RayPlacement, busybox: str, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster,
) -> None:  # fmt: skip
    """The daemon's process ends mid-job (its actors with it; the container runs on): the next
    daemon's `recover` has the node finish the job and ships its results home."""
    node = fleet.nodes()[0]
    actor = fleet.actor(node)
    ray.get(actor.start.remote("fleet_orphan", counter(busybox), 0, None, None, None, 60))
    wait_for("fleet_orphan to start", lambda: ray.get(actor.poll.remote("fleet_orphan")).started)
    ray.kill(actor)  # as the daemon's death takes its actors: the next daemon has new ones
    del fleet.actors[node.node_id]
    results = fleet.recover()
    assert [(r.job_id, r.status) for r in results] == [("fleet_orphan", "succeeded")]
    (result,) = results
    assert result.record is not None and result.record.gap  # samples missed while no actor
    assert result.output is not None
    assert result.output.path == fleet.results_dir / "fleet_orphan" / "out.tar"
    assert out_files(result.output.path)["step"] == "6\n"
    assert_no_leftovers(cluster.reap(node.name, client, fleet_state))


def test_a_node_killed_mid_job_and_the_job_ends_on_the_other(
    fleet: RayPlacement, busybox: str, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster,
) -> None:  # fmt: skip
    future, lines = running(fleet, "fleet_moved", counter(busybox))
    attempt = checkpointed(fleet, "fleet_moved", 2)
    first = attempt.nodes[0]
    cluster.power_off(first, client, fleet_state)
    result = future.result(timeout=WAIT_S)
    other = "b" if first == "a" else "a"
    assert attempt.nodes == [first, other]
    assert result.status == "succeeded" and result.record is not None
    assert result.output is not None
    files = out_files(result.output.path)
    assert files["step"] == "6\n"
    begun = [int(line.split()[1]) for line in files["starts"].splitlines()]
    assert begun[0] == 0 and begun[1] >= 2  # the second run began from the checkpoint
    assert "step 6" in "".join(lines)
    assert_no_leftovers(cluster.reap(other, client, fleet_state))
    assert_no_leftovers(cluster.reap(first, client, fleet_state))  # the machine came back


@dataclasses.dataclass
class OnFleet:
    """The daemon's deployments loop with the fleet's Starters, its books (channels served
    already: no chain) and its two slots."""

    made: Callable[[], tuple[Rentals, Capacity]]  # a daemon's loop and slots, started anew
    book: RentalBook
    channels: ChannelBook
    loop: Rentals = dataclasses.field(init=False)
    capacity: Capacity = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.loop, self.capacity = self.made()

    async def restart(self) -> None:
        """The daemon restarts: a new loop over the same books, new Starters."""
        await self.loop.aclose()
        self.loop, self.capacity = self.made()

    async def until(self, name: str, done: Callable[[Rental | None], bool]) -> Rental | None:
        """Rounds of the loop until `done` holds of deployment `name` (None: gone)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            await self.loop.tick()
            found = self.book.get(name)
            if done(found) and not self.loop._starting:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {WAIT_S} s for {name}: {found}")
            await asyncio.sleep(0.2)


@pytest.fixture
async def on_fleet(
    fleet: RayPlacement, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster, tmp_path: Path,
) -> AsyncIterator[OnFleet]:  # fmt: skip
    channels = support.book_with_channels(tmp_path / "channels.sqlite")
    book = RentalBook.in_state_dir(tmp_path / "daemon")
    receipts = JobReceipts(
        PaymentSigningKey.generate(), support.NETWORK, support.SCRIPT, fleet.results_dir
    )

    def made() -> tuple[Rentals, Capacity]:
        capacity = Capacity([Slot(n, (), Resources(cpu_cores=1, memory_mib=512)) for n in (0, 1)])
        starters = fleet_starters(fleet, client, fleet_state)
        loop = Rentals(None, channels, book, client, fleet_state, DaemonSettings(), capacity,  # type: ignore[arg-type]  # no chain: the channels are in the book
                       receipts, starters)  # fmt: skip
        return loop, capacity

    world = OnFleet(made, book, channels)
    yield world
    await world.loop.aclose()
    for node in cluster.nodes:  # what a dead node left (its bridges): its machine back
        services = Services(client, cluster.node_settings(node, fleet_state))
        for name in set(services.leftovers()["networks"]):
            services.stop(name)
    channels.close()
    book.close()


def pending_row(name: str, kind: str, spec_json: str) -> Rental:
    """A deployment of the renter's on its channel, as the gateway stores it, free of charge."""
    renter = support.RENTER.to_verification_key().payload
    return Rental(name, kind, support.CHANNEL, renter, spec_json, "pending", "", "", "", 0, 0, 0,
                  created_ms=1)  # fmt: skip


def predict(url: str, paid: list[int], value: int) -> int:
    """A paid call of the sample service through the gateway: its score."""
    paid.append(paid[-1] + PRICE)
    answer = httpx.post(f"{url}/endpoints/svc/predict", json={"values": [value]},
                        headers={IOU_HEADER: support.iou(paid[-1]).to_header()})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return int(answer.json()["score"])


async def test_an_endpoint_on_the_fleet_moves_off_a_dead_node_and_the_gateway_follows(
    on_fleet: OnFleet, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster,
) -> None:  # fmt: skip
    """An endpoint deployed with `placement = "ray"`: its replica runs on a node, published on
    the node's address, and answers through the gateway; the daemon restarts and finds it
    there; its node killed, the daemon's loop places it on the other node, the book's upstream
    follows (no replica meanwhile: answered 503, not billed), and the gateway's next calls are
    answered there."""
    cluster.add_node("c")  # the earlier tests left one node alive: two again
    sample = sample_images.sample_service_image(client)
    services = on_fleet.loop.starter("endpoint")
    assert isinstance(services, FleetServices)
    name = support.stored("svc")
    on_fleet.book.add(dataclasses.replace(pending("svc", sample), name=name))
    running = await on_fleet.until(name, lambda d: d is not None and d.state == "running")
    assert running is not None
    (replica,) = services.placed[name].replicas
    assert replica.node is not None and running.upstream == replica.upstream
    first = replica.node
    assert running.upstream.startswith(f"http://{first.address}:")  # the node's address
    paid = [0]
    with support.serving(gateway_app(on_fleet.channels, on_fleet.book)) as url:
        assert predict(url, paid, 1) == 3
        assert replica.group is not None
        remove_placement_group(replica.group)  # as the daemon's end takes its Ray job's groups
        await on_fleet.restart()
        services = on_fleet.loop.starter("endpoint")
        assert isinstance(services, FleetServices)
        await on_fleet.until(name, lambda d: name in services.placed)
        (replica,) = services.placed[name].replicas  # found on its node, held there again
        assert (replica.node, replica.upstream) == (first, running.upstream)
        assert replica.group is not None
        cluster.power_off(first.name, client, fleet_state)
        await on_fleet.until(name, lambda d: d is not None and d.upstream == "")
        header = {IOU_HEADER: support.iou(paid[-1] + PRICE).to_header()}
        refused = httpx.post(f"{url}/endpoints/svc/predict", json={"values": [1]}, headers=header)
        assert refused.status_code == 503, refused.text  # no replica: answered, not charged
        assert "has no replica running now" in refused.json()["error"]
        moved = await on_fleet.until(
            name, lambda d: d is not None and d.upstream not in ("", running.upstream)
        )
        assert replica.node is not None and replica.node.name != first.name
        assert moved is not None and moved.cold_ms > 0  # no replica ran meanwhile: not billed
        assert [predict(url, paid, n) for n in (2, 3)] == [5, 7]
    row = on_fleet.book.get(name)
    assert row is not None and row.requests == 3 and row.served == 3 * PRICE
    there = cluster.node_settings(replica.node.name, fleet_state)
    container = client.containers.get(
        service_container_name(runner_id(there.state_dir), f"{name}-0", 0)
    )
    assert container.logs().decode().count("POST /predict") == 2  # answered on the new node
    on_fleet.book.finish(name, "stopped", "stopped by its renter", 1)
    await on_fleet.until(name, lambda d: name not in on_fleet.loop._live)
    assert Services(client, there).leftovers() == {"containers": [], "networks": []}
    assert on_fleet.capacity.free() == 2


async def test_a_pod_on_the_fleet_is_reached_on_its_node_and_leaves_nothing_there(
    on_fleet: OnFleet, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster, tmp_path: Path,
) -> None:  # fmt: skip
    """A pod deployed on the fleet: its sshd published on its node's address, the renter's
    key logs in there; stopped, its workspace on that node goes once its keep time passed,
    and then its row."""
    key = tmp_path / "renter"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    spec = pod_spec(key, workspace_keep_s=0)
    name = support.stored("lab")
    on_fleet.book.add(pending_row(name, "pod", spec.canonical_json().decode()))
    running = await on_fleet.until(name, lambda d: d is not None and d.state == "running")
    assert running is not None
    pods = on_fleet.loop.starter("pod")
    assert isinstance(pods, FleetPods)
    node = pods.placed[name].replicas[0].node
    assert node is not None and running.upstream.startswith(f"http://{node.address}:")
    done = ssh(key, running.upstream, "echo on > /workspace/note; cat /workspace/note")
    assert done.stdout == "on\n", done.stderr
    on_fleet.book.finish(name, "stopped", "stopped by its renter", 1)
    assert await on_fleet.until(name, lambda d: d is None) is None  # workspace gone: row too
    left = Pods(client, cluster.node_settings(node.name, fleet_state))
    assert left.leftovers() == {"containers": [], "networks": [], "workspaces": []}


async def test_a_channel_job_on_the_fleet_runs_on_a_node_and_its_receipt_is_signed_here(
    on_fleet: OnFleet, busybox: str, fleet: RayPlacement, caplog: pytest.LogCaptureFixture
) -> None:
    """A job paid over a channel goes through the fleet's `run`: placed on a node, its results
    shipped to the daemon's results, where its receipt is signed from the node's metering."""
    name = support.stored("batch")
    spec = parse_channel_job({
        "kind": "job", "price_per_second": 1,
        "job": {"image": busybox, "command": ["sh", "-c", "sleep 1; echo 42 > /out/answer"],
                "max_duration_s": 30, "max_price_lovelace": 30,
                "resources": {"cpu_cores": 1, "memory_mib": 128, "disk_mib": 8}},
    })  # fmt: skip
    on_fleet.book.add(pending_row(name, "job", spec.canonical_json().decode()))
    with caplog.at_level(logging.INFO, logger="unchained.provider"):
        ended = await on_fleet.until(name, lambda d: d is not None and d.state == "stopped")
    assert ended is not None and ended.reason == "job succeeded: exit code 0", ended
    assert re.search(rf"job {job_id(name)} placed on node \w+", caplog.text), caplog.text
    folder = fleet.results_dir / job_id(name)
    assert out_files(folder / "out.tar") == {"answer": "42\n"}
    assert json.loads((folder / RECEIPT_FILE).read_text())["units"] >= 1


async def test_an_endpoint_on_the_fleet_scales_to_zero_and_a_call_cold_starts_it_on_a_node(
    on_fleet: OnFleet, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster,
) -> None:  # fmt: skip
    """`min_replicas: 0` on the fleet, the real gateway in front: its logs route reads the
    replica's output on its node; idle, the gateway's scaler asks the daemon, which stops it
    there (no container on any node) and bills no second at zero; a call then cold-starts it,
    placed by Ray on a node, answered and billed as on a single host (warm seconds only)."""
    sample = sample_images.sample_service_image(client)
    name = support.stored("cold")
    on_fleet.channels.accept(support.iou(AHEAD))  # the renter paid ahead for its seconds
    deployment = pending("cold", sample, price_per_second=PER_SECOND, min_replicas=0,
                         scale_down_after_s=1)  # fmt: skip
    on_fleet.book.add(dataclasses.replace(deployment, name=name))
    await on_fleet.until(name, lambda d: d is not None and d.state == "running")
    services = on_fleet.loop.starter("endpoint")
    assert isinstance(services, FleetServices)
    (replica,) = services.placed[name].replicas
    asks = WarmAsks.in_state_dir(fleet_state.state_dir)
    scaler = Scaler(on_fleet.book, FleetScaling(on_fleet.book, asks, place_timeout_s=3))
    reader = FleetLogs(fleet_state, client)
    app = gateway_app(on_fleet.channels, on_fleet.book, logs=reader, scaler=scaler)
    containers = [
        Services(client, cluster.node_settings(node, fleet_state)) for node in cluster.nodes
    ]
    with support.serving(app) as url, ThreadPoolExecutor(1) as pool:
        assert call(url, 1).json()["score"] == 3
        logs = read_logs(url)
        assert logs.status_code == 200 and "POST /predict" in logs.json()["logs"], logs.text
        assert replica.node is not None
        ray.kill(reader.readers[replica.node.node_id])  # a node not read is said, not left out
        lost = read_logs(url)
        assert f"[node {replica.node.name} could not be read" in lost.json()["logs"], lost.text
        cold = await on_fleet.until(name, lambda d: d is not None and d.scaled_to_zero and not (
            replica.busy or replica.node or any(s.leftovers()["containers"] for s in containers)
        ))  # fmt: skip
        assert cold is not None and replica.group is None  # its room on the node freed
        at = cold.cold_since_ms
        assert on_fleet.book.due_on(support.CHANNEL, at + 60_000) == on_fleet.book.due_on(
            support.CHANNEL, at
        )  # no second billed at zero
        gone = read_logs(url)
        assert "no container of cold on the fleet's nodes now" in gone.json()["logs"]
        answered = pool.submit(call, url, 2)  # a cold start: the daemon's rounds place it
        await on_fleet.until(name, lambda d: answered.done())
        assert answered.result().json()["score"] == 5
    warm = on_fleet.book.get(name)
    assert warm is not None and not warm.scaled_to_zero and warm.cold_ms > 0
    assert replica.node is not None and warm.upstream == replica.upstream
    assert warm.upstream.startswith(f"http://{replica.node.address}:")  # on its node
    assert (warm.requests, warm.served) == (2, 2 * PRICE)
    now = time.time_ns() // 1_000_000
    warm_s = (now - warm.started_ms - warm.cold_ms) // 1000
    assert due_of(warm, now) == 2 * PRICE + PER_SECOND * warm_s
    on_fleet.book.finish(name, "stopped", "stopped by its renter", now)
    await on_fleet.until(name, lambda d: name not in on_fleet.loop._live)
    assert not any(s.leftovers()["containers"] for s in containers)
    assert on_fleet.capacity.free() == 2


def test_scaling_down_keeps_the_replicas_the_gateway_kept_and_a_failed_ask_starts_none() -> None:
    """The daemon's choice (`target`) matches the gateway's: the first replicas of the book's
    upstream (those that run, by index) stay warm; after a start for the last ask failed,
    none is wanted again until a newer ask."""
    replicas = [Replica(0), Replica(1, upstream="http://n:1"), Replica(2, upstream="http://n:2")]
    target(replicas, 1, ask=4, may_start=True)
    assert [(r.warm, r.upstream) for r in replicas] == [(False, ""), (True, "http://n:1"),
                                                         (False, "")]  # fmt: skip
    target(replicas, 3, ask=5, may_start=False)
    assert [r.warm for r in replicas] == [False, True, False]
    target(replicas, 2, ask=6, may_start=True)
    assert [(r.warm, r.for_ask) for r in replicas] == [(True, 6), (True, 0), (False, 0)]


def read_logs(url: str) -> httpx.Response:
    """The renter's signed ask for its endpoint's logs (a node's first answer starts its
    reader there: a worker process)."""
    return httpx.post(f"{url}/deployments/cold/logs", json=signed("logs", "cold"), timeout=WAIT_S)


def call(url: str, value: int) -> httpx.Response:
    """A call of the sample service through the gateway, its IOU above what was paid ahead."""
    iou = support.iou(AHEAD + value * PRICE).to_header()
    answer = httpx.post(f"{url}/endpoints/cold/predict", json={"values": [value]},
                        headers={IOU_HEADER: iou}, timeout=WAIT_S)  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer


def test_the_last_node_killed_fails_the_job_with_nothing_metered(
    fleet: RayPlacement, busybox: str, client: docker.DockerClient, fleet_state: RunnerSettings,
    cluster: RayCluster,
) -> None:  # fmt: skip
    future, _ = running(fleet, "fleet_lost", counter(busybox))
    wait_for("fleet_lost to start", lambda: (a := fleet.attempts.get("fleet_lost")) and a.started)
    last = fleet.attempts["fleet_lost"].nodes[0]
    cluster.power_off(last, client, fleet_state)
    result = future.result(timeout=WAIT_S)
    assert result.status == "error" and result.record is None  # the daemon signs 0 units
    assert result.error is not None and "no node of the fleet had room" in result.error
    assert fleet.nodes() == []
    assert_no_leftovers(cluster.reap(last, client, fleet_state))
