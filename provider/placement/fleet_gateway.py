"""The gateway's side of a fleet (`[daemon] placement = "ray"`): the logs of a rental read on
the nodes that run it, and scaling asked of the daemon.

The gateway is a process of its own beside the daemon. For logs it joins the cluster as a
driver too, with an actor of its own on each node (`NodeLogs`) that only reads that node's
engine: it starts, stops and holds nothing, keeps no state directory and takes no resources,
so the daemon's node actors (their recovery, their GPU bookkeeping) never see it. Each alive
node is asked for the containers of the rental's replicas (`<name>-<index>` for an endpoint,
the pod's own name); a node that does not answer is said in the text, never left out silently.

Scaling (`FleetScaling`, the scaler's `Scaling`): the gateway decides when, as on a single
host (it sees the requests), and asks the daemon (`warm_asks.py`), which owns the placement
groups, the nodes' GPUs, the moves off dead nodes and the book's upstream of fleet rentals; a
cold start waits for the daemon to give the book a warm upstream. One owner keeps one truth: a
second driver placing and starting replicas would race the daemon's moves and restarts."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import docker
import ray
from ray.exceptions import GetTimeoutError, RayError

from offchain.core.errors import UnchainedError
from offchain.protocol.job.jobspec import ServiceSpec
from provider.config import ProviderConfig, RunnerSettings
from provider.placement.fleet_rentals import replica_name
from provider.placement.node import settings_of
from provider.placement.ray_fleet import Node, alive_nodes, join, pinned_to
from provider.placement.warm_asks import WarmAsks
from provider.rentals.book import ENDPOINT, POD, RUNNING, Rental, RentalBook
from provider.rentals.pods import Pods
from provider.rentals.services import HEALTH_TIMEOUT_S, Services
from provider.rentals.starters import engine_logs

ASK_POLL_S = 0.1  # how often a cold start looks for the daemon's answer in the book
DAEMON_ROUNDS_S = 5.0  # the daemon's rounds (0.5 s each) that see an ask and publish a start
READ_S = 30.0  # a node's reader answering (its first answer includes its worker's start)


class FleetColdStartFailed(UnchainedError):
    """The daemon did not warm the replicas asked for: why."""


class NodeLogs:
    """The gateway's reader on one node: the output of the rentals the daemon's node actor
    started there, read from the node's engine."""

    def __init__(self, node: str, settings: RunnerSettings, address: str) -> None:
        client = docker.from_env()
        own = settings_of(settings, node)
        self.kinds: dict[str, Services | Pods] = {
            ENDPOINT: Services(client, own, host=address), POD: Pods(client, own, host=address),
        }  # fmt: skip

    def logs(self, kind: str, names: list[str], lines: int) -> str:
        """The last `lines` lines of each of `names` that has a container here."""
        rentals = self.kinds[kind]
        here = set(rentals.leftovers()["containers"])
        return "".join(rentals.logs(name, lines) for name in names if name in here)


NodeLogsActor = ray.remote(NodeLogs)


class FleetLogs:
    """The gateway's `logs`: an endpoint's or a pod's from the nodes, a channel job's (its
    results come to the daemon's machine) from this machine."""

    def __init__(self, settings: RunnerSettings, client: docker.DockerClient) -> None:
        self.settings = settings
        self.here = engine_logs(client, settings)
        self.readers: dict[str, Any] = {}  # node id -> its NodeLogs actor
        self.lock = threading.Lock()

    def __call__(self, deployment: Rental, lines: int) -> str:
        if deployment.kind not in (ENDPOINT, POD):
            return self.here(deployment, lines)
        names = on_nodes(deployment)
        calls = [
            (node, self._reader(node).logs.remote(deployment.kind, names, lines))
            for node in alive_nodes()
        ]
        text = []
        for node, call in calls:
            try:
                text.append(ray.get(call, timeout=READ_S))
            except GetTimeoutError:
                text.append(f"[node {node.name} did not answer within {READ_S:g} s]\n")
            except RayError as exc:
                with self.lock:
                    self.readers.pop(node.node_id, None)  # a new reader at the next ask
                text.append(f"[node {node.name} could not be read: {type(exc).__name__}]\n")
        if not any(text):
            return f"[no container of {deployment.public_name} on the fleet's nodes now]\n"
        return "".join(text)

    def _reader(self, node: Node) -> Any:
        with self.lock:
            if node.node_id not in self.readers:
                options = NodeLogsActor.options(scheduling_strategy=pinned_to(node), num_cpus=0)
                self.readers[node.node_id] = options.remote(node.name, self.settings, node.address)
            return self.readers[node.node_id]


def on_nodes(deployment: Rental) -> list[str]:
    """The names `deployment`'s containers have on their nodes."""
    if deployment.kind == POD:
        return [deployment.name]
    replicas = int(json.loads(deployment.spec_json).get("replicas", 1))
    return [replica_name(deployment.name, index) for index in range(replicas)]


class FleetScaling:
    """The scaler's `Scaling` on a fleet: the daemon asked, the book awaited."""

    def __init__(self, endpoints: RentalBook, asks: WarmAsks, place_timeout_s: int) -> None:
        self.endpoints = endpoints
        self.asks = asks
        self.place_timeout_s = place_timeout_s

    async def up(self, name: str, spec: ServiceSpec, count: int) -> None:
        """Ask for `count` warm, then wait for the daemon to place and start them and put them
        in the book (billed again from then); FleetColdStartFailed when a start for this ask
        failed, the endpoint stopped, or nothing came within the time a start may take."""
        ask = self.asks.want(name, count)
        health_s = min(getattr(spec, "start_timeout_s", HEALTH_TIMEOUT_S), HEALTH_TIMEOUT_S)
        within_s = self.place_timeout_s + health_s + DAEMON_ROUNDS_S
        deadline = time.monotonic() + within_s
        while True:
            row = self.endpoints.get(name)
            if row is None or row.state != RUNNING:
                raise FleetColdStartFailed(f"it is {row.state if row else 'gone'}")
            if len(row.upstreams) >= count:
                return
            asked = self.asks.get(name)
            if asked is not None and asked.failed_ask >= ask:
                raise FleetColdStartFailed(asked.failed)
            if time.monotonic() > deadline:
                raise FleetColdStartFailed(
                    f"the daemon started no replica within {within_s:g} s (is it running?)"
                )
            await asyncio.sleep(ASK_POLL_S)

    def down(self, name: str, spec: ServiceSpec, kept: str) -> Awaitable[None]:
        """The daemon asked first, then the book: the daemon keeps the same first replicas
        (`fleet_rentals.target`) and stops the others on their nodes at its next round."""
        self.asks.want(name, spec.warm_replicas)
        self.endpoints.set_warm(name, kept, time.time_ns() // 1_000_000)
        return asyncio.sleep(0)


def fleet_gateway(
    config: ProviderConfig, endpoints: RentalBook, client: docker.DockerClient
) -> tuple[Callable[[Rental, int], str], FleetScaling]:
    """The gateway joined to the daemon's cluster: its logs reader and its scaling."""
    join(config.daemon.ray_address or "")
    asks = WarmAsks.in_state_dir(config.runner.state_dir)
    scaling = FleetScaling(endpoints, asks, config.daemon.ray_place_timeout_s)
    return FleetLogs(config.runner, client), scaling
