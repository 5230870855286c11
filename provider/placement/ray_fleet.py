"""The fleet placement: one daemon over the nodes of a Ray cluster.

Each machine joins with `ray start --address=HEAD`, advertising its CPUs, GPUs and memory as
Ray resources and its name as the label `unchained-node`. For a job the daemon asks Ray for a
placement group of one bundle (the job's cores, memory and GPUs, packed on one node: a
multi-GPU job never straddles machines); where Ray puts it, that node's actor (`node.py`,
pinned to its node, owning its engine) runs the job in the hardened container and meters it;
the daemon polls it for the log, checkpoints and the result, which lands in the daemon's
results directory as a single host's would, so the receipt is signed from what the node
metered. The offer is the nodes added up (`inventory`).

A node that dies mid-job (Ray's health checks mark it dead, about 15 s with Ray's defaults):
the job is placed again, on a node that is alive, and starts from its last checkpoint (a copy
of its /out taken while it ran) with the time its earlier runs left; only the run that ends is
billed. No node with room within `ray_place_timeout_s`: the job fails without a metering record
(the daemon signs a zero-unit receipt)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from offchain.core.errors import UnchainedError
from offchain.protocol.job.gpu_slices import GpuSlice
from offchain.protocol.job.jobspec import Bundle, JobSpec
from offchain.protocol.job.offer import OfferedImage
from provider.config import MIB, DaemonSettings, RunnerSettings
from provider.gpu.inventory import GpuInfo, GpuInventory, HostInventory
from provider.placement.node import Finished, NodeRunner
from provider.sandbox.runner import LogSink, RunResult, Stop

log = logging.getLogger("unchained.provider")
NODE_LABEL = "unchained-node"
POLL_S = 0.2  # how often a running job's node is asked for its progress
CALL_S = 10.0  # one answer from a node; longer: its node is looked at in the cluster
IMAGES_FRESH_S = 10.0
CONNECT_S = 10.0  # the head's GCS port taking a connection
MAX_JOBS_A_NODE = 256
NodeActor = ray.remote(NodeRunner)


class NodeDied(UnchainedError):
    """The node running a job is gone (the cluster marked it dead)."""


class FleetUnreachable(UnchainedError):
    """The cluster's head does not answer at `ray_address`."""


class NoRoom(UnchainedError):
    """No node has room for the job within the placement timeout."""


@dataclasses.dataclass(frozen=True)
class Node:
    node_id: str
    name: str
    resources: dict[str, float]
    address: str  # its cluster address: where its rentals' ports are published


@dataclasses.dataclass
class Attempt:
    """What a job's runs on the fleet have left for the next one."""

    left_ms: int
    started: bool = False
    checkpoint: bytes | None = None
    nodes: list[str] = dataclasses.field(default_factory=list)


def join(address: str) -> None:
    """Join the cluster at `address` as a driver (the daemon, or the gateway reading logs).
    FleetUnreachable when its head does not take a connection: Ray itself would retry for
    minutes without a word."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
    except (OSError, ValueError) as exc:
        raise FleetUnreachable(f"the Ray head at {address} does not answer: {exc}") from exc
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)


def alive_nodes() -> list[Node]:
    """The nodes alive now that can run a job (a head advertising no CPU runs none), named by
    their `unchained-node` label (else their id)."""
    alive = [n for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    return [
        Node(n["NodeID"], n.get("Labels", {}).get(NODE_LABEL) or n["NodeID"][:12],
             n["Resources"], n["NodeManagerAddress"])
        for n in alive if n["Resources"].get("CPU", 0) >= 1
    ]  # fmt: skip


def pinned_to(node: Node) -> NodeAffinitySchedulingStrategy:
    """An actor's place: on `node`, nowhere else."""
    return NodeAffinitySchedulingStrategy(node.node_id, soft=False)


class RayPlacement:
    def __init__(self, daemon: DaemonSettings, settings: RunnerSettings) -> None:
        self.settings = settings
        self.results_dir = settings.state_dir / "results"
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self.place_timeout_s = daemon.ray_place_timeout_s
        self.checkpoint_every_s = daemon.ray_checkpoint_every_s
        self.actors: dict[str, Any] = {}  # node id -> its actor
        self.placed: dict[str, str] = {}  # job -> the node id it runs on
        self.stopped: set[str] = set()
        self.attempts: dict[str, Attempt] = {}  # the jobs running, as their runs left them
        self.lock = threading.Lock()
        self._images: tuple[float, list[OfferedImage]] = (0.0, [])

    @classmethod
    def connect(cls, daemon: DaemonSettings, settings: RunnerSettings) -> RayPlacement:
        """Join the cluster at `ray_address` as its driver (the daemon's own process)."""
        join(daemon.ray_address or "")
        return cls(daemon, settings)

    # -- the cluster ---------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        return alive_nodes()

    def alive(self, node_id: str) -> bool:
        return any(node.node_id == node_id for node in self.nodes())

    def actor(self, node: Node) -> Any:
        """The node's actor, started on first use and pinned there (it takes no resources:
        the placement group holds the job's)."""
        with self.lock:
            if node.node_id not in self.actors:
                options = NodeActor.options(
                    scheduling_strategy=pinned_to(node), num_cpus=0,
                    max_concurrency=MAX_JOBS_A_NODE,
                )  # fmt: skip
                self.actors[node.node_id] = options.remote(
                    node.name, self.settings, self.checkpoint_every_s, node.address
                )
            return self.actors[node.node_id]

    def inventory(self) -> HostInventory:
        """The fleet as one machine: Ray's CPUs and memory of every node, their disks, and
        as many of each node's GPUs as it advertises to Ray."""
        return fleet_inventory(self._ask_all("inventory"))

    def images(self) -> list[OfferedImage]:
        """The images every node holds (a job may land on any), asked at most every 10 s."""
        at, known = self._images
        if time.monotonic() - at < IMAGES_FRESH_S:
            return known
        held = [images for _, images in self._ask_all("images")]
        common = set.intersection(*(set(images) for images in held)) if held else set()
        self._images = time.monotonic(), sorted(common, key=lambda image: image.reference)
        return self._images[1]

    def _ask_all(self, method: str) -> list[tuple[Node, Any]]:
        """Every node's answer to `method`, asked of all at once (a node that dies meanwhile
        is left out)."""
        calls = [(node, getattr(self.actor(node), method).remote()) for node in self.nodes()]
        answers = []
        for node, call in calls:
            with contextlib.suppress(NodeDied):
                answers.append((node, self.answer(node, call)))
        return answers

    # -- a job -----------------------------------------------------------------------------

    def run(
        self,
        job_id: str,
        spec: JobSpec,
        gpu_uuids: list[str] | None = None,
        on_log: LogSink | None = None,
        escrow: str | None = None,
        gpu_slice: GpuSlice | None = None,
        on_start: Callable[[], None] | None = None,
        pull_auth: dict[str, str] | None = None,
    ) -> RunResult:
        """Place the job, run it on its node, and again elsewhere if that node dies. The GPUs
        are the node's to choose (Ray counted them): only how many the slot holds counts."""
        if gpu_slice is not None:
            return self._failed(job_id, escrow, "GPU slices run on single hosts, not a fleet")
        attempt = self.attempts[job_id] = Attempt(left_ms=spec.max_duration_s * 1000)
        try:
            while True:
                try:
                    group, node = self.place(spec.resources)
                except NoRoom as exc:
                    tried = ", ".join(attempt.nodes) or "none"
                    return self._failed(job_id, escrow, f"{exc} (ran on: {tried})")
                began = time.monotonic()
                try:
                    return self._run_on(node, job_id, spec, len(gpu_uuids or []), attempt,
                                        on_log, escrow, on_start, pull_auth)  # fmt: skip
                except RayTaskError as exc:  # the node's actor failed at its own work
                    return self._failed(job_id, escrow, f"node {node.name}: {exc}")
                except NodeDied as exc:
                    if attempt.started:
                        attempt.left_ms -= int((time.monotonic() - began) * 1000)
                    since = "its checkpoint" if attempt.checkpoint else "the start"
                    log.warning("job %s: %s; placed again from %s", job_id, exc, since)
                    if job_id in self.stopped or attempt.left_ms < 1000:
                        why = "stopped" if job_id in self.stopped else "its time ran out"
                        return self._failed(job_id, escrow, f"{exc}; not placed again: {why}")
                finally:
                    remove_placement_group(group)
                    self.placed.pop(job_id, None)
        finally:
            self.attempts.pop(job_id, None)
            self.stopped.discard(job_id)

    def place(self, wanted: Bundle, on: Node | None = None) -> tuple[PlacementGroup, Node]:
        """A placement group holding a job's or a rental's bundle on one node (`on`, by its
        label, when given), and that node; NoRoom when none has room within the placement
        timeout."""
        bundle = {"CPU": float(wanted.cpu_cores), "memory": float(wanted.memory_mib * MIB)}
        if wanted.gpus:
            bundle["GPU"] = float(wanted.gpus)
        pinned = [{NODE_LABEL: on.name}] if on is not None else None
        group = placement_group([bundle], strategy="STRICT_PACK", bundle_label_selector=pinned)
        try:
            ray.get(group.ready(), timeout=self.place_timeout_s)
        except GetTimeoutError:
            remove_placement_group(group)
            raise NoRoom(f"no node of the fleet had room for {bundle} within "
                         f"{self.place_timeout_s} s") from None  # fmt: skip
        node_id = placement_group_table(group)["bundles_to_node_id"][0]
        node = next((node for node in self.nodes() if node.node_id == node_id), None)
        if node is None:  # it died between the two answers
            remove_placement_group(group)
            return self.place(wanted, on)
        return group, node

    def _run_on(
        self,
        node: Node,
        job_id: str,
        spec: JobSpec,
        gpus: int,
        attempt: Attempt,
        on_log: LogSink | None,
        escrow: str | None,
        on_start: Callable[[], None] | None,
        pull_auth: dict[str, str] | None,
    ) -> RunResult:
        actor = self.actor(node)
        attempt.nodes.append(node.name)
        self.placed[job_id] = node.node_id
        log.info("job %s placed on node %s", job_id, node.name)
        limit_s = attempt.left_ms // 1000
        start = actor.start.remote(job_id, spec, gpus, escrow, pull_auth, attempt.checkpoint,
                                   limit_s)  # fmt: skip
        if self.answer(node, start):
            began(attempt, on_start)
        while True:
            progress = self.answer(node, actor.poll.remote(job_id))
            if progress.log and on_log is not None:
                on_log(progress.log)
            if progress.started:
                began(attempt, on_start)
            if progress.checkpoint is not None:
                attempt.checkpoint = progress.checkpoint
            if progress.finished is not None:
                return progress.finished.land(self.results_dir)
            time.sleep(POLL_S)

    def answer(self, node: Node, call: Any) -> Any:
        """The node's answer to `call`; NodeDied once the cluster says the node is dead (an
        answer that does not come is waited for as long as the node lives)."""
        while True:
            try:
                return ray.get(call, timeout=CALL_S)
            except ActorDiedError as exc:
                with self.lock:
                    self.actors.pop(node.node_id, None)
                raise NodeDied(f"node {node.name}'s actor died: {exc}") from exc
            except (RayActorError, GetTimeoutError) as exc:  # unreachable for now
                if not self.alive(node.node_id):
                    with self.lock:
                        self.actors.pop(node.node_id, None)
                    raise NodeDied(f"node {node.name} is dead") from exc
                time.sleep(POLL_S)

    def _failed(self, job_id: str, escrow: str | None, reason: str) -> RunResult:
        """A run that did not happen (no metering record: the daemon releases the escrow)."""
        failed = RunResult(job_id=job_id, status="error", error=reason, escrow=escrow)
        return Finished(failed.model_dump_json(), {}).land(self.results_dir)

    def stop(self, job_id: str, why: Stop = "cancelled") -> None:
        """Stop the job on its node, at its renter's request or because the provider stops;
        it is not placed again."""
        self.stopped.add(job_id)
        node_id = self.placed.get(job_id)
        actor = self.actors.get(node_id) if node_id else None
        if actor is not None:
            try:
                ray.get(actor.stop.remote(job_id, why), timeout=CALL_S)
            except (RayActorError, GetTimeoutError) as exc:
                log.warning("job %s: its node did not take the stop: %r", job_id, exc)

    def stop_all(self) -> list[str]:
        """Stop every job placed now, because the provider stops; their ids."""
        running = sorted(self.placed)
        for job_id in running:
            self.stop(job_id, "stopped")
        return running

    def recover(self, on_log: LogSink | None = None) -> list[RunResult]:
        """Every node's leftovers of the last daemon: finished there, shipped here."""
        results: list[RunResult] = []
        for node in self.nodes():
            finished = ray.get(self.actor(node).recover.remote())
            results.extend(item.land(self.results_dir) for item in finished)
        return results


def began(attempt: Attempt, on_start: Callable[[], None] | None) -> None:
    """The job's container started: `on_start` is told once, whatever its runs."""
    if not attempt.started:
        attempt.started = True
        if on_start is not None:
            on_start()


def fleet_inventory(parts: list[tuple[Node, HostInventory]]) -> HostInventory:
    """The nodes added up as one machine. A node's CPUs, memory and GPU count are what it
    advertises to Ray (what Ray places against), its disk and GPU models its own."""
    gpus: list[GpuInfo] = []
    for node, inventory in parts:
        gpus.extend(inventory.gpu.gpus[: int(node.resources.get("GPU", 0))])
    lent = [inventory.gpu for node, inventory in parts if node.resources.get("GPU", 0) >= 1]
    with_gpus = [gpu for gpu in lent if gpu.gpus]
    first = with_gpus[0] if with_gpus else GpuInventory(note="no node advertises a GPU")
    return HostInventory(
        cpu_cores=sum(int(node.resources.get("CPU", 0)) for node, _ in parts),
        memory_bytes=sum(int(node.resources.get("memory", 0)) for node, _ in parts),
        disk_total_bytes=sum(inventory.disk_total_bytes for _, inventory in parts),
        disk_free_bytes=sum(inventory.disk_free_bytes for _, inventory in parts),
        gpu=GpuInventory(
            tuple(dataclasses.replace(gpu, index=i) for i, gpu in enumerate(gpus)),
            first.driver_version, first.cuda_version, "" if gpus else first.note,
        ),
    )  # fmt: skip
