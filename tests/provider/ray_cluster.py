"""A real multi-node Ray cluster on this one machine, for the fleet's tests and bench: a head
that runs no jobs and nodes that each are a `ray start --block` process of their own, in a
session of their own (so a node dies whole, raylet and workers, as a machine would), with their
own resources, ports and label. All share this machine's docker engine: each node's actor
names its containers by its node's state directory, so they never mix."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import docker

from provider.config import RunnerSettings
from provider.placement.ray_fleet import NODE_LABEL
from provider.sandbox.hardening import LABEL_RUNNER
from provider.sandbox.runner import Runner, runner_id

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
OBJECT_STORE_BYTES = 80 * 1024 * 1024
WORKER_PORTS = 20  # per node: one a worker process (the actor and Ray's own)
JOIN_S = 60.0
START_TRIES = 3


def free_ports(count: int) -> list[int]:
    """`count` ports the kernel has free now (a run of them is not asked: Ray takes each)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def worker_range() -> tuple[int, int]:
    """A run of WORKER_PORTS free ports (probed; another process may take one later)."""
    for _ in range(50):
        start = free_ports(1)[0]
        if start + WORKER_PORTS > 65000:
            continue
        try:
            probe = [socket.socket() for _ in range(WORKER_PORTS)]
            for offset, sock in enumerate(probe):
                sock.bind(("127.0.0.1", start + offset))
            return start, start + WORKER_PORTS - 1
        except OSError:
            continue
        finally:
            for sock in probe:
                sock.close()
    raise RuntimeError("no run of free ports for Ray's workers")


@dataclasses.dataclass
class RayNode:
    name: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """The node dies as a machine does: every process of its session at once (Ray's
        workers have process groups of their own, but stay in the session)."""
        for pid in session_pids(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()


def session_pids(session: int) -> list[int]:
    """The processes of the session `session` leads (field 6 of /proc/PID/stat)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[3]) == session:
            pids.append(int(stat.parent.name))
    return pids


class RayCluster:
    def __init__(self, folder: Path, state_dir: Path, fast_health_checks: bool = True) -> None:
        self.folder = folder
        # Ray's sockets live under its temp dir, and a socket's path may not pass 107 bytes:
        # pytest's folders (a worker's, under a run's) are too deep for it
        self.ray_temp = Path(tempfile.mkdtemp(prefix="ray-"))
        self.state_dir = state_dir
        self.port = free_ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, RayNode] = {}
        self.head: RayNode | None = None
        # tests: a dead node is noticed in about 3 s (Ray's defaults, about 15 s, are the
        # bench's); a config of the head's, read from RAY_* variables
        self.head_env = (
            {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
            if fast_health_checks
            else {}
        )

    def _start(self, name: str, arguments: list[str], env: Mapping[str, str]) -> RayNode:
        low, high = worker_range()
        ports = free_ports(6)
        command = [
            str(RAY), "start", "--block", "--disable-usage-stats",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
            f"--dashboard-agent-listen-port={ports[2]}", f"--dashboard-agent-grpc-port={ports[3]}",
            f"--metrics-export-port={ports[4]}", f"--runtime-env-agent-port={ports[5]}",
            f"--min-worker-port={low}", f"--max-worker-port={high}",
            f"--labels={json.dumps({NODE_LABEL: name})}", *arguments,
        ]  # fmt: skip
        environ = os.environ | {"PYTHONPATH": str(ROOT)} | dict(env)
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 (kept open by the child)
        process = subprocess.Popen(
            command, env=environ, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return RayNode(name, process)

    def start_head(self) -> None:
        """The head: GCS and a raylet that advertises nothing (it runs no jobs)."""
        self.head = self._start(
            "head",
            ["--head", f"--port={self.port}", "--include-dashboard=false", "--num-cpus=0",
             "--num-gpus=0", f"--temp-dir={self.ray_temp}"],
            self.head_env,
        )  # fmt: skip

    def wait_head(self) -> None:
        """Until the head's GCS takes connections (a head that exited says so at once)."""
        assert self.head is not None
        deadline = time.monotonic() + JOIN_S
        while time.monotonic() < deadline:
            if self.head.process.poll() is not None:
                log = (self.folder / "head.log").read_text()[-2000:]
                raise RuntimeError(f"the Ray head exited: {log}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the Ray head did not listen within {JOIN_S} s")

    def add_node(self, name: str, cpus: int = 1, memory_mib: int = 2048, gpus: int = 0) -> RayNode:
        """A node joined (the driver must be connected): started again when its start timed
        out, which a loaded machine can make it do (Ray gives a raylet 30 s to register)."""
        for _ in range(START_TRIES):
            node = self._start(
                name,
                [f"--address={self.address}", f"--num-cpus={cpus}", f"--num-gpus={gpus}",
                 f"--memory={memory_mib << 20}"],
                {},
            )  # fmt: skip
            if self._joined(node):
                self.nodes[name] = node
                return node
            node.kill()
        raise RuntimeError(f"Ray node {name} did not join: {self.folder / (name + '.log')}")

    def _joined(self, node: RayNode) -> bool:
        """Whether the node joined (False: its `ray start` gave up)."""
        import ray

        deadline = time.monotonic() + JOIN_S
        while time.monotonic() < deadline and node.process.poll() is None:
            labels = [n["Labels"].get(NODE_LABEL) for n in ray.nodes() if n["Alive"]]
            if node.name in labels:
                return True
            time.sleep(0.5)
        return False

    def node_settings(self, name: str, settings: RunnerSettings) -> RunnerSettings:
        return settings.model_copy(update={"state_dir": settings.state_dir / "nodes" / name})

    def power_off(self, name: str, client: docker.DockerClient, settings: RunnerSettings) -> None:
        """The node's machine is gone: its processes and the containers it ran."""
        self.nodes[name].kill()
        node_runner = runner_id(self.node_settings(name, settings).state_dir)
        for container in client.containers.list(filters={"label": f"{LABEL_RUNNER}={node_runner}"}):
            container.kill()

    def reap(self, name: str, client: docker.DockerClient, settings: RunnerSettings) -> Runner:
        """The dead node's machine back: its runner cleans up what it left."""
        runner = Runner(client, self.node_settings(name, settings))
        runner.recover()
        return runner

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()
        if self.head is not None:
            self.head.kill()
        shutil.rmtree(self.ray_temp, ignore_errors=True)
