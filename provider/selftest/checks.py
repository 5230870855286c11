"""What an operator runs before offering a machine: every check goes through the real runner
(the path market jobs take) and says pass, fail, or skip with the reason.

Checks: the engine answers; hardening holds as seen from inside a container; memory, pids,
duration and disk limits fire and are reported; GPUs are visible to NVML and, pinned by UUID,
inside a container; a short compute benchmark on the CPU and on each GPU; and each kind of
slice of a shared GPU offered, measured inside one (matmul throughput, memory allocated up to
the slice's limit, one allocation past it refused), kept for the offer's `gpu_slices`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import docker

from offchain.protocol.job.gpu_slices import GpuSlice, SliceSelfTest
from offchain.protocol.job.jobspec import InputFile, JobSpec, Resources
from offchain.protocol.job.offer import SelfTestSummary
from provider.config import RunnerSettings
from provider.gpu import mps
from provider.gpu.inventory import HostInventory
from provider.images import recipes as images
from provider.sandbox.outvolume import Archive
from provider.sandbox.runner import Runner, RunResult

WORKLOADS = Path(images.WORKLOADS_IN_IMAGE)
PROBE = (images.WORKLOADS_DIR / "probe.sh").read_text()
GPU_BENCH_IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
ROOT_CAPS = "0000000000000000"  # no capability at all
SECCOMP_FILTER = "2"
SELFTEST_PIDS_LIMIT = 16
SUMMARY_FILE = "selftest.json"  # in the state directory: the daemon's offers carry it
SLICES_FILE = "slice_selftests.json"  # beside it: each kind of slice's measurement
SLICE_PROBE = images.WORKLOADS_DIR / "slice_probe.py"
MATMUL = images.WORKLOADS_DIR / "matmul.py"


@dataclass(frozen=True)
class Check:
    name: str
    outcome: Literal["pass", "fail", "skip"]
    detail: str


def save_summary(state_dir: Path, checks: list[Check], at_ms: int) -> SelfTestSummary:
    """Keep the run's outcome where the daemon finds it for its next offer."""
    summary = SelfTestSummary.of(((c.name, c.outcome) for c in checks), at_ms)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / SUMMARY_FILE).write_text(summary.model_dump_json())
    return summary


def load_summary(state_dir: Path) -> SelfTestSummary | None:
    """The latest saved self-test (None: never run here, or unreadable)."""
    try:
        return SelfTestSummary.model_validate_json((state_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None


SliceKey = tuple[str, int, int]  # GPU model, memory MiB, SM percent: one size of slice


def slice_key(piece: GpuSlice) -> SliceKey:
    """What names a size of slice (as the offer's `slice_key`): one measured stands for all."""
    return piece.gpu_model, piece.memory_mib, piece.sm_percent


def save_slice_results(state_dir: Path, results: dict[SliceKey, SliceSelfTest]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    data = {"|".join(map(str, key)): result.model_dump() for key, result in results.items()}
    (state_dir / SLICES_FILE).write_text(json.dumps(data, indent=1, sort_keys=True))


def load_slice_results(state_dir: Path) -> dict[SliceKey, SliceSelfTest]:
    """The latest slice measurements, for the offer (none: never run here, or unreadable)."""
    try:
        data = json.loads((state_dir / SLICES_FILE).read_text())
        found = {}
        for key, value in data.items():
            model, memory, sm = key.rsplit("|", 2)
            found[(model, int(memory), int(sm))] = SliceSelfTest.model_validate(value)
        return found
    except (OSError, ValueError, AttributeError):
        return {}


def slice_verdict(piece: GpuSlice, report: dict[str, int | bool]) -> tuple[SliceSelfTest, bool]:
    """The probe's report as the offer carries it, and whether the slice holds: at least three
    quarters of its memory could be allocated (the CUDA context takes some), and the
    allocation past the limit was refused."""
    result = SliceSelfTest(
        matmul_gflops=int(report["gflops"]),
        alloc_ok_mib=int(report["alloc_ok_mib"]),
        past_limit_refused=bool(report["past_limit_refused"]),
    )
    ok = result.past_limit_refused and result.alloc_ok_mib * 4 >= piece.memory_mib * 3
    return result, ok


def verdict(name: str, ok: bool, detail: str) -> Check:
    return Check(name, "pass" if ok else "fail", detail)


def parse_facts(log: str) -> dict[str, str]:
    """The probe's `name=value` lines."""
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def hardening_problems(facts: dict[str, str]) -> list[str]:
    """What the probe saw that a hardened job must not have."""
    expected = {
        "capeff": ROOT_CAPS,
        "capbnd": ROOT_CAPS,
        "nonewprivs": "1",
        "seccomp": SECCOMP_FILTER,
        "interfaces": "lo",
        "root_writable": "no",
        "tmp_fs": "tmpfs",
        "out_writable": "yes",
    }
    problems = [
        f"{name}={facts.get(name, '?').strip()} (want {want})"
        for name, want in expected.items()
        if facts.get(name, "").strip() != want
    ]
    if facts.get("uid", "0") == "0":
        problems.append("uid=0 (want a non-root user)")
    return problems


def job(image: str, command: list[str], seconds: int = 60, **resources: int) -> JobSpec:
    return JobSpec(
        image=image,
        command=command,
        resources=Resources(**resources),
        max_duration_s=seconds,
        max_price_lovelace=0,
    )


def data_input(path: str, content: bytes) -> InputFile:
    """An input carried in the spec itself (a data: URL)."""
    url = "data:application/octet-stream;base64," + base64.b64encode(content).decode()
    return InputFile(path=path, url=url, sha256=hashlib.sha256(content).hexdigest())


def archive_files(archive: Archive) -> dict[str, bytes | None]:
    """Name -> content of each file in a job's output archive (None for directories, links)."""
    files: dict[str, bytes | None] = {}
    with tarfile.open(archive.path) as tar:
        for member in tar.getmembers():
            content = tar.extractfile(member) if member.isreg() else None
            files[member.name] = content.read() if content else None
    return files


def log_text(result: RunResult) -> str:
    return result.log_path.read_text() if result.log_path else ""


class SelfTest:
    def __init__(
        self,
        client: docker.DockerClient,
        settings: RunnerSettings,
        inventory: HostInventory,
        gpu_image: str = GPU_BENCH_IMAGE,
        slices: list[GpuSlice] | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.inventory = inventory
        self.gpu_image = gpu_image
        self.slices = list(slices or [])  # the shared GPUs' slices the offer names
        self.slice_results: dict[SliceKey, SliceSelfTest] = {}

    def run(self) -> Iterator[Check]:
        """Each check as it completes; nothing is left behind (a scratch state directory)."""
        try:
            version = self.client.version()
        except docker.errors.DockerException as exc:
            yield Check("engine", "fail", f"no docker engine answers: {exc}")
            return
        info = self.client.info()
        yield Check(
            "engine",
            "pass",
            f"docker {version['Version']} (API {version['ApiVersion']}), cgroup "
            f"v{info.get('CgroupVersion', '?')} ({info.get('CgroupDriver', '?')} driver)",
        )
        busybox = images.busybox_image(self.client)
        python = images.workloads_image(self.client)
        with tempfile.TemporaryDirectory(prefix="unchained-selftest-") as scratch:
            state = self.settings.model_copy(update={"state_dir": Path(scratch)})
            self.runner = Runner(self.client, state)
            # jobs on MPS slices reach the provider's own MPS daemon, not a scratch one
            self.runner.mps_pipe = mps.MpsDaemon(self.settings.state_dir).pipe_dir
            self.few_pids = Runner(
                self.client,
                state.model_copy(update={"pids_limit": SELFTEST_PIDS_LIMIT}),
            )
            checks: list[Callable[[], Iterator[Check]]] = [
                lambda: self.hardening(busybox),
                lambda: self.memory_limit(python),
                lambda: self.pids_limit(busybox),
                lambda: self.duration_limit(busybox),
                lambda: self.disk_limit(busybox),
                self.gpus_nvml,
                lambda: self.gpus_in_container(python),
                lambda: self.cpu_benchmark(python),
                self.gpu_benchmark,
                self.slice_benchmarks,
            ]
            for check in checks:
                yield from check()

    def _run(
        self, spec: JobSpec, gpus: list[str] | None = None, runner: Runner | None = None
    ) -> RunResult:
        return (runner or self.runner).run(f"selftest_{secrets.token_hex(6)}", spec, gpus)

    def hardening(self, image: str) -> Iterator[Check]:
        result = self._run(job(image, ["sh", "-c", PROBE]))
        problems = hardening_problems(parse_facts(log_text(result)))
        if result.status != "succeeded" or problems:
            yield Check("hardening", "fail", "; ".join(problems) or f"probe {result.status}")
        else:
            yield Check(
                "hardening",
                "pass",
                "no capabilities, no-new-privileges, seccomp, only lo, read-only root, "
                "non-root user, /tmp tmpfs",
            )

    def memory_limit(self, image: str) -> Iterator[Check]:
        result = self._run(job(image, ["python3", "-c", "b = b'x' * (256 << 20)"], memory_mib=64))
        ok = result.status == "oom" and result.record is not None and result.record.oom_killed
        yield verdict("memory limit", ok, f"256 MiB asked of a 64 MiB job: {result.status}")

    def pids_limit(self, image: str) -> Iterator[Check]:
        spawn = f"for i in $(seq {2 * SELFTEST_PIDS_LIMIT}); do sleep 5 & done; wait"
        result = self._run(job(image, ["sh", "-c", spawn]), runner=self.few_pids)
        ok = result.record is not None and result.record.pids_limit_reached
        yield verdict(
            "pids limit",
            ok,
            f"{2 * SELFTEST_PIDS_LIMIT} processes asked, limit {SELFTEST_PIDS_LIMIT}: "
            f"peak {result.record.pids_peak if result.record else '?'}",
        )

    def duration_limit(self, image: str) -> Iterator[Check]:
        result = self._run(job(image, ["sleep", "30"], seconds=1))
        ok = result.status == "timeout" and result.record is not None
        units = result.record.billable_units if result.record else "?"
        yield verdict(
            "duration limit",
            ok,
            f"30 s asked of a 1 s job: {result.status}, {units} unit(s) billed",
        )

    def disk_limit(self, image: str) -> Iterator[Check]:
        fill = "dd if=/dev/zero of=/out/fill bs=1M count=16"
        result = self._run(job(image, ["sh", "-c", fill], disk_mib=4))
        written = len(archive_files(result.output).get("fill") or b"") if result.output else 0
        ok = result.status == "failed" and written <= 4 << 20
        yield verdict(
            "disk limit",
            ok,
            f"16 MiB asked of a 4 MiB /out: {result.status}, {written >> 10} KiB kept",
        )

    def gpus_nvml(self) -> Iterator[Check]:
        gpu = self.inventory.gpu
        if not gpu.gpus:
            yield Check("gpus (NVML)", "skip", gpu.note)
            return
        names = ", ".join(f"{g.name} {g.uuid} {g.memory_bytes >> 20} MiB" for g in gpu.gpus)
        yield Check(
            "gpus (NVML)", "pass", f"driver {gpu.driver_version}, CUDA {gpu.cuda_version}: {names}"
        )

    def gpus_in_container(self, image: str) -> Iterator[Check]:
        if not self.inventory.gpu.gpus:
            yield Check("gpus in a container", "skip", self.inventory.gpu.note)
            return
        for gpu in self.inventory.gpu.gpus:
            result = self._run(job(image, ["nvidia-smi", "-L"], gpus=1), [gpu.uuid])
            listed = log_text(result)
            ok = result.status == "succeeded" and gpu.uuid in listed and listed.count("GPU-") == 1
            detail = listed.strip() or result.error or result.status
            yield verdict(f"gpu {gpu.index} in a container", ok, detail)

    def cpu_benchmark(self, image: str) -> Iterator[Check]:
        cores = self.inventory.cpu_cores
        result = self._run(job(image, ["python3", str(WORKLOADS / "matmul.py")], cpu_cores=cores))
        yield _benchmark_check(f"cpu benchmark ({cores} cores)", result)

    def gpu_benchmark(self) -> Iterator[Check]:
        if not self.inventory.gpu.gpus:
            yield Check("gpu benchmark", "skip", self.inventory.gpu.note)
            return
        script = data_input("matmul.py", MATMUL.read_bytes())
        for gpu in self.inventory.gpu.gpus:
            spec = job(self.gpu_image, ["python", "/in/matmul.py", "cuda"], gpus=1)
            spec = spec.model_copy(update={"inputs": [script]})
            yield _benchmark_check(f"gpu {gpu.index} benchmark", self._run(spec, [gpu.uuid]))

    def slice_benchmarks(self) -> Iterator[Check]:
        """Each kind of slice offered, measured in one slice of it (results in
        `slice_results`, for the offer)."""
        if not self.slices:
            yield Check("gpu slices", "skip", "no shared GPU in the offer")
            return
        try:
            mps.start_for(self.settings.state_dir, self.slices)
        except mps.MpsError as exc:
            yield Check("gpu slices", "fail", f"the MPS daemon: {exc}")
            return
        scripts = [data_input(path.name, path.read_bytes()) for path in (SLICE_PROBE, MATMUL)]
        for piece in self.slices:
            key = slice_key(piece)
            if key in self.slice_results:
                continue
            name = f"gpu {piece.gpu_index} slice {piece.memory_mib} MiB/{piece.sm_percent}%"
            command = ["python", "/in/slice_probe.py", str(piece.memory_mib)]
            spec = job(self.gpu_image, command, gpu_memory_mib=piece.memory_mib,
                       gpu_sm_percent=piece.sm_percent)  # fmt: skip
            spec = spec.model_copy(update={"inputs": scripts})
            result = self.runner.run(f"selftest_{secrets.token_hex(6)}", spec, [], gpu_slice=piece)
            if result.status != "succeeded":
                yield Check(name, "fail", result.error or log_text(result)[-300:] or result.status)
                continue
            measured, ok = slice_verdict(piece, json.loads(log_text(result).splitlines()[-1]))
            self.slice_results[key] = measured
            yield verdict(
                name, ok,
                f"{piece.isolation}: {measured.matmul_gflops} GFLOP/s, {measured.alloc_ok_mib} "
                f"MiB allocated, past the limit "
                f"{'refused' if measured.past_limit_refused else 'ALLOWED'}",
            )  # fmt: skip


def _benchmark_check(name: str, result: RunResult) -> Check:
    if result.status != "succeeded":
        return Check(name, "fail", result.error or log_text(result)[-300:] or result.status)
    report = json.loads(log_text(result).strip().splitlines()[-1])
    return Check(name, "pass", f"{report['gflops']} GFLOP/s ({report['device']})")
