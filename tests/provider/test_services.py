"""Services on the real engine: the sample service (built here, no registry) starts hardened as
a job is, answers /health and /predict on a port published on 127.0.0.1 only, names the image
that runs; replicas each answer; behind the egress fence it cannot open a connection to the
host; a service that never gets healthy, or exits, is removed with an error that says why;
stopping removes its containers and its bridge; its logs are read."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import pytest

from offchain.protocol.job.jobspec import JobSpec, ServiceSpec
from provider.config import RunnerSettings
from provider.rentals.services import (
    Services,
    ServiceStartError,
    service_container_name,
    service_options,
    service_resource_name,
)
from provider.sandbox.hardening import JobMounts, container_options, hardened_options
from samples import images as sample_images

HARDENED_HOST = (
    "ReadonlyRootfs", "CapDrop", "SecurityOpt", "Init", "PidsLimit", "Memory", "MemorySwap",
    "NanoCpus", "Tmpfs", "Ulimits", "LogConfig", "DeviceRequests",
)  # fmt: skip


@pytest.fixture(scope="session")
def sample(client: docker.DockerClient) -> str:
    return sample_images.sample_service_image(client)


def spec_of(image: str, **changes: object) -> ServiceSpec:
    fields: dict = {
        "kind": "service", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
        "price_per_request": 1_000, "resources": {"cpu_cores": 1, "memory_mib": 256},
    }  # fmt: skip
    return ServiceSpec.model_validate({**fields, **changes})


@pytest.fixture
def services(client, settings: RunnerSettings) -> Iterator[Services]:
    """Services of the test's own; afterwards none of their containers or bridges may remain."""
    made = Services(client, settings, health_timeout_s=30)
    yield made
    for name in set(made.leftovers()["networks"]):
        made.stop(name)
    assert made.leftovers() == {"containers": [], "networks": []}


def test_the_sample_service_answers_health_and_predict_on_loopback(client, services, sample):
    endpoint = services.start("sample", spec_of(sample))
    assert endpoint.upstream.startswith("http://127.0.0.1:")
    assert endpoint.image_digest == client.images.get(sample).id  # the image that runs
    assert httpx.get(f"{endpoint.upstream}/health").json() == {"status": "ok"}
    answer = httpx.post(f"{endpoint.upstream}/predict", json={"values": [1, 2, 3]})
    assert answer.json() == {"n": 3, "sum": 6, "mean": 2.0, "score": 13}
    bad = httpx.post(f"{endpoint.upstream}/predict", json={"values": ["x"]})
    assert bad.status_code == 400 and bad.json() == {"error": "values must all be numbers"}


def test_its_port_is_published_on_127_0_0_1_only(client, services, sample):
    endpoint = services.start("loopback", spec_of(sample))
    name = service_resource_name(services.runner_id, "loopback")
    container = client.containers.get(service_container_name(services.runner_id, "loopback", 0))
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
    services.start("hardened", spec_of(sample))
    service = client.containers.get(service_container_name(services.runner_id, "hardened", 0))
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


def test_a_health_path_that_never_answers_2xx_removes_the_container(client, settings, sample):
    services = Services(client, settings, health_timeout_s=1)
    with pytest.raises(ServiceStartError, match=r"/missing did not answer 2xx within 1 s "
                       r"\(it answered 404\)"):  # fmt: skip
        services.start("unhealthy", spec_of(sample, health_path="/missing"))
    assert services.leftovers() == {"containers": [], "networks": []}


def test_a_service_that_exits_is_removed_with_its_last_output(services, sample):
    command = ["python3", "-c", "import sys; print('no model here', flush=True); sys.exit(3)"]
    with pytest.raises(ServiceStartError, match=r"exited \(code 3\)(.|\n)*no model here"):
        services.start("exits", spec_of(sample, command=command))
    assert services.leftovers() == {"containers": [], "networks": []}


def test_stop_removes_the_container_and_its_bridge(services, sample):
    endpoint = services.start("stopped", spec_of(sample))
    assert services.leftovers() == {"containers": ["stopped"], "networks": ["stopped"]}
    services.stop("stopped")
    assert services.leftovers() == {"containers": [], "networks": []}
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{endpoint.upstream}/health")
    services.stop("stopped")  # again: nothing to do


def test_a_name_is_served_once_and_what_cannot_start_is_refused(services, sample):
    services.start("once", spec_of(sample))
    with pytest.raises(ServiceStartError, match="a service named once is running here"):
        services.start("once", spec_of(sample))
    assert services.leftovers()["containers"] == ["once"]  # the first is untouched
    with pytest.raises(ServiceStartError, match="is not an endpoint name"):
        services.start("a/b", spec_of(sample))
    with pytest.raises(ServiceStartError, match="unchained/absent:1 is not on this machine"):
        services.start("absent", spec_of("unchained/absent:1"))
    with pytest.raises(ValueError, match="asks for 0 GPUs times 1 replicas, 1 given"):
        services.start("gpu", spec_of(sample), gpu_uuids=["GPU-x"])


def test_replicas_each_answer_and_their_logs_are_read(services, sample):
    started = services.start("two", spec_of(sample, replicas=2))
    upstreams = started.upstream.split(",")
    assert len(set(upstreams)) == 2
    for upstream in upstreams:
        assert httpx.get(f"{upstream}/health").json() == {"status": "ok"}
    assert services.leftovers()["containers"] == ["two", "two"]
    assert services.logs("two", 5).count("GET /health") >= 2  # each replica's own
    assert services.logs("nothing", 5) == ""


def test_a_service_cannot_open_a_connection_to_the_host(client, services, sample):
    """The egress fence: a listener on every host address, reached from the service's own
    bridge, is rejected by the fence (EHOSTUNREACH: icmp-admin-prohibited), not merely
    unanswered; the service still answers the gateway (replies pass)."""
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    try:
        started = services.start("fenced", spec_of(sample))
        name = service_resource_name(services.runner_id, "fenced")
        host = client.networks.get(name).attrs["IPAM"]["Config"][0]["Gateway"]
        container = client.containers.get(service_container_name(services.runner_id, "fenced", 0))
        probe = ("import socket\ntry:\n socket.create_connection(('%s', %d), timeout=5)\n"
                 " print('connected')\nexcept OSError as e:\n print('errno', e.errno)")  # fmt: skip
        _, output = container.exec_run(["python3", "-c", probe % (host, port)])
        assert output.decode().strip() == "errno 113", output  # EHOSTUNREACH: rejected
        assert httpx.get(f"{started.upstream}/health").json() == {"status": "ok"}
    finally:
        listener.close()
