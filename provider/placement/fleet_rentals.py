"""Rentals on the fleet: the Starters the daemon's deployments loop (`provider.daemon.rentals`)
uses when `[daemon] placement = "ray"` (`rental_starters` in `interface.py` chooses them).

Each replica of an endpoint, and each pod, gets a placement group of one bundle (its cores,
memory and GPUs, on one node) and is started by that node's actor (`node.py`) with the same
Starter a single host uses (`Services`, `Pods`: the hardened container, its own fenced bridge),
as a service of one replica named `<name>-<replica>` (two replicas on one node never share a
container name). Its port is published on the node's cluster address, not 127.0.0.1: the
gateway on the daemon's machine reaches it there, so that network must be private to the
provider (docs/provider-guide.md, "A fleet on Ray"). The book's upstream lists one URL per
replica, each on its node.

A node that dies (Ray marks it dead): the daemon's next round asks `upstream`, which leaves
the replicas of dead nodes out (the book's upstream follows; with none left the deployment
counts as scaled to zero, `RentalBook.set_warm`, and is not billed per second) and places
each again on a node with room, in the background, round after round until one has room.
A pod placed again starts with a fresh /workspace: its volume was on the node that died. A
restarted daemon finds the rentals its predecessor placed on their nodes (`_adopt`) and moves
them as its own.
Channel jobs go through the fleet's `run` (`ChannelJobs` given the placement): placed, and
restarted from their last /out copy, as escrowed jobs are."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import threading
from collections.abc import Callable

import docker
from ray.exceptions import RayTaskError
from ray.util.placement_group import PlacementGroup, remove_placement_group

from offchain.core.errors import UnchainedError
from offchain.protocol.job.jobspec import Bundle, JobSpecError, parse_podspec, parse_servicespec
from provider.config import RunnerSettings
from provider.placement.ray_fleet import Node, NodeDied, NoRoom, RayPlacement
from provider.rentals.book import ENDPOINT, JOB, POD, Rental, Started, Starter
from provider.rentals.jobs import ChannelJobs
from provider.rentals.starters import starter_of

log = logging.getLogger("unchained.provider")


class FleetRentalError(UnchainedError):
    """A rental could not be placed or started on the fleet; nothing of it is left."""


@dataclasses.dataclass
class Replica:
    """One container of a rental: where it runs (no node while it is placed again)."""

    index: int
    group: PlacementGroup | None = None
    node: Node | None = None
    upstream: str = ""  # "" while it does not run
    moving: bool = False  # being placed again, on a thread of its own


@dataclasses.dataclass
class Placed:
    deployment: Rental
    bundle: Bundle
    replicas: list[Replica]
    image: str = ""


class FleetRentals:
    """The fleet's Starter of one kind of rental (`FleetServices`, `FleetPods`)."""

    kind: str

    def __init__(self, fleet: RayPlacement) -> None:
        self.fleet = fleet
        self.placed: dict[str, Placed] = {}  # the rentals this daemon started, by name
        self.lock = threading.Lock()

    def shape(self, deployment: Rental) -> tuple[Bundle, int]:
        """A replica's bundle and how many replicas run."""
        raise NotImplementedError

    def on_node(self, deployment: Rental, replica: int) -> Rental:
        """The deployment as replica `replica`'s node starts it."""
        return deployment

    def mine(self, name: str, found: str) -> bool:
        """Whether `found`, a rental's name on a node, is one of `name`'s replicas."""
        return found == name

    def start_deployment(self, deployment: Rental, gpu_uuids: list[str]) -> Started:
        """Place and start every replica, answering once each is healthy (the slots' GPUs
        are the daemon's count: each node picks its own); FleetRentalError saying why not."""
        bundle, count = self.shape(deployment)
        rental = Placed(deployment, bundle, [Replica(index) for index in range(count)])
        with self.lock:
            self.placed[deployment.name] = rental
        try:
            for replica in rental.replicas:
                self._run(rental, replica)
        except BaseException:
            self.stop(deployment.name)
            raise
        return Started(upstream_of(rental), rental.image)

    def _run(self, rental: Placed, replica: Replica) -> None:
        """Place `replica` and start it on its node; FleetRentalError (its group removed)."""
        name = rental.deployment.name
        try:
            group, node = self.fleet.place(rental.bundle)
        except NoRoom as exc:
            raise FleetRentalError(f"{self.kind} {name}: {exc}") from exc
        actor = self.fleet.actor(node)
        on_node = self.on_node(rental.deployment, replica.index)
        try:
            started = self.fleet.answer(
                node, actor.start_rental.remote(on_node, rental.bundle.gpus)
            )
        except (RayTaskError, NodeDied) as exc:
            remove_placement_group(group)
            why = exc.cause if isinstance(exc, RayTaskError) else exc
            raise FleetRentalError(f"{self.kind} {name} on node {node.name}: {why}") from exc
        replica.group, replica.node, replica.upstream = group, node, started.upstream
        rental.image = started.image_digest
        log.info("%s %s replica %d placed on node %s: %s", self.kind, name, replica.index,
                 node.name, started.upstream)  # fmt: skip

    def upstream(self, deployment: Rental) -> str | None:
        """Where `deployment`'s replicas answer now, for the book ("" while none does): a
        replica whose node died is left out and placed again on a thread of its own. A rental
        this daemon did not start (its predecessor's) is found on its nodes first; None for
        one whose spec cannot be read (the book's upstream stands)."""
        rental = self.placed.get(deployment.name)
        if rental is None:
            try:
                rental = self._adopt(deployment)
            except FleetRentalError:
                return None
        alive = {node.node_id for node in self.fleet.nodes()}
        for replica in rental.replicas:
            with self.lock:
                lost = replica.node is None or replica.node.node_id not in alive
                if replica.moving or not lost:
                    continue
                replica.moving, replica.upstream = True, ""
            threading.Thread(target=self._move, args=(rental, replica), daemon=True).start()
        return upstream_of(rental)

    def _adopt(self, deployment: Rental) -> Placed:
        """The replicas a previous daemon started, found on the nodes that run them, each
        with a placement group on its node again (its predecessor's went with it); one found
        nowhere, or not running, is placed again by `upstream`."""
        bundle, count = self.shape(deployment)
        rental = Placed(deployment, bundle, [Replica(index) for index in range(count)])
        for node in self.fleet.nodes():
            actor = self.fleet.actor(node)
            for replica in rental.replicas:
                on_node = self.on_node(deployment, replica.index)
                try:
                    where = self.fleet.answer(node, actor.rental_upstream.remote(on_node))
                except RayTaskError as exc:  # its container is here but does not answer
                    log.warning("%s %s: %s", self.kind, on_node.name, exc.cause)
                    with contextlib.suppress(NodeDied):
                        self.fleet.answer(node, actor.stop_rental.remote(self.kind, [on_node.name]))
                    continue
                except NodeDied:
                    break
                if where:
                    replica.node, replica.upstream = node, where
                    with contextlib.suppress(NoRoom):  # room taken meanwhile: it runs unheld
                        replica.group, _ = self.fleet.place(bundle, on=node)
        found = [replica.node.name if replica.node else None for replica in rental.replicas]
        log.info("%s %s found on nodes %s", self.kind, deployment.name, found)
        with self.lock:
            return self.placed.setdefault(deployment.name, rental)

    def _move(self, rental: Placed, replica: Replica) -> None:
        """`replica`'s node died: placed again where there is room (else tried again at the
        daemon's next round); a rental stopped meanwhile has what this started removed."""
        name = rental.deployment.name
        lost = replica.node.name if replica.node else "none"
        if replica.group is not None:
            remove_placement_group(replica.group)  # else Ray would place it again by itself
        replica.group, replica.node = None, None
        log.warning("%s %s replica %d: node %s is gone, placed again", self.kind, name,
                    replica.index, lost)  # fmt: skip
        try:
            self._run(rental, replica)
        except UnchainedError as exc:
            log.warning("%s %s replica %d not placed yet: %s", self.kind, name, replica.index,
                        exc)  # fmt: skip
        finally:
            with self.lock:
                replica.moving = False
                stopped = self.placed.get(name) is not rental
            if stopped:
                self._remove(rental, replica)

    def stop(self, name: str) -> None:
        """Remove `name`'s replicas from every node that runs one (after a daemon's restart
        too: the nodes are asked) and free their placement groups."""
        with self.lock:
            rental = self.placed.pop(name, None)
        for node in self.fleet.nodes():
            actor = self.fleet.actor(node)
            try:
                here = self.fleet.answer(node, actor.rental_names.remote(self.kind))
                mine = [found for found in here if self.mine(name, found)]
                if mine:
                    self.fleet.answer(node, actor.stop_rental.remote(self.kind, mine))
            except NodeDied:  # its containers went with it
                continue
        for replica in rental.replicas if rental else []:
            if replica.group is not None:
                remove_placement_group(replica.group)

    def _remove(self, rental: Placed, replica: Replica) -> None:
        if replica.node is not None:
            names = [self.on_node(rental.deployment, replica.index).name]
            actor = self.fleet.actor(replica.node)
            with contextlib.suppress(NodeDied):  # its containers went with it
                self.fleet.answer(replica.node, actor.stop_rental.remote(self.kind, names))
        if replica.group is not None:
            remove_placement_group(replica.group)

    def logs(self, name: str, lines: int) -> str:
        """The last `lines` lines of each of `name`'s replicas, from their nodes."""
        rental = self.placed.get(name)
        if rental is None:
            return ""
        text = []
        for replica in rental.replicas:
            if replica.node is not None:
                on_node = self.on_node(rental.deployment, replica.index).name
                call = self.fleet.actor(replica.node).rental_logs.remote(self.kind, on_node, lines)
                with contextlib.suppress(NodeDied):
                    text.append(self.fleet.answer(replica.node, call))
        return "".join(text)


class FleetServices(FleetRentals):
    """Endpoints on the fleet: a placement group and a one-replica service per replica."""

    kind = ENDPOINT

    def shape(self, deployment: Rental) -> tuple[Bundle, int]:
        try:
            spec = parse_servicespec(json.loads(deployment.spec_json))
        except (ValueError, JobSpecError) as exc:
            raise FleetRentalError(f"endpoint {deployment.name}: its spec: {exc}") from exc
        if spec.warm_replicas < spec.replicas:
            raise FleetRentalError(
                "an endpoint that scales with its requests (min_replicas below replicas) runs "
                "on a single host, not a fleet"
            )
        return spec.resources, spec.replicas

    def on_node(self, deployment: Rental, replica: int) -> Rental:
        spec = json.loads(deployment.spec_json)
        spec["replicas"] = 1
        return dataclasses.replace(
            deployment, name=f"{deployment.name}-{replica}", spec_json=json.dumps(spec)
        )

    def mine(self, name: str, found: str) -> bool:
        return re.fullmatch(re.escape(name) + r"-\d+", found) is not None


class FleetPods(FleetRentals):
    """Pods on the fleet: its /workspace on its node's engine."""

    kind = POD

    def shape(self, deployment: Rental) -> tuple[Bundle, int]:
        try:
            return parse_podspec(json.loads(deployment.spec_json)).resources, 1
        except (ValueError, JobSpecError) as exc:
            raise FleetRentalError(f"pod {deployment.name}: its spec: {exc}") from exc

    def forget(self, deployment: Rental, now_ms: int) -> bool:
        """Once its workspace's keep time passed: removed on every node that is alive (one
        that dies meanwhile took it along)."""
        gone = []
        for node in self.fleet.nodes():
            with contextlib.suppress(NodeDied):
                call = self.fleet.actor(node).forget_pod.remote(deployment, now_ms)
                gone.append(self.fleet.answer(node, call))
        return all(gone)


def upstream_of(rental: Placed) -> str:
    return ",".join(replica.upstream for replica in rental.replicas if replica.upstream)


def fleet_starters(
    fleet: RayPlacement, client: docker.DockerClient, settings: RunnerSettings
) -> Callable[[str], Starter]:
    """The Starter of each kind on the fleet: endpoints and pods on its nodes, channel jobs
    through its `run`."""
    fleet_kinds: dict[str, type[FleetRentals]] = {ENDPOINT: FleetServices, POD: FleetPods}

    def starter(kind: str) -> Starter:
        if kind in fleet_kinds:
            return fleet_kinds[kind](fleet)
        if kind == JOB:
            return ChannelJobs(client, settings, fleet)
        return starter_of(kind, client, settings)  # KeyError naming the kinds run here

    return starter
