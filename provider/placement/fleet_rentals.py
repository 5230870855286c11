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
restarted from their last /out copy, as escrowed jobs are.

An endpoint that scales with its requests (`min_replicas` below `replicas`) is scaled by the
daemon, at the gateway's ask (`warm_asks.py`: the gateway sees the requests, the daemon owns
the placement): each round `upstream` reads how many replicas the gateway wants warm; one above
that is taken out of the upstream and then stopped on its node, its placement group freed (the
daemon's slot stays held, as on a single host); one wanted again is placed by Ray (a new
placement group) and started on its node as at the deploy, and the book's upstream gains it
once it is healthy. A start that fails is told to the gateway's waiter (`WarmAsks.failed`)
and tried again only for a newer ask."""

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
from provider.gateway.scaler import scaling_spec
from provider.placement.ray_fleet import Node, NodeDied, NoRoom, RayPlacement
from provider.placement.warm_asks import WarmAsks
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
    busy: bool = False  # being placed (again) or stopped, on a thread of its own
    warm: bool = True  # to run: False once the gateway scaled it down
    for_ask: int = 0  # the gateway's ask it was wanted warm for (`warm_asks.py`; 0: the deploy)


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
        """Where `deployment`'s warm replicas answer now, for the book ("" while none does):
        a replica whose node died is left out and placed again, one the gateway wants warm
        (again) placed and started, one it scaled down stopped, each on a thread of its own.
        A rental this daemon did not start (its predecessor's) is found on its nodes first;
        None for one whose spec cannot be read (the book's upstream stands)."""
        rental = self.placed.get(deployment.name)
        if rental is None:
            try:
                rental = self._adopt(deployment)
            except FleetRentalError:
                return None
        alive = {node.node_id for node in self.fleet.nodes()}
        warm, ask, may_start = self.warm_wanted(rental)
        work = []
        with self.lock:
            target(rental.replicas, warm, ask, may_start)
            for replica in rental.replicas:
                lost = replica.node is None or replica.node.node_id not in alive
                held = replica.node is not None or replica.group is not None
                if replica.busy or not (lost if replica.warm else held):
                    continue
                replica.busy, replica.upstream = True, ""
                work.append(threading.Thread(
                    target=self._move if replica.warm else self._retire, args=(rental, replica),
                    daemon=True,
                ))  # fmt: skip
        for thread in work:
            thread.start()
        return upstream_of(rental)

    def warm_wanted(self, rental: Placed) -> tuple[int, int, bool]:
        """How many of `rental`'s replicas run, the gateway's ask that says so (0: none), and
        whether replicas may be started for it: all of them, unless it scales (`FleetServices`)."""
        return len(rental.replicas), 0, True

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
        """`replica` is wanted warm and runs nowhere (its node died, or the gateway wants it
        again): placed where there is room (else `not_started`); a rental stopped meanwhile
        has what this started removed."""
        name = rental.deployment.name
        if replica.node is not None:
            log.warning("%s %s replica %d: node %s is gone, placed again", self.kind, name,
                        replica.index, replica.node.name)  # fmt: skip
        if replica.group is not None:
            remove_placement_group(replica.group)  # else Ray would place it again by itself
        replica.group, replica.node = None, None
        try:
            self._run(rental, replica)
        except UnchainedError as exc:
            self.not_started(rental, replica, exc)
        finally:
            with self.lock:
                replica.busy = False
                stopped = self.placed.get(name) is not rental
            if stopped:
                self._remove(rental, replica)

    def not_started(self, rental: Placed, replica: Replica, why: UnchainedError) -> None:
        """A replica wanted warm found no room or did not start: tried again next round."""
        log.warning("%s %s replica %d not placed yet: %s", self.kind, rental.deployment.name,
                    replica.index, why)  # fmt: skip

    def _retire(self, rental: Placed, replica: Replica) -> None:
        """`replica` is scaled down (out of the book's upstream since the gateway's ask): its
        container goes from its node and its placement group is freed."""
        self._remove(rental, replica)
        log.info("%s %s replica %d stopped on node %s (scaled down)", self.kind,
                 rental.deployment.name, replica.index,
                 replica.node.name if replica.node else "none")  # fmt: skip
        with self.lock:
            replica.group, replica.node, replica.busy = None, None, False

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

    def __init__(self, fleet: RayPlacement) -> None:
        super().__init__(fleet)
        self.asks = WarmAsks.in_state_dir(fleet.settings.state_dir)  # the gateway's

    def shape(self, deployment: Rental) -> tuple[Bundle, int]:
        try:
            spec = parse_servicespec(json.loads(deployment.spec_json))
        except (ValueError, JobSpecError) as exc:
            raise FleetRentalError(f"endpoint {deployment.name}: its spec: {exc}") from exc
        return spec.resources, spec.replicas

    def start_deployment(self, deployment: Rental, gpu_uuids: list[str]) -> Started:
        self.asks.forget(deployment.name)  # all its replicas run from its start
        return super().start_deployment(deployment, gpu_uuids)

    def stop(self, name: str) -> None:
        super().stop(name)
        self.asks.forget(name)

    def warm_wanted(self, rental: Placed) -> tuple[int, int, bool]:
        """As many as the gateway's last ask says, for an endpoint that scales."""
        ask = self.asks.get(rental.deployment.name)
        if ask is None or scaling_spec(rental.deployment.spec_json) is None:
            return super().warm_wanted(rental)
        return ask.warm, ask.ask, ask.may_start

    def not_started(self, rental: Placed, replica: Replica, why: UnchainedError) -> None:
        """A replica the gateway asked for: its waiter is told, the replica is not wanted
        until a newer ask (the next request's cold start tries again)."""
        if not replica.for_ask:
            return super().not_started(rental, replica, why)
        log.warning("%s %s replica %d did not start for the gateway: %s", self.kind,
                    rental.deployment.name, replica.index, why)  # fmt: skip
        self.asks.failed(rental.deployment.name, replica.for_ask, str(why))
        with self.lock:
            replica.warm = False

    def on_node(self, deployment: Rental, replica: int) -> Rental:
        spec = json.loads(deployment.spec_json)
        spec["replicas"] = 1
        return dataclasses.replace(
            deployment, name=replica_name(deployment.name, replica), spec_json=json.dumps(spec)
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


def replica_name(name: str, replica: int) -> str:
    """An endpoint's replica's name on its node: a service of one replica there."""
    return f"{name}-{replica}"


def upstream_of(rental: Placed) -> str:
    """The book's upstream: the replicas that run and are wanted warm, by index."""
    return ",".join(r.upstream for r in rental.replicas if r.upstream and r.warm)


def target(replicas: list[Replica], warm: int, ask: int, may_start: bool) -> None:
    """Mark `warm` of `replicas` as wanted warm. Fewer: the ones that run and come first stay
    (the gateway kept the first `warm` of the book's upstream, which lists them by index), then
    those not running. More, when `may_start`: the first ones not wanted, for ask `ask`."""
    wanted = [replica for replica in replicas if replica.warm]
    keep = sorted(wanted, key=lambda replica: (not replica.upstream, replica.index))
    for replica in keep[warm:]:
        replica.warm, replica.upstream = False, ""
    if may_start:
        for replica in [replica for replica in replicas if not replica.warm][: warm - len(wanted)]:
            replica.warm, replica.for_ask = True, ask


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
