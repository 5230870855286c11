"""Fixtures for the provider: the real docker engine, the locally built images (cached by the
engine, so built once per machine) and a runner with its own state directory that must leave
nothing behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from offchain.protocol.tx.deployment import Deployment
from provider.config import RunnerSettings
from provider.images import recipes as images
from provider.images.recipes import BUSYBOX_REPOSITORY
from provider.sandbox.runner import Runner
from tests.provider.chain import deployed
from tests.provider.fake_nvml import fake_nvml  # noqa: F401  (a fixture of the provider's tests)
from tests.provider.test_gateway_support import serving, upstream
from tests.registry import LocalRegistry


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    try:
        engine = docker.from_env()
        engine.ping()
    except docker.errors.DockerException as exc:
        raise RuntimeError(f"no docker engine ({exc}): run scripts/setup-docker.sh") from exc
    return engine


@pytest.fixture(scope="session")
def busybox(client: docker.DockerClient) -> str:
    return images.busybox_image(client)


@pytest.fixture(scope="session")
def python(client: docker.DockerClient) -> str:
    """Python 3 + NumPy with provider/images/workloads at /opt/unchained/workloads."""
    return images.workloads_image(client)


@pytest.fixture(scope="session")
def registry_busybox(client: docker.DockerClient, busybox: str, registry: LocalRegistry) -> str:
    """The busybox image pushed to the session's registry, by digest: `host/repo@sha256:...`
    (the engine keeps no reference to it under that name: a run pulls it)."""
    return registry.push(client, busybox, BUSYBOX_REPOSITORY)


@pytest.fixture(scope="module")
def deployment_path(tmp_path_factory) -> Path:
    """Where a module's deployment file is written, for the commands that read it."""
    return tmp_path_factory.mktemp("deployment") / "deployment.json"


@pytest.fixture(scope="module")
async def deployment(devnet, deployment_path: Path) -> Deployment:
    """The validators deployed once per module on the session's devnet."""
    return await deployed(devnet, deployment_path)


def assert_no_leftovers(runner: Runner) -> None:
    """No container, workspace, cgroup or mount of any job is left."""
    assert runner.leftovers() == {"containers": [], "workspaces": [], "cgroups": []}
    with open("/proc/self/mounts") as mounts:
        assert not [line for line in mounts if str(runner.settings.state_dir) in line]


@pytest.fixture
def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(state_dir=tmp_path / "state")


@pytest.fixture
def runner(client: docker.DockerClient, settings: RunnerSettings) -> Iterator[Runner]:
    """A runner of the test's own; after the test nothing of any job may remain."""
    made = Runner(client, settings)
    yield made
    assert_no_leftovers(made)


FAKE_MPS = Path(__file__).parent / "fake_mps"  # a FAKE nvidia-cuda-mps-control lives there


@pytest.fixture
def fake_mps(tmp_path, monkeypatch) -> Path:
    """The FAKE MPS control program first on PATH; its calls land in the returned log."""
    log = tmp_path / "mps-calls.jsonl"
    log.touch()
    monkeypatch.setenv("PATH", f"{FAKE_MPS}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_MPS_LOG", str(log))
    return log


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    """A plain service under uvicorn (`test_gateway_support.upstream`) for a module's gateway."""
    with serving(upstream) as url:
        yield url
