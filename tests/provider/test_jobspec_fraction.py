"""A fraction of a GPU in a spec: `gpus: 0` with gpu_memory_mib + gpu_sm_percent, integers,
both or neither, the spec's bytes unchanged for whole GPUs; and no spec may set the variables
the provider sets to hold a job to its GPU or slice (NVIDIA_*, CUDA_MPS_*)."""

from __future__ import annotations

import pytest

from offchain.protocol.job.jobspec import JobSpec, JobSpecError, jobspec_from_yaml, parse_spec

BASE = "image: busybox\ncommand: [echo]\nmax_duration_s: 5\nmax_price_lovelace: 0\n"


def test_a_fraction_reads_and_is_in_the_specs_bytes():
    fraction = "resources: {gpus: 0, gpu_memory_mib: 4096, gpu_sm_percent: 25}"
    spec = jobspec_from_yaml(BASE + fraction)
    assert spec.resources.fraction == (4096, 25) and spec.resources.gpus == 0
    assert b'"gpu_memory_mib":4096,"gpu_sm_percent":25' in spec.canonical_json()
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec
    whole = jobspec_from_yaml(BASE + "resources: {gpus: 1}")
    assert whole.resources.fraction is None and b"gpu_sm" not in whole.canonical_json()
    assert spec.job_id() != jobspec_from_yaml(BASE).job_id()


def test_services_and_pods_ask_fractions_alike():
    service = parse_spec({"kind": "service", "image": "nginx", "port": 80, "price_per_second": 1,
                          "resources": {"gpu_memory_mib": 1024, "gpu_sm_percent": 10}})  # fmt: skip
    assert service.resources.fraction == (1024, 10)


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("{gpu_memory_mib: 4096}", "names both gpu_memory_mib and gpu_sm_percent"),
        ("{gpu_sm_percent: 25}", "names both gpu_memory_mib and gpu_sm_percent"),
        ("{gpus: 1, gpu_memory_mib: 4096, gpu_sm_percent: 25}", "set gpus to 0"),
        ("{gpu_memory_mib: 4096, gpu_sm_percent: 101}", "resources.gpu_sm_percent: Input should"),
        ("{gpu_memory_mib: 4096, gpu_sm_percent: 2.5}", "gpu_sm_percent: Input should be a valid"),
        ("{gpu_memory_mib: '4096', gpu_sm_percent: 25}", "gpu_memory_mib: Input should be a val"),
        ("{gpu_memory_mib: -1, gpu_sm_percent: 25}", "gpu_memory_mib: Input should be greater"),
        ("{gpus: 0.25}", "resources.gpus: Input should be a valid integer"),
    ],
)
def test_a_bad_fraction_is_refused_naming_the_field(resources, message):
    with pytest.raises(JobSpecError, match=message):
        jobspec_from_yaml(BASE + f"resources: {resources}")


@pytest.mark.parametrize(
    "name",
    ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
     "CUDA_MPS_PIPE_DIRECTORY", "NVIDIA_VISIBLE_DEVICES"],
)  # fmt: skip
def test_the_providers_variables_are_refused_with_a_clear_message(name):
    with pytest.raises(JobSpecError) as caught:
        jobspec_from_yaml(BASE + f"env: {{{name}: '0=99999M'}}")
    prefix = name.split("_")[0] + ("_MPS_" if name.startswith("CUDA") else "_")
    assert f"env: '{name}': {prefix}* variables are set by the provider" in str(caught.value)
    assert jobspec_from_yaml(BASE + "env: {CUDA_HOME: /usr/local/cuda}").env  # others are fine
