"""The self-test of a slice without a GPU: the probe's report judged, kept in the state
directory and carried by the offer's `gpu_slices`; the check itself driven through a stub
runner standing in for a GPU job (FAKE: no GPU here) and the FAKE MPS control program. The real
probe runs on a GPU in test_gpu_sharing.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from offchain.protocol.job.gpu_slices import FAULT_NOTES, GpuSlice, SliceOffer, SliceSelfTest
from offchain.protocol.job.jobspec import Resources
from provider.capacity import Bundle
from provider.config import RunnerSettings
from provider.daemon.bond import BondView
from provider.daemon.offers import offer_terms
from provider.gpu.inventory import HostInventory
from provider.sandbox.runner import RunResult
from provider.selftest.checks import (
    Check,
    SelfTest,
    load_slice_results,
    save_slice_results,
    slice_key,
    slice_verdict,
)  # fmt: skip
from tests.provider.fake_nvml import H100

MODEL = "NVIDIA H100 80GB HBM3"
SLICE = GpuSlice(H100, 0, MODEL, 0, 8192, 25, "mps")
KEY = (MODEL, 8192, 25)
GOOD = {"gflops": 12000, "alloc_ok_mib": 8128, "past_limit_refused": True}


def test_a_slice_holds_when_most_of_its_memory_is_given_and_past_it_refused():
    measured, ok = slice_verdict(SLICE, GOOD)
    assert ok and measured == SliceSelfTest(matmul_gflops=12000, alloc_ok_mib=8128,
                                            past_limit_refused=True)  # fmt: skip
    assert not slice_verdict(SLICE, {**GOOD, "past_limit_refused": False})[1]
    assert not slice_verdict(SLICE, {**GOOD, "alloc_ok_mib": 6000})[1]  # under 3/4 of 8192
    assert slice_verdict(SLICE, {**GOOD, "alloc_ok_mib": 6144})[1]


def test_the_offer_carries_each_size_of_slices_latest_measurement(tmp_path):
    assert load_slice_results(tmp_path) == {}
    measured, _ = slice_verdict(SLICE, GOOD)
    save_slice_results(tmp_path, {KEY: measured})
    assert load_slice_results(tmp_path) == {KEY: measured}
    entry = SliceOffer(gpu_model=MODEL, memory_mib=8192, sm_percent=25, count=3,
                       isolation="mps", fault_note=FAULT_NOTES["mps"])  # fmt: skip
    other = entry.model_copy(update={"memory_mib": 4096})
    bundle = Bundle(Resources(), "", 0, 0, (entry, other), (10, 5))
    terms = offer_terms(bundle, "addr_test1", BondView(None, 0, None),
                        slice_tests=load_slice_results(tmp_path))  # fmt: skip
    assert [e["selftest"] for e in terms["gpu_slices"]] == [measured.model_dump(), None]
    for broken in ("{not json", "[]", '{"no key": {}}'):
        (tmp_path / "slice_selftests.json").write_text(broken)
        assert load_slice_results(tmp_path) == {}


class StubRunner:
    """Stands in for the runner of a GPU job (FAKE: no GPU here): answers with the probe's
    report and records what it was asked to run."""

    def __init__(self, tmp_path: Path, report: dict) -> None:
        self.log = tmp_path / "log.txt"
        self.log.write_text("warming up\n" + json.dumps(report) + "\n")
        self.asked: list[tuple] = []

    def run(self, job_id, spec, gpus, gpu_slice=None) -> RunResult:
        self.asked.append((spec, gpus, gpu_slice))
        return RunResult(job_id=job_id, status="succeeded", exit_code=0, log_path=self.log)


def slice_test(tmp_path: Path, slices: list[GpuSlice]) -> SelfTest:
    inventory = HostInventory(cpu_cores=2, memory_bytes=1 << 30, disk_total_bytes=1 << 30,
                              disk_free_bytes=1 << 30)  # fmt: skip
    settings = RunnerSettings(state_dir=tmp_path / "state")
    return SelfTest(None, settings, inventory, "cuda:local", slices)  # type: ignore[arg-type]


def test_fake_each_kind_of_slice_is_measured_once_inside_a_slice(tmp_path, fake_mps):
    twin = dataclasses.replace(SLICE, slot=1)  # the same kind: measured once
    test = slice_test(tmp_path, [SLICE, twin])
    stub = StubRunner(tmp_path, GOOD)
    test.runner = stub  # type: ignore[assignment]
    (check,) = test.slice_benchmarks()
    assert check == Check(
        "gpu 0 slice 8192 MiB/25%",
        "pass",
        "mps: 12000 GFLOP/s, 8128 MiB allocated, past the limit refused",
    )
    ((spec, gpus, piece),) = stub.asked
    assert (gpus, piece) == ([], SLICE) and spec.resources.fraction == (8192, 25)
    assert spec.command == ["python", "/in/slice_probe.py", "8192"]
    assert test.slice_results == {KEY: slice_verdict(SLICE, GOOD)[0]} and slice_key(twin) == KEY
    assert any(
        "set_default_active_thread_percentage 25" in line
        for line in fake_mps.read_text().splitlines()
    )  # the MPS daemon was started for it


def test_fake_a_slice_that_lets_a_job_past_its_limit_fails(tmp_path, fake_mps):
    test = slice_test(tmp_path, [SLICE])
    test.runner = StubRunner(tmp_path, {**GOOD, "past_limit_refused": False})  # type: ignore
    (check,) = test.slice_benchmarks()
    assert check.outcome == "fail" and "past the limit ALLOWED" in check.detail


def test_no_shared_gpu_no_slice_check_and_no_mps_no_slices(tmp_path, fake_mps, monkeypatch):
    assert list(slice_test(tmp_path, []).slice_benchmarks()) == [
        Check("gpu slices", "skip", "no shared GPU in the offer")
    ]
    monkeypatch.setenv("FAKE_MPS_BROKEN", "1")
    (check,) = slice_test(tmp_path, [SLICE]).slice_benchmarks()
    assert check.outcome == "fail" and check.detail.startswith("the MPS daemon:")
