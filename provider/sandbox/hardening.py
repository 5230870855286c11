"""The hardened docker options for one job: everything the runner asks the engine for, in one
pure function, so what a job gets can be read (and tested) without starting anything. The
hardening itself (`hardened_options`) is shared with services (`services.py`).

Defaults deny: no network unless the spec asks (then a bridge of its own that reaches only the
Internet: `egress.py`), read-only root, no capabilities, no privilege gain, a non-root user,
bounded pids, memory (no swap), CPU and logs, /tmp as tmpfs, /out as the job's own
size-limited filesystem, GPUs pinned by UUID and nothing else visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

from offchain.protocol.job.gpu_slices import GpuSlice
from offchain.protocol.job.jobspec import Bundle, JobSpec
from provider.config import MIB, RunnerSettings
from provider.gpu.mps import PIPE_IN_CONTAINER, slice_environment
from provider.sandbox.egress import network_name

LABEL_RUNNER = "unchained.runner"  # which runner (state directory) owns the container
LABEL_JOB = "unchained.job"
GPU_CAPABILITIES = [["gpu", "compute", "utility"]]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
LOG_MAX = {"max-size": "10m", "max-file": "1"}  # the engine keeps the last 10 MB of output


@dataclass(frozen=True)
class JobMounts:
    out: Path  # the job's /out filesystem, mounted on the host
    inputs: Path | None  # staged input files, or None when the job has none


def container_name(runner_id: str, job_id: str) -> str:
    return f"unchained-{runner_id}-{job_id}"


def gpu_environment(gpu_uuids: list[str]) -> dict[str, str]:
    """Pin the NVIDIA runtime to the job's GPUs, overriding an image's NVIDIA_VISIBLE_DEVICES=all;
    "void" keeps a GPU-less job away from every GPU."""
    if not gpu_uuids:
        return {"NVIDIA_VISIBLE_DEVICES": "void"}
    return {
        "NVIDIA_VISIBLE_DEVICES": ",".join(gpu_uuids),
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }


def thread_environment(cores: int) -> dict[str, str]:
    """The container sees every host CPU but may use only `cores`: math libraries that start a
    thread per visible CPU would oversubscribe the CPU quota and spin."""
    return {name: str(cores) for name in THREAD_VARIABLES}


def hardened_options(
    image: str, bundle: Bundle, env: dict[str, str], gpu_uuids: list[str], settings: RunnerSettings
) -> dict[str, Any]:
    """The hardening every container the provider starts gets, a job's or a service's (its
    caller adds what differs: command, name, labels, network, mounts): one place, so the two
    cannot drift apart."""
    memory = bundle.memory_mib * MIB
    options: dict[str, Any] = {
        "image": image,
        "environment": {
            "HOME": "/tmp",
            **thread_environment(bundle.cpu_cores),
            **env,
            **gpu_environment(gpu_uuids),
        },
        "user": f"{settings.uid}:{settings.gid}",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "init": True,  # a real PID 1 reaps zombies and passes signals on
        "pids_limit": settings.pids_limit,
        "mem_limit": memory,
        "memswap_limit": memory,  # no swap: memory is what was reserved
        "nano_cpus": bundle.cpu_cores * 1_000_000_000,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={settings.tmp_mib}m,mode=1777"},
        "ulimits": [
            Ulimit(name="core", soft=0, hard=0),
            Ulimit(name="nofile", soft=4096, hard=4096),
        ],
        "log_config": LogConfig(type=LogConfig.types.JSON, config=LOG_MAX),
    }
    if gpu_uuids:
        options["device_requests"] = [
            DeviceRequest(device_ids=list(gpu_uuids), capabilities=GPU_CAPABILITIES)
        ]
    return options


def slice_options(gpu_slice: GpuSlice | None, mps_pipe: Path | None) -> dict[str, Any]:
    """What a job on a slice of a shared GPU gets beyond the hardening (the container's GPU is
    `gpu_slice.device`): on MIG nothing (the instance is the device); on MPS the limits, set
    after the spec's environment so they win, the MPS daemon's pipe directory `mps_pipe`
    (root's, not writable by the job's user) and the host's IPC namespace, where MPS clients
    meet the server's shared memory."""
    if gpu_slice is None or gpu_slice.isolation == "mig":
        return {"environment": {}, "mounts": []}
    if mps_pipe is None:
        raise ValueError("an MPS slice needs the daemon's pipe directory")
    return {
        "environment": slice_environment(gpu_slice.memory_mib, gpu_slice.sm_percent),
        "mounts": [Mount(PIPE_IN_CONTAINER, str(mps_pipe), type="bind")],
        "ipc_mode": "host",
    }


def container_options(
    runner_id: str,
    job_id: str,
    spec: JobSpec,
    image: str,
    mounts: JobMounts,
    gpu_uuids: list[str],
    cgroup_parent: str,
    settings: RunnerSettings,
    gpu_slice: GpuSlice | None = None,
    mps_pipe: Path | None = None,
) -> dict[str, Any]:
    """Keyword arguments for `client.containers.create` that run `spec` as job `job_id` (on
    whole GPUs `gpu_uuids`, or on `gpu_slice`; under MPS, through the daemon's `mps_pipe`)."""
    volumes = [Mount("/out", str(mounts.out), type="bind")]
    if mounts.inputs is not None:
        volumes.append(Mount("/in", str(mounts.inputs), type="bind", read_only=True))
    extra = slice_options(gpu_slice, mps_pipe)
    volumes.extend(extra.pop("mounts"))
    devices = [gpu_slice.device] if gpu_slice is not None else gpu_uuids
    hardened = hardened_options(image, spec.resources, spec.env, devices, settings)
    hardened["environment"].update(extra.pop("environment"))
    return {
        **hardened,
        **extra,
        "command": list(spec.command),
        "name": container_name(runner_id, job_id),
        "labels": {LABEL_RUNNER: runner_id, LABEL_JOB: job_id},
        "working_dir": "/out",
        # a networked job has its own bridge, fenced off from the host and its LAN (egress.py)
        "network_mode": network_name(runner_id, job_id) if spec.network else "none",
        "mounts": volumes,
        "cgroup_parent": cgroup_parent,
    }
