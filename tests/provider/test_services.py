"""Services on the real engine: the sample service (built here, no registry) starts hardened as
a job is, answers /health and /predict on a port published on 127.0.0.1 only, is registered
as an endpoint; a service that never gets healthy, or exits, is removed with an error that
says why; stopping removes the container, its bridge and the endpoint."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import pytest

from offchain.protocol.jobspec import JobSpec, ServiceSpec
from provider import images
from provider.config import RunnerSettings
from provider.endpoints import EndpointBook
from provider.sandbox import JobMounts, container_options, hardened_options
from provider.services import Services, ServiceStartError, service_options, service_resource_name

CHANNEL = bytes(range(28))
HARDENED_HOST = (
    "ReadonlyRootfs", "CapDrop", "SecurityOpt", "Init", "PidsLimit", "Memory", "MemorySwap",
    "NanoCpus", "Tmpfs", "Ulimits", "LogConfig", "DeviceRequests",
)  # fmt: skip


@pytest.fixture(scope="session")
def sample(client: docker.DockerClient) -> str:
    return images.sample_service_image(client)


def spec_of(image: str, **changes: object) -> ServiceSpec:
    fields: dict = {
        "kind": "service", "image": image, "port": images.SAMPLE_SERVICE_PORT,
        "price_per_request": 1_000, "resources": {"cpu_cores": 1, "memory_mib": 256},
    }  # fmt: skip
    return ServiceSpec.model_validate({**fields, **changes})


@pytest.fixture
def book(settings: RunnerSettings) -> Iterator[EndpointBook]:
    made = EndpointBook.in_state_dir(settings.state_dir)
    yield made
    made.close()


@pytest.fixture
def services(client, settings: RunnerSettings, book: EndpointBook) -> Iterator[Services]:
    """Services of the test's own; afterwards none of their containers or bridges may remain."""
    made = Services(client, settings, book, health_timeout_s=30)
    yield made
    for endpoint in book.list():
        made.stop(endpoint.name)
    assert made.leftovers() == {"containers": [], "networks": []}


def test_the_sample_service_answers_health_and_predict_on_loopback(services, book, sample):
    endpoint = services.start("sample", spec_of(sample), CHANNEL)
    assert endpoint.upstream.startswith("http://127.0.0.1:")
    assert book.get("sample") == endpoint
    assert (endpoint.channel, endpoint.price_per_request, endpoint.requests) == (CHANNEL, 1_000, 0)
    assert httpx.get(f"{endpoint.upstream}/health").json() == {"status": "ok"}
    answer = httpx.post(f"{endpoint.upstream}/predict", json={"values": [1, 2, 3]})
    assert answer.json() == {"n": 3, "sum": 6, "mean": 2.0, "score": 13}
    bad = httpx.post(f"{endpoint.upstream}/predict", json={"values": ["x"]})
    assert bad.status_code == 400 and bad.json() == {"error": "values must all be numbers"}


def test_its_port_is_published_on_127_0_0_1_only(client, services, sample):
    endpoint = services.start("loopback", spec_of(sample), CHANNEL)
    name = service_resource_name(services.runner_id, "loopback")
    container = client.containers.get(name)
    assert container.attrs["HostConfig"]["PortBindings"] == {
        "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]  # "": an ephemeral port
    }
    assert container.ports == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(
        httpx.URL(endpoint.upstream).port)}]}  # fmt: skip
    # the host's address on the service's bridge does not serve it
    gateway = client.networks.get(name).attrs["IPAM"]["Config"][0]["Gateway"]
    with pytest.raises(ConnectionRefusedError), socket.create_connection(
        (gateway, httpx.URL(endpoint.upstream).port), timeout=5
    ):  # fmt: skip
        pass
    network = client.networks.get(name).attrs
    assert network["Options"]["com.docker.network.bridge.enable_ip_masquerade"] == "false"
    assert list(container.attrs["NetworkSettings"]["Networks"]) == [name]  # its bridge alone


def test_it_runs_with_the_hardening_of_a_job(client, services, sample, tmp_path: Path):
    services.start("hardened", spec_of(sample), CHANNEL)
    service = client.containers.get(service_resource_name(services.runner_id, "hardened"))
    job = JobSpec(image=sample, command=["true"], max_duration_s=1, max_price_lovelace=0,
                  resources={"cpu_cores": 1, "memory_mib": 256})  # fmt: skip
    options = container_options("r1", "twin", job, sample, JobMounts(tmp_path, None), [],
                                "", services.settings)  # fmt: skip
    twin = client.containers.create(**options)  # never started: its HostConfig is enough
    try:
        for key in HARDENED_HOST:
            assert service.attrs["HostConfig"][key] == twin.attrs["HostConfig"][key], key
        assert service.attrs["Config"]["User"] == twin.attrs["Config"]["User"] == "65534:65534"
        assert service.attrs["HostConfig"]["CapDrop"] == ["ALL"]
        assert service.attrs["HostConfig"]["ReadonlyRootfs"] is True
        assert set(twin.attrs["Config"]["Env"]) <= set(service.attrs["Config"]["Env"])
    finally:
        twin.remove(force=True)


def test_service_options_add_to_the_shared_hardening_and_change_none_of_it(settings, sample):
    spec = spec_of(sample, command=["python3", "-m", "http.server"])
    options = service_options("r1", "opts", spec, [], settings)
    for key, value in hardened_options(sample, spec.resources, {}, [], settings).items():
        assert options[key] == value, key
    assert options["command"] == ["python3", "-m", "http.server"]
    assert options["ports"] == {"8000/tcp": ("127.0.0.1",)}


def test_a_health_path_that_never_answers_2xx_removes_the_container(client, settings, book, sample):
    services = Services(client, settings, book, health_timeout_s=1)
    with pytest.raises(ServiceStartError, match=r"/missing did not answer 2xx within 1 s "
                       r"\(it answered 404\)"):  # fmt: skip
        services.start("unhealthy", spec_of(sample, health_path="/missing"), CHANNEL)
    assert services.leftovers() == {"containers": [], "networks": []}
    assert book.get("unhealthy") is None


def test_a_service_that_exits_is_removed_with_its_last_output(services, book, sample):
    command = ["python3", "-c", "import sys; print('no model here', flush=True); sys.exit(3)"]
    with pytest.raises(ServiceStartError, match=r"exited \(code 3\)(.|\n)*no model here"):
        services.start("exits", spec_of(sample, command=command), CHANNEL)
    assert services.leftovers() == {"containers": [], "networks": []}
    assert book.get("exits") is None


def test_stop_removes_the_container_its_bridge_and_the_endpoint(services, book, sample):
    endpoint = services.start("stopped", spec_of(sample), CHANNEL)
    assert services.leftovers() == {"containers": ["stopped"], "networks": ["stopped"]}
    services.stop("stopped")
    assert services.leftovers() == {"containers": [], "networks": []}
    assert book.get("stopped") is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{endpoint.upstream}/health")
    services.stop("stopped")  # again: nothing to do


def test_a_name_is_served_once_and_what_cannot_start_is_refused(services, sample):
    services.start("once", spec_of(sample), CHANNEL)
    with pytest.raises(ServiceStartError, match="an endpoint named once exists already"):
        services.start("once", spec_of(sample), CHANNEL)
    assert services.leftovers()["containers"] == ["once"]  # the first is untouched
    with pytest.raises(ServiceStartError, match="replicas: 2 asked, this provider runs one"):
        services.start("two", spec_of(sample, replicas=2), CHANNEL)
    with pytest.raises(ServiceStartError, match="is not an endpoint name"):
        services.start("a/b", spec_of(sample), CHANNEL)
    with pytest.raises(ServiceStartError, match="unchained/absent:1 is not on this machine"):
        services.start("absent", spec_of("unchained/absent:1"), CHANNEL)
    with pytest.raises(ValueError, match="asks for 0 GPUs, 1 given"):
        services.start("gpu", spec_of(sample), CHANNEL, gpu_uuids=["GPU-x"])
