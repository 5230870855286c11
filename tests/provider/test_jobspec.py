"""The job spec refuses what no provider could run, and says which field is wrong."""

from __future__ import annotations

import pytest

from offchain.protocol.job.jobspec import (
    MAX_SUPPLY_LOVELACE,
    JobSpec,
    JobSpecError,
    jobspec_from_yaml,
    load_jobspec,
)

GOOD = """
image: registry.example:5000/team/trainer:1.2
command: [python3, /opt/train.py, --epochs, "3"]
env: {SEED: "7"}
inputs:
  - {path: data/train.csv, url: "https://example.org/train.csv", sha256: "%s"}
resources: {gpus: 2, min_vram_mib: 40000, cpu_cores: 8, memory_mib: 32768, disk_mib: 10240}
max_duration_s: 3600
max_price_lovelace: 25000000
network: true
""" % ("ab" * 32)


def test_a_full_spec_reads_as_written():
    spec = jobspec_from_yaml(GOOD)
    assert spec.resources.gpus == 2 and spec.resources.min_vram_mib == 40000
    assert spec.command[-1] == "3" and spec.env == {"SEED": "7"}
    assert spec.inputs[0].path == "data/train.csv" and spec.network is True


def test_defaults_are_a_small_cpu_job_without_network():
    spec = jobspec_from_yaml(
        "image: busybox\ncommand: [echo]\nmax_duration_s: 5\nmax_price_lovelace: 0\n"
    )
    assert spec.resources.gpus == 0 and spec.resources.cpu_cores == 1
    assert spec.network is False and spec.inputs == [] and spec.env == {}


def test_a_spec_survives_a_json_round_trip():
    spec = jobspec_from_yaml(GOOD)
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("gpu: 1", "gpu: unknown field"),
        ("resources: {gpus: 1, vram: 3}", "resources.vram: unknown field"),
        ("max_duration_s: 1.5", "max_duration_s: Input should be a valid integer"),
        ("max_duration_s: 0", "max_duration_s: Input should be greater than or equal to 1"),
        ("max_price_lovelace: '5'", "max_price_lovelace: Input should be a valid integer"),
        ("max_price_lovelace: -1", "max_price_lovelace: Input should be greater than or equal"),
        (
            f"max_price_lovelace: {MAX_SUPPLY_LOVELACE + 1}",
            "max_price_lovelace: Input should be less",
        ),
        ("resources: {min_vram_mib: 8000}", "resources: min_vram_mib is set but gpus is 0"),
        ("resources: {cpu_cores: 0}", "resources.cpu_cores: Input should be greater than or equal"),
        ("resources: {memory_mib: 1}", "resources.memory_mib: Input should be greater than or"),
        ("image: 'Not An Image'", "image: not a docker image reference"),
        ("command: []", "command: List should have at least 1 item"),
        ("command: 'python3 train.py'", "command: Input should be a valid list"),
        ("env: {NVIDIA_VISIBLE_DEVICES: all}", "NVIDIA_* variables are set by the provider"),
        ("env: {'1X': y}", "'1X' is not a variable name"),
        (
            "inputs: [{path: ../etc/passwd, url: 'https://x.org/a', sha256: '%s'}]" % ("0" * 64),
            "inputs.0.path: must be a relative path",
        ),
        (
            "inputs: [{path: a, url: 'file:///etc/passwd', sha256: '%s'}]" % ("0" * 64),
            "inputs.0.url: scheme must be one of https, http, data",
        ),
        (
            "inputs: [{path: a, url: 'https://x.org/a', sha256: ABC}]",
            "inputs.0.sha256: must be 64 lower-case hex digits",
        ),
    ],
)
def test_impossible_values_are_refused_naming_the_field(change, message):
    base = {
        "image": "image: busybox",
        "command": "command: [echo]",
        "max_duration_s": "max_duration_s: 5",
        "max_price_lovelace": "max_price_lovelace: 0",
    }
    key = change.split(":")[0]
    text = "\n".join([line for k, line in base.items() if k != key] + [change])
    with pytest.raises(JobSpecError) as caught:
        jobspec_from_yaml(text)
    assert message in str(caught.value)


def test_missing_fields_and_non_mappings_are_named():
    with pytest.raises(JobSpecError, match="max_duration_s: required field is missing"):
        jobspec_from_yaml("image: busybox\ncommand: [echo]\nmax_price_lovelace: 0\n")
    with pytest.raises(JobSpecError, match="a job spec is a mapping"):
        jobspec_from_yaml("- just\n- a list\n")
    with pytest.raises(JobSpecError, match="not valid YAML"):
        jobspec_from_yaml("image: [\n")


def test_two_inputs_at_one_path_are_refused():
    item = "{path: a, url: 'data:,x', sha256: '%s'}" % ("0" * 64)
    with pytest.raises(JobSpecError, match="two inputs have the same path"):
        jobspec_from_yaml(
            f"image: busybox\ncommand: [echo]\nmax_duration_s: 5\nmax_price_lovelace: 0\n"
            f"inputs: [{item}, {item}]\n"
        )


def test_loading_a_file_names_the_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("image: busybox\n")
    with pytest.raises(JobSpecError, match=r"job.yaml:\ncommand: required field is missing"):
        load_jobspec(path)
    with pytest.raises(JobSpecError, match="cannot read"):
        load_jobspec(tmp_path / "absent.yaml")
