"""Services: a `kind: service` spec as a running container behind the provider's gateway.

A service's container gets the hardening a job's does (`sandbox.hardened_options`: read-only
root, no capabilities, no privilege gain, a non-root user, bounded pids, memory, CPU and logs,
GPUs pinned by UUID). Unlike a job it must be reached, so it sits on a bridge of its own (no
other container on it, no masquerading: it cannot reach the Internet) and its one port is
published on the host's 127.0.0.1 only, at a port the kernel picks: only the gateway, on this
machine, reaches it (on a fleet's node, `host` is the node's cluster address instead, which the
gateway's machine reaches over the provider's private network: `provider.placement`). Its
bridge sits behind the egress fence (`egress.py`): the service answers connections, it never
opens one (not to the host, not to the LAN). `replicas: N` runs
N containers on that bridge, the gateway round-robins over them. A start answers (`Started`)
once every replica's health path answers 2xx; a start that fails or times out removes
everything it made; stopping removes the containers and the bridge. The daemon records the
deployment in the book (`provider.daemon.rentals`). A spec's replicas above `min_replicas` may
be stopped while idle and started again (`scale`: the gateway's `provider.gateway.scaler`):
the same containers, so the same hardening and GPUs; each restart gets a new host port.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import docker
import httpx
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container

from offchain.core.errors import UnchainedError
from offchain.protocol.job.jobspec import JobSpecError, ServiceSpec, parse_servicespec
from provider.config import RunnerSettings
from provider.rentals.book import NAME, Rental, Started
from provider.sandbox.egress import SERVICE_BRIDGE_PREFIX, EgressUnavailable, install_rules
from provider.sandbox.hardening import LABEL_RUNNER, hardened_options
from provider.sandbox.runner import JobStartError, create_container, engine_reason, runner_id

LABEL_SERVICE = "unchained.service"
LOOPBACK = "127.0.0.1"
HEALTH_TIMEOUT_S = 120.0  # a model server may load weights before it answers
HEALTH_POLL_S = 0.05
HEALTH_REQUEST_S = 2.0
STOP_TIMEOUT_S = 5  # a replica scaled down gets this long after SIGTERM
LOG_TAIL = 20  # lines of the container's output quoted in a failed start's error


class ServiceStartError(UnchainedError, RuntimeError):
    """The service could not start or never became healthy; nothing of it is left."""


def service_resource_name(runner: str, name: str) -> str:
    """The container's and its bridge's name."""
    return f"unchained-svc-{runner}-{name}"


def service_container_name(runner: str, name: str, replica: int) -> str:
    """Replica `replica`'s container (the index last: no two services' names collide)."""
    return f"{service_resource_name(runner, name)}-{replica}"


def service_bridge_name(runner: str, name: str) -> str:
    """The bridge's interface: the egress fence's service prefix, 15 characters in all."""
    digest = hashlib.sha256(f"{runner}/{name}".encode()).hexdigest()
    return SERVICE_BRIDGE_PREFIX + digest[:10]


def service_options(
    runner: str,
    name: str,
    spec: ServiceSpec,
    gpu_uuids: list[str],
    settings: RunnerSettings,
    host: str = LOOPBACK,
) -> dict[str, Any]:
    """Keyword arguments for `client.containers.create` that run `spec` as service `name`,
    its port published on `host` (a fleet node's: its cluster address, `provider.placement`)."""
    options = {
        **hardened_options(spec.image, spec.resources, spec.env, gpu_uuids, settings),
        "name": service_resource_name(runner, name),
        "labels": {LABEL_RUNNER: runner, LABEL_SERVICE: name},
        "working_dir": "/tmp",  # its only writable place: a service has no /out
        "network": service_resource_name(runner, name),
        "ports": {f"{spec.port}/tcp": (host,)},  # the host port: picked by the kernel
    }
    if spec.command is not None:
        options["command"] = list(spec.command)
    return options


class Services:
    """The services this provider (its state directory) runs: the `endpoint` kind's Starter."""

    def __init__(
        self,
        client: docker.DockerClient,
        settings: RunnerSettings,
        health_timeout_s: float = HEALTH_TIMEOUT_S,
        host: str = LOOPBACK,
    ) -> None:
        """`host`: the address its ports are published on (127.0.0.1: the gateway's machine)."""
        self.client = client
        self.host = host
        self.settings = settings
        self.health_timeout_s = health_timeout_s
        self.runner_id = runner_id(settings.state_dir)

    def start_deployment(self, deployment: Rental, gpu_uuids: list[str]) -> Started:
        """Start the endpoint `deployment` (its spec_json: a service spec)."""
        try:
            spec = parse_servicespec(json.loads(deployment.spec_json))
        except (ValueError, JobSpecError) as exc:
            raise ServiceStartError(f"service {deployment.name}: its spec: {exc}") from exc
        return self.start(deployment.name, spec, gpu_uuids)

    def start(self, name: str, spec: ServiceSpec, gpu_uuids: list[str] | None = None) -> Started:
        """Start `spec` as service `name`: its replicas, each with `spec.resources.gpus` of
        `gpu_uuids`; where they answer once every one is healthy."""
        gpus = list(gpu_uuids or [])
        if len(gpus) != spec.resources.gpus * spec.replicas:
            raise ValueError(f"the spec asks for {spec.resources.gpus} GPUs times "
                             f"{spec.replicas} replicas, {len(gpus)} given")  # fmt: skip
        if not NAME.fullmatch(name):
            raise ServiceStartError(f"{name!r} is not an endpoint name (letters, digits, . _ -)")
        resource = service_resource_name(self.runner_id, name)
        labels = {LABEL_RUNNER: self.runner_id, LABEL_SERVICE: name}
        create_bridge(self.client, "service", name, resource, labels, self.host)  # a 2nd stops here
        try:
            per = spec.resources.gpus
            containers = [
                self._create(name, replica, spec, gpus[replica * per : (replica + 1) * per])
                for replica in range(spec.replicas)
            ]
            upstreams = [self._healthy(container, spec) for container in containers]
            image = str(containers[0].attrs["Image"])
        except BaseException as exc:  # whatever stopped it (Ctrl-C too): nothing of it stays
            self._remove(name)
            if isinstance(exc, JobStartError | DockerException | ValueError):
                raise ServiceStartError(f"service {name}: {engine_reason(exc)}") from exc
            raise
        return Started(",".join(upstreams), image)

    def scale(self, name: str, spec: ServiceSpec, count: int) -> str:
        """Run the first `count` replicas of the started service `name`, the others stopped:
        where the running ones answer (as the book stores it, "" for none) once each is
        healthy. ServiceStartError if one does not start or get healthy within the start
        timeout: those this call started are stopped again."""
        replicas = self._of(name)
        for container in replicas[count:]:
            if container.status == "running":
                container.stop(timeout=STOP_TIMEOUT_S)
        woken: list[Container] = []
        upstreams = []
        try:
            if len(replicas) < count:
                raise ServiceStartError(f"service {name} has {len(replicas)} replicas here, "
                                        f"{count} wanted")  # fmt: skip
            for container in replicas[:count]:
                if container.status != "running":
                    woken.append(container)
                    container.start()
                upstreams.append(self._healthy(container, spec))
        except (ServiceStartError, DockerException) as exc:
            for container in woken:
                with suppress(DockerException):
                    container.stop(timeout=STOP_TIMEOUT_S)
            if isinstance(exc, ServiceStartError):
                raise
            raise ServiceStartError(f"service {name}: {engine_reason(exc)}") from exc
        return ",".join(upstreams)

    def _healthy(self, container: Container, spec: ServiceSpec) -> str:
        """Where `container` answers, once its health path does: within the renter's start
        timeout (an llm spec's), within the provider's."""
        timeout_s = min(getattr(spec, "start_timeout_s", self.health_timeout_s),
                        self.health_timeout_s)  # fmt: skip
        upstream = f"http://{self.host}:{host_port(container, spec.port, self.host)}"
        _wait_healthy(container, upstream + spec.health_path, timeout_s)
        return upstream

    def stop(self, name: str) -> None:
        """Remove the service's containers and bridge; a repeated stop is a no-op."""
        self._remove(name)

    def logs(self, name: str, lines: int) -> str:
        """The last `lines` lines each replica of `name` wrote ("" if none runs)."""
        return "".join(
            container.logs(tail=lines).decode(errors="replace") for container in self._of(name)
        )

    def running(self, name: str) -> int:
        """How many of service `name`'s replicas run (a scaled-down one is stopped)."""
        return sum(container.status == "running" for container in self._of(name))

    def leftovers(self) -> dict[str, list[str]]:
        """What this provider's services have in the engine: containers and bridges, by name."""
        labels = [f"{LABEL_RUNNER}={self.runner_id}", LABEL_SERVICE]
        containers = self.client.containers.list(all=True, filters={"label": labels})
        networks = self.client.networks.list(filters={"label": labels})
        return {
            "containers": sorted(c.labels[LABEL_SERVICE] for c in containers),
            "networks": sorted(n.attrs["Labels"][LABEL_SERVICE] for n in networks),
        }

    def _of(self, name: str) -> list[Container]:
        """The containers of service `name`, by replica."""
        labels = [f"{LABEL_RUNNER}={self.runner_id}", f"{LABEL_SERVICE}={name}"]
        found = self.client.containers.list(all=True, filters={"label": labels})
        return sorted(found, key=lambda container: container.name)

    def _create(self, name: str, replica: int, spec: ServiceSpec, gpus: list[str]) -> Container:
        """Replica `replica`'s container, started."""
        options = service_options(self.runner_id, name, spec, gpus, self.settings, self.host)
        options["name"] = service_container_name(self.runner_id, name, replica)
        container = create_container(self.client, options, self.settings.pull_images)
        container.start()
        return container

    def _remove(self, name: str) -> None:
        """Remove the service's containers and bridge, whichever exist."""
        for container in self._of(name):
            with suppress(NotFound):
                container.remove(force=True, v=True)
        with suppress(NotFound):
            self.client.networks.get(service_resource_name(self.runner_id, name)).remove()


def create_bridge(
    client: docker.DockerClient,
    kind: str,
    name: str,
    resource: str,
    labels: dict[str, str],
    host: str = LOOPBACK,
) -> None:
    """Deployment `name`'s own bridge (`resource`; a service's or a pod's): nothing else on it,
    no way out through the host's NAT, behind the egress fence (it may answer, never open a
    connection). ServiceStartError if it has one already, or if the fence cannot be set up
    (never run one unfenced)."""
    try:
        install_rules()
    except EgressUnavailable as exc:
        raise ServiceStartError(f"{kind} {name} not started, no egress fence: {exc}") from exc
    try:
        client.networks.create(
            resource, driver="bridge", check_duplicate=True, labels=labels,
            options={
                "com.docker.network.bridge.name": service_bridge_name(labels[LABEL_RUNNER], name),
                "com.docker.network.bridge.enable_icc": "false",
                "com.docker.network.bridge.enable_ip_masquerade": "false",
                "com.docker.network.bridge.host_binding_ipv4": host,
            },
        )  # fmt: skip
    except APIError as exc:
        if exc.status_code == 409:
            raise ServiceStartError(f"a {kind} named {name} is running here") from exc
        raise ServiceStartError(f"{kind} {name}: {engine_reason(exc)}") from exc


def host_port(container: Container, port: int, host: str = LOOPBACK) -> int:
    """The host port the engine published `port` on, at `host`. A container that exited
    already has none (the engine unpublishes its ports): that is said with its last output."""
    container.reload()
    bindings = container.attrs["NetworkSettings"]["Ports"].get(f"{port}/tcp") or []
    for binding in bindings:
        if binding["HostIp"] == host:
            return int(binding["HostPort"])
    _check_running(container, f"port {port} was published", "service")
    raise ServiceStartError(f"port {port} was not published on {host}: {bindings}")


def _wait_healthy(container: Container, url: str, timeout_s: float) -> None:
    """Until `url` answers 2xx (`wait_ready`)."""
    with httpx.Client(timeout=HEALTH_REQUEST_S) as client:

        def probe() -> str | None:
            try:
                answer = client.get(url)
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__}: {exc}"
            return None if answer.is_success else f"it answered {answer.status_code}"

        wait_ready(container, url, "answer 2xx", probe, timeout_s, "service")


def wait_ready(
    container: Container,
    what: str,
    wanted: str,
    probe: Callable[[], str | None],
    timeout_s: float,
    kind: str,
) -> None:
    """Until `probe` says the container's server is ready (None; else what it saw instead);
    ServiceStartError (with the container's last output) when the container exits or
    `timeout_s` passes first. `what` did not `wanted`: the error's words."""
    deadline = time.monotonic() + timeout_s
    while True:
        problem = probe()
        if problem is None:
            return
        container.reload()
        _check_running(container, f"{what} answered", kind)
        if time.monotonic() >= deadline:
            raise ServiceStartError(
                f"{what} did not {wanted} within {timeout_s:g} s ({problem}){_log_tail(container)}"
            )
        time.sleep(HEALTH_POLL_S)


def _check_running(container: Container, before: str, kind: str) -> None:
    """ServiceStartError with the container's exit code and last output once it has exited
    (its attributes as last reloaded)."""
    state = container.attrs["State"]
    if state["Status"] != "running":
        raise ServiceStartError(
            f"the {kind} exited (code {state['ExitCode']}) before {before}{_log_tail(container)}"
        )


def _log_tail(container: Container) -> str:
    try:
        text = container.logs(tail=LOG_TAIL).decode(errors="replace").strip()
    except APIError:
        return ""
    return f"; its last output:\n{text}" if text else "; it wrote nothing"
