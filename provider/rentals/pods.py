"""Pods: a `kind: pod` spec as a running container a renter logs in to over SSH, through the
provider's gateway (its TCP forwarder, `provider.gateway.tcp`).

A pod gets a job's hardening (`sandbox.hardened_options`: read-only root, no capabilities, no
privilege gain, the provider's non-root uid, bounded pids, memory, CPU and logs, GPUs pinned
by UUID) as far as sshd allows, which is all of it: the pod image's sshd (`pod_image.py`) runs
as that uid, serves only that user (`pod`) and only the spec's key, and needs nothing written
outside a small tmpfs of its own (POD_RUN_DIR: a host key made per pod, authorized_keys) and
/workspace. Like a service it sits on a bridge of its own behind the egress fence (it answers
connections, never opens one) and its sshd port is published on the host's 127.0.0.1 only,
at a port the kernel picks: only the gateway, on this machine, reaches it (a fleet's node
publishes it on its cluster address: `provider.placement.fleet_rentals`).

/workspace is a named docker volume (`workspace_volume`): stopping the pod removes its
container and bridge and keeps the volume, so the renter can come back to it; the daemon
removes it (`forget`, a Starter's hook for what outlives a stop) once the spec's
`workspace_keep_s` has passed.
"""

from __future__ import annotations

import json
import socket
from contextlib import suppress
from typing import Any

import docker
from docker.errors import DockerException, NotFound
from docker.models.containers import Container
from docker.types import Mount

from offchain.protocol.job.jobspec import DEFAULT_POD_IMAGE, JobSpecError, PodSpec, parse_podspec
from provider.config import RunnerSettings
from provider.images.pod import POD_HOME, POD_RUN_DIR, POD_SSH_PORT, SSH_KEY_VARIABLE, pod_image
from provider.rentals.book import NAME, Rental, Started
from provider.rentals.services import (
    LOG_TAIL,
    LOOPBACK,
    ServiceStartError,
    create_bridge,
    host_port,
    wait_ready,
)
from provider.sandbox.hardening import LABEL_RUNNER, hardened_options
from provider.sandbox.runner import JobStartError, create_container, engine_reason, runner_id

LABEL_POD = "unchained.pod"
SSH_READY_TIMEOUT_S = 30.0  # sshd answers in well under a second; a loaded machine, slower
BANNER_TIMEOUT_S = 1.0
RUN_DIR_MIB = 1


class PodStartError(ServiceStartError):
    """The pod could not start or its sshd never answered; nothing of it is left but a
    /workspace that was there before."""


def pod_resource_name(runner: str, name: str) -> str:
    """The container's and its bridge's name."""
    return f"unchained-pod-{runner}-{name}"


def workspace_volume(runner: str, name: str) -> str:
    """The named volume mounted at /workspace, kept after the pod stops."""
    return f"{pod_resource_name(runner, name)}-workspace"


def pod_options(
    runner: str,
    name: str,
    spec: PodSpec,
    image: str,
    gpu_uuids: list[str],
    settings: RunnerSettings,
    host: str = LOOPBACK,
) -> dict[str, Any]:
    """Keyword arguments for `client.containers.create` that run `spec` (in `image`, the
    image it names as this engine knows it) as pod `name`, its sshd published on `host`."""
    options = hardened_options(image, spec.resources, {SSH_KEY_VARIABLE: spec.ssh_key},
                               gpu_uuids, settings)  # fmt: skip
    run_dir = (f"rw,nosuid,nodev,noexec,size={RUN_DIR_MIB}m,uid={settings.uid},"
               f"gid={settings.gid},mode=0700")  # fmt: skip
    return {
        **options,
        "name": pod_resource_name(runner, name),
        "labels": {LABEL_RUNNER: runner, LABEL_POD: name},
        "working_dir": POD_HOME,
        "tmpfs": {**options["tmpfs"], POD_RUN_DIR: run_dir},
        "mounts": [Mount(POD_HOME, workspace_volume(runner, name), type="volume")],
        "network": pod_resource_name(runner, name),
        "ports": {f"{POD_SSH_PORT}/tcp": (host,)},  # the host port: picked by the kernel
    }


class Pods:
    """The pods this provider (its state directory) runs: the `pod` kind's Starter."""

    def __init__(
        self,
        client: docker.DockerClient,
        settings: RunnerSettings,
        ready_timeout_s: float = SSH_READY_TIMEOUT_S,
        host: str = LOOPBACK,
    ) -> None:
        """`host`: the address sshd is published on (127.0.0.1: the gateway's machine)."""
        self.client = client
        self.host = host
        self.settings = settings
        self.ready_timeout_s = ready_timeout_s
        self.runner_id = runner_id(settings.state_dir)

    def start_deployment(self, deployment: Rental, gpu_uuids: list[str]) -> Started:
        """Start the pod `deployment` (its spec_json: a pod spec)."""
        try:
            spec = parse_podspec(json.loads(deployment.spec_json))
        except (ValueError, JobSpecError) as exc:
            raise PodStartError(f"pod {deployment.name}: its spec: {exc}") from exc
        return self.start(deployment.name, spec, gpu_uuids)

    def start(self, name: str, spec: PodSpec, gpu_uuids: list[str] | None = None) -> Started:
        """Start `spec` as pod `name` with `gpu_uuids`; its sshd's address (as an upstream URL:
        the gateway forwards TCP to its host and port) once sshd answers."""
        gpus = list(gpu_uuids or [])
        if len(gpus) != spec.resources.gpus:
            raise ValueError(f"the spec asks for {spec.resources.gpus} GPUs, {len(gpus)} given")
        if not NAME.fullmatch(name):
            raise PodStartError(f"{name!r} is not a pod name (letters, digits, . _ -)")
        try:
            image = self._image(spec.image)
        except (DockerException, RuntimeError) as exc:
            raise PodStartError(f"pod {name}: the pod image: {engine_reason(exc)}") from exc
        resource = pod_resource_name(self.runner_id, name)
        labels = {LABEL_RUNNER: self.runner_id, LABEL_POD: name}
        try:
            create_bridge(self.client, "pod", name, resource, labels, self.host)  # 2nd: stops
        except ServiceStartError as exc:
            raise PodStartError(str(exc)) from exc
        fresh = not self._has_workspace(name)
        try:
            options = pod_options(self.runner_id, name, spec, image, gpus, self.settings,
                                  self.host)  # fmt: skip
            if fresh:
                self.client.volumes.create(workspace_volume(self.runner_id, name), labels=labels)
            container = create_container(self.client, options, self.settings.pull_images)
            container.start()
            try:
                address = (self.host, host_port(container, POD_SSH_PORT, self.host))
            except ServiceStartError:
                _running(container, spec.image)  # it exited at once: say so, not "no port"
                raise
            wait_ready(container, f"sshd at {address[0]}:{address[1]}", "send its banner",
                       lambda: _ssh_banner(address), self.ready_timeout_s, "pod")  # fmt: skip
            started = Started(f"http://{address[0]}:{address[1]}", str(container.attrs["Image"]))
        except BaseException as exc:  # whatever stopped it (Ctrl-C too): nothing of it stays
            self.stop(name)
            if fresh:
                self.remove_workspace(name)
            if isinstance(exc, ServiceStartError | JobStartError | DockerException | ValueError):
                raise PodStartError(f"pod {name}: {engine_reason(exc)}") from exc
            raise
        return started

    def stop(self, name: str) -> None:
        """Remove the pod's container and bridge, keeping its /workspace; a repeated stop
        does nothing."""
        resource = pod_resource_name(self.runner_id, name)
        with suppress(NotFound):
            self.client.containers.get(resource).remove(force=True)
        with suppress(NotFound):
            self.client.networks.get(resource).remove()

    def remove_workspace(self, name: str) -> None:
        """Remove the pod's /workspace volume (after stop); nothing happens if it is gone."""
        with suppress(NotFound):
            self.client.volumes.get(workspace_volume(self.runner_id, name)).remove(force=True)

    def forget(self, deployment: Rental, now_ms: int) -> bool:
        """For the daemon, each round, once the pod ended: True when nothing of it is left,
        its /workspace removed once `workspace_keep_s` has passed since it stopped (at once
        for a spec that cannot be read: nothing could have been kept for it)."""
        try:
            keep_s = parse_podspec(json.loads(deployment.spec_json)).workspace_keep_s
        except (ValueError, JobSpecError):
            keep_s = 0
        if now_ms < deployment.stopped_ms + keep_s * 1000:
            return False
        self.remove_workspace(deployment.name)
        return True

    def logs(self, name: str, lines: int) -> str:
        """The last `lines` lines of the pod's sshd log ("" when it does not run)."""
        try:
            container = self.client.containers.get(pod_resource_name(self.runner_id, name))
        except NotFound:
            return ""
        return str(container.logs(tail=lines).decode(errors="replace"))

    def leftovers(self) -> dict[str, list[str]]:
        """What this provider's pods have in the engine: containers, bridges and workspaces."""
        labels = [f"{LABEL_RUNNER}={self.runner_id}", LABEL_POD]
        # sparse: no inspect of each (one the daemon removes meanwhile would be NotFound)
        containers = self.client.containers.list(all=True, sparse=True, filters={"label": labels})
        networks = self.client.networks.list(filters={"label": labels})
        volumes = self.client.volumes.list(filters={"label": labels})
        return {
            "containers": sorted(c.attrs["Labels"][LABEL_POD] for c in containers),
            "networks": sorted(n.attrs["Labels"][LABEL_POD] for n in networks),
            "workspaces": sorted(v.attrs["Labels"][LABEL_POD] for v in volumes),
        }

    def _image(self, image: str) -> str:
        """The default pod image is built here (for this provider's uid) when missing."""
        if image == DEFAULT_POD_IMAGE:
            return pod_image(self.client, self.settings.uid, self.settings.gid)
        return image

    def _has_workspace(self, name: str) -> bool:
        try:
            self.client.volumes.get(workspace_volume(self.runner_id, name))
        except NotFound:
            return False
        return True


def _running(container: Container, image: str) -> None:
    """PodStartError when the container is not running (its image has no pod sshd, likely)."""
    container.reload()
    state = container.attrs["State"]
    if state["Status"] != "running":
        output = container.logs(tail=LOG_TAIL).decode(errors="replace").strip() or "none"
        raise PodStartError(f"the pod exited at once (code {state['ExitCode']}): is {image} "
                            f"built from {DEFAULT_POD_IMAGE}? Its output: {output}")  # fmt: skip


def _ssh_banner(address: tuple[str, int]) -> str | None:
    """None once an SSH server at `address` sends its version line, else what happened."""
    try:
        with socket.create_connection(address, timeout=BANNER_TIMEOUT_S) as connection:
            line = connection.recv(256)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if line.startswith(b"SSH-2.0-") else f"it sent {line[:40]!r}"
