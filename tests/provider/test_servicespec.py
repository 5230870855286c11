"""`kind: service` beside jobs: the same YAML, read and digested the same way, and a spec without
`kind` is still a job with the id it always had."""

from __future__ import annotations

import hashlib
import json

import pytest

from offchain.protocol.job.jobspec import (
    JobSpecError,
    ServiceSpec,
    jobspec_from_yaml,
    load_servicespec,
    parse_spec,
    servicespec_from_yaml,
)
from tests.protocol.test_jobspec_digest import MINIMAL, MINIMAL_JOB_ID, independent

SERVICE = """
kind: service
image: unchained/sample-service@sha256:%s
port: 8000
health_path: /health
env: {MODEL: tiny}
resources: {gpus: 1, min_vram_mib: 8000, cpu_cores: 2, memory_mib: 1024}
price_per_request: 1000
price_per_second: 5
replicas: 2
""" % ("cd" * 32)
MINIMAL_SERVICE = (
    "kind: service\nimage: unchained/sample-service:1\nport: 8000\nprice_per_request: 1\n"
)


def test_a_full_service_spec_reads_as_written():
    spec = servicespec_from_yaml(SERVICE)
    assert spec.kind == "service" and spec.port == 8000 and spec.health_path == "/health"
    assert spec.resources.gpus == 1 and spec.resources.cpu_cores == 2
    assert (spec.price_per_request, spec.price_per_second, spec.replicas) == (1000, 5, 2)
    assert spec.env == {"MODEL": "tiny"} and spec.command is None


def test_service_defaults_one_small_replica_health_at_slash_health():
    spec = servicespec_from_yaml(MINIMAL_SERVICE)
    assert spec.replicas == 1 and spec.health_path == "/health" and spec.price_per_second == 0
    assert spec.resources.gpus == 0 and spec.resources.cpu_cores == 1
    assert not hasattr(spec.resources, "disk_mib")  # a service has no /out


def test_parse_spec_tells_the_kinds_apart():
    assert isinstance(parse_spec({"kind": "service", "image": "a", "port": 1,
                                  "price_per_second": 1}), ServiceSpec)  # fmt: skip
    job = {"image": "busybox:1.36", "command": ["true"], "max_duration_s": 1,
           "max_price_lovelace": 0}  # fmt: skip
    assert parse_spec(job) == MINIMAL
    assert parse_spec({**job, "kind": "job"}) == MINIMAL


def test_a_job_without_kind_or_with_kind_job_keeps_its_pinned_id():
    spelled = jobspec_from_yaml(
        "kind: job\nimage: busybox:1.36\ncommand: ['true']\nmax_duration_s: 1\n"
        "max_price_lovelace: 0\n"
    )
    assert spelled.job_id().hex() == MINIMAL_JOB_ID
    assert b"kind" not in spelled.canonical_json()


def test_a_service_is_digested_as_a_job_is_kind_included():
    spec = servicespec_from_yaml(SERVICE)
    dumped = spec.model_dump(mode="json")
    assert spec.canonical_json() == independent(dumped)
    assert spec.service_id() == hashlib.sha256(independent(dumped)).digest()
    assert json.loads(spec.canonical_json())["kind"] == "service"
    reordered = servicespec_from_yaml("\n".join(reversed(SERVICE.strip().splitlines())))
    assert reordered.service_id() == spec.service_id()
    assert spec.model_copy(update={"port": 8001}).service_id() != spec.service_id()
    assert ServiceSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("kind: vm", "kind: must be one of job, service, llm, pod, not 'vm'"),
        ("port: 0", "port: Input should be greater than or equal to 1"),
        ("port: 65536", "port: Input should be less than or equal to 65535"),
        ("port: '80'", "port: Input should be a valid integer"),
        ("health_path: health", "health_path: must be an absolute URL path"),
        ("health_path: '/he alth'", "health_path: must be an absolute URL path"),
        ("price_per_request: 0", "a service names price_per_request and/or price_per_second"),
        ("price_per_request: -1", "price_per_request: Input should be greater than or equal"),
        ("replicas: 0", "replicas: Input should be greater than or equal to 1"),
        ("resources: {disk_mib: 10}", "resources.disk_mib: unknown field"),
        ("resources: {min_vram_mib: 10}", "resources: min_vram_mib is set but gpus is 0"),
        ("image: 'Not An Image'", "image: not a docker image reference"),
        ("env: {NVIDIA_VISIBLE_DEVICES: all}", "NVIDIA_* variables are set by the provider"),
        ("command: []", "command: List should have at least 1 item"),
        ("max_duration_s: 5", "max_duration_s: unknown field"),
    ],
)
def test_bad_service_fields_are_refused_naming_the_field(change, message):
    base = dict(line.split(": ", 1) for line in MINIMAL_SERVICE.splitlines())
    key, value = change.split(": ", 1)
    text = "\n".join(f"{k}: {v}" for k, v in {**base, key: value}.items())
    with pytest.raises(JobSpecError) as caught:
        servicespec_from_yaml(text)
    assert message in str(caught.value)


def test_a_missing_port_is_named():
    with pytest.raises(JobSpecError, match="port: required field is missing"):
        servicespec_from_yaml("kind: service\nimage: a\nprice_per_request: 1\n")


def test_a_service_is_not_a_job_and_a_job_not_a_service(tmp_path):
    with pytest.raises(JobSpecError, match="this is a service spec, not a job"):
        jobspec_from_yaml(MINIMAL_SERVICE)
    with pytest.raises(JobSpecError, match="a service spec says kind: service"):
        servicespec_from_yaml("image: busybox\ncommand: [echo]\nmax_duration_s: 5\n"
                              "max_price_lovelace: 0\n")  # fmt: skip
    path = tmp_path / "service.yaml"
    path.write_text("kind: service\nimage: a\n")
    with pytest.raises(JobSpecError, match=r"service.yaml:\nport: required field is missing"):
        load_servicespec(path)
