"""`unchained provider init | exec | selftest`, through the real CLI, engine and runner."""

from __future__ import annotations

import json
import tomllib

import pytest
from typer.testing import CliRunner

from provider.config import RunnerSettings
from provider.sandbox.runner import Runner
from tests.provider.conftest import assert_no_leftovers
from unchained.cli import app

cli = CliRunner()


@pytest.fixture
def paths(tmp_path):
    return {"config": tmp_path / "provider.toml", "state": tmp_path / "state"}


def invoke(*args):
    return cli.invoke(app, ["provider", *map(str, args)])


def test_init_writes_an_offer_of_this_machine_and_keeps_an_existing_one(paths):
    made = invoke("init", "--config", paths["config"], "--state-dir", paths["state"],
                  "--cpu-cores", 1, "--price-cpu-core", 7)  # fmt: skip
    assert made.exit_code == 0, made.output
    written = tomllib.loads(paths["config"].read_text())
    assert written["offer"]["cpu_cores"] == 1 and written["offer"]["prices"]["cpu_core"] == 7
    assert written["runner"]["state_dir"] == str(paths["state"])
    again = invoke("init", "--config", paths["config"])
    assert again.exit_code == 2 and "use --force" in again.stderr
    assert invoke("init", "--config", paths["config"], "--force").exit_code == 0


def test_init_refuses_gpus_that_are_not_here_and_impossible_numbers(paths):
    result = invoke("init", "--config", paths["config"], "--gpus", "GPU-elsewhere")
    assert result.exit_code == 2 and "no such GPU here: GPU-elsewhere" in result.stderr
    result = invoke("init", "--config", paths["config"], "--cpu-cores", 0)
    assert result.exit_code == 2 and "cpu_cores: Input should be greater than or equal to 1" in (
        result.stderr
    )
    assert not paths["config"].exists()


def write_spec(tmp_path, image, command, **extra):
    spec = {"image": image, "command": command, "max_duration_s": 30,
            "max_price_lovelace": 10_000_000, **extra}  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def test_exec_runs_a_spec_like_a_market_job_and_prints_its_record(tmp_path, paths, busybox, client):
    assert invoke("init", "--config", paths["config"], "--state-dir", paths["state"]).exit_code == 0
    spec = write_spec(tmp_path, busybox, ["sh", "-c", "echo working; echo 42 > /out/answer"])
    result = invoke("exec", spec, "--config", paths["config"], "--job-id", "cli_job")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["job_id"] == "cli_job" and record["exit_code"] == 0
    assert record["billable_units"] == 1 and record["cpu_cores"] == 1
    assert "working\n" in result.stderr  # the job's log, streamed
    # default prices: 1 core x 20 + 1 GiB memory (512 MiB, rounded up) x 5 + 1 GiB disk x 1
    assert "billable units 1 x 26 lovelace = 26 lovelace" in result.stderr
    assert (paths["state"] / "results" / "cli_job" / "out.tar").exists()
    assert_no_leftovers(Runner(client, RunnerSettings(state_dir=paths["state"])))


def test_exec_refuses_what_the_offer_cannot_take(tmp_path, paths, busybox):
    spec = write_spec(tmp_path, busybox, ["true"], resources={"gpus": 1})
    result = invoke("exec", spec, "--config", paths["config"], "--state-dir", paths["state"])
    assert result.exit_code == 2
    assert "cannot take the job: 1 GPU(s) with >= 0 MiB wanted, 0 offered" in result.stderr


def test_exec_says_what_is_wrong_with_a_spec(tmp_path, paths):
    spec = write_spec(tmp_path, "busybox", ["true"], gpu=1)
    result = invoke("exec", spec, "--config", paths["config"])
    assert result.exit_code == 2 and "gpu: unknown field" in result.stderr


def test_exec_exits_1_when_the_job_fails(tmp_path, paths, busybox):
    spec = write_spec(tmp_path, busybox, ["sh", "-c", "exit 4"])
    result = invoke("exec", spec, "--config", paths["config"], "--state-dir", paths["state"])
    assert result.exit_code == 1 and json.loads(result.stdout)["exit_code"] == 4


def test_selftest_passes_here_and_says_why_gpu_checks_are_skipped(paths, busybox, python):
    result = invoke("selftest", "--config", paths["config"], "--state-dir", paths["state"])
    assert result.exit_code == 0, result.stdout
    outcomes = {line[6:30].strip(): line[:4].strip() for line in result.stdout.splitlines()[:-1]}
    for name in ("engine", "hardening", "memory limit", "pids limit", "duration limit",
                 "disk limit"):  # fmt: skip
        assert outcomes[name] == "PASS", result.stdout
    assert any(name.startswith("cpu benchmark") and o == "PASS" for name, o in outcomes.items())
    if outcomes.get("gpus (NVML)") == "SKIP":  # no GPU here: said so, not failed
        assert "no NVIDIA GPU/driver on this machine" in result.stdout
    assert result.stdout.splitlines()[-1] == "PASSED: 0 check(s) failed"
