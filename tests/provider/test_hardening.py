"""Each hardening setting, seen from inside a job's container (real engine, busybox image)."""

from __future__ import annotations

import pytest

from provider.selftest.checks import PROBE, hardening_problems, job, log_text, parse_facts


@pytest.fixture
def facts(runner, busybox) -> dict[str, str]:
    result = runner.run("hardening_probe", job(busybox, ["sh", "-c", PROBE]))
    assert result.status == "succeeded", log_text(result)
    return {name: value.strip() for name, value in parse_facts(log_text(result)).items()}


def test_no_capabilities_at_all(facts):
    assert facts["capeff"] == "0000000000000000"
    assert facts["capbnd"] == "0000000000000000"  # none can be regained either


def test_no_new_privileges_and_a_seccomp_filter(facts):
    assert facts["nonewprivs"] == "1"
    assert facts["seccomp"] == "2"  # filter mode


def test_only_loopback_without_network(facts):
    assert facts["interfaces"] == "lo"


def test_read_only_root_but_writable_out_and_tmpfs_tmp(facts):
    assert facts["root_writable"] == "no"
    assert facts["out_writable"] == "yes"
    assert facts["tmp_fs"] == "tmpfs"


def test_not_root_and_an_init_as_pid_1(facts):
    assert facts["uid"] == "65534"
    assert facts["pid1"] == "docker-init"


def test_the_selftest_rule_accepts_exactly_these_facts(facts):
    assert hardening_problems(facts) == []
    assert hardening_problems({**facts, "uid": "0"}) == ["uid=0 (want a non-root user)"]
    assert hardening_problems({**facts, "capeff": "00000000a80425fb"}) == [
        "capeff=00000000a80425fb (want 0000000000000000)"
    ]


def test_a_job_that_asks_for_network_gets_an_interface_besides_lo(runner, busybox):
    spec = job(busybox, ["sh", "-c", "ls /sys/class/net"]).model_copy(update={"network": True})
    result = runner.run("with_network", spec)
    assert result.status == "succeeded"
    assert set(log_text(result).split()) > {"lo"}


def test_the_job_environment_pins_threads_and_hides_gpus(runner, busybox):
    spec = job(busybox, ["env"], cpu_cores=2).model_copy(update={"env": {"SEED": "7"}})
    result = runner.run("environment", spec)
    variables = dict(line.split("=", 1) for line in log_text(result).splitlines())
    assert variables["SEED"] == "7"
    assert variables["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert variables["OMP_NUM_THREADS"] == variables["OPENBLAS_NUM_THREADS"] == "2"
