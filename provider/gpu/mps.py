"""NVIDIA MPS for slices of a GPU without MIG: the control daemon, and what each job container
on a slice gets.

The daemon (`nvidia-cuda-mps-control -d`) runs with its pipe and log directories under the
provider's state directory (`<state>/mps/pipe`, `<state>/mps/log`), so it is this provider's
own and never another MPS user's. Each job container on an MPS slice gets the pipe directory
mounted and, set by the provider after the spec's environment (a spec naming `CUDA_MPS_*` or
`NVIDIA_*` is refused at validation), `CUDA_MPS_PIPE_DIRECTORY`,
`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M` (device 0: the container sees its one GPU as 0)
and `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<pct>`. Code in the job can change its own environment
before CUDA starts, so the environment alone is not the bound: the daemon's defaults for its
server are set to the largest slice (memory per GPU, SM share over all). A client's SM share
can only further constrain what the control daemon sets (NVIDIA's MPS docs); that the same
holds of memory is checked on a GPU (test_gpu_sharing.py). A GPU's slices are equal
(`[[offer.shared_gpus]]`), so on it no job gets past its slice.

MPS's fault model: every client of one GPU shares one MPS server, so a fatal GPU fault in one
client (an illegal address, say) ends every client on that GPU; memory is limited per client,
not isolated. The offer says so (`offchain.protocol.job.gpu_slices.FAULT_NOTES`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from offchain.core.errors import UnchainedError
from offchain.protocol.job.gpu_slices import GpuSlice

CONTROL = "nvidia-cuda-mps-control"
PIPE_IN_CONTAINER = "/run/nvidia-mps"  # where a job container finds the pipe directory
TIMEOUT_S = 10


class MpsError(UnchainedError, RuntimeError):
    """The MPS control daemon could not be started or does not answer."""


def control_binary() -> str | None:
    """The control program on PATH, or None: then this machine offers no MPS slices."""
    return shutil.which(CONTROL)


def slice_environment(memory_mib: int, sm_percent: int) -> dict[str, str]:
    """What a job container on an MPS slice gets, after the spec's own environment."""
    return {
        "CUDA_MPS_PIPE_DIRECTORY": PIPE_IN_CONTAINER,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory_mib}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(sm_percent),
    }


@dataclass(frozen=True)
class MpsDaemon:
    """The provider's MPS control daemon, by its directories under the state directory."""

    state_dir: Path
    binary: str = CONTROL

    @property
    def pipe_dir(self) -> Path:
        return self.state_dir / "mps" / "pipe"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "mps" / "log"

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
        }

    def command(self, line: str) -> str:
        """One line to the running daemon (its interactive shell); its answer."""
        try:
            done = subprocess.run(
                [self.binary], input=line + "\n", capture_output=True, text=True,
                env=self.environment(), timeout=TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsError(f"{self.binary}: {exc}") from exc
        if done.returncode != 0:
            raise MpsError(f"{line!r}: {(done.stdout + done.stderr).strip() or done.returncode}")
        return done.stdout

    def running(self) -> bool:
        try:
            self.command("get_server_list")
        except MpsError:
            return False
        return True

    def start(self, max_memory_mib: dict[int, int], max_sm_percent: int) -> None:
        """Start the daemon unless it runs; then bound every new server by the largest slice
        (`max_memory_mib`: by the GPU's host index). The pipe directory is opened to the jobs'
        user (they connect to its sockets)."""
        if not self.running():
            self.pipe_dir.mkdir(parents=True, exist_ok=True)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.pipe_dir.chmod(0o755)
            try:
                subprocess.run(
                    [self.binary, "-d"], env=self.environment(), timeout=TIMEOUT_S, check=True
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise MpsError(f"{self.binary} -d: {exc}") from exc
            if not self.running():
                raise MpsError(f"{self.binary} -d started no daemon (log: {self.log_dir})")
        for index, mib in sorted(max_memory_mib.items()):
            self.command(f"set_default_device_pinned_mem_limit {index} {mib}M")
        self.command(f"set_default_active_thread_percentage {max_sm_percent}")

    def stop(self) -> None:
        """Quit the daemon (its servers end once their clients have); not running is fine."""
        if self.running():
            self.command("quit")


def start_for(state_dir: Path, slices: list[GpuSlice]) -> MpsDaemon | None:
    """The daemon for the MPS slices among `slices`, started and bounded by the largest slice
    of each GPU (None when there are none): an offer never names a slice it cannot enforce."""
    served = [piece for piece in slices if piece.isolation == "mps"]
    if not served:
        return None
    largest: dict[int, int] = {}
    for piece in served:
        largest[piece.gpu_index] = max(largest.get(piece.gpu_index, 0), piece.memory_mib)
    daemon = MpsDaemon(state_dir)
    daemon.start(largest, max(piece.sm_percent for piece in served))
    return daemon
