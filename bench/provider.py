"""Provider runner costs, measured against the real docker engine.

- start latency: from the call to the engine's StartedAt, for the runner (hardened options,
  /out filesystem, inputs, cgroup parent) and for docker-py's `containers.run` of the same
  image and command with default options; `start_overhead_ms` is the difference of medians
- round trip: the whole job (runner: start, meter, pack /out, clean up) against
  `containers.run` + `wait` + `remove`
- metering: CPU time of the sampling thread while it samples a live job's cgroup at 10 Hz,
  as a percentage of one core (`metering_core_percent_10hz`)

Targets: start overhead <= 150 ms; metering <= 1% of a core.
Prints a table and writes bench/results/provider.json. Run: .venv/bin/python -m bench.provider
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import docker

from offchain.protocol.jobspec import JobSpec
from provider import images
from provider.cgroups import JobCgroup
from provider.config import RunnerSettings
from provider.metering import SAMPLE_INTERVAL_MS, Sampler, docker_time_ns
from provider.runner import Runner

RESULTS = Path(__file__).parent / "results" / "provider.json"
TARGET_START_OVERHEAD_MS = 150
TARGET_METERING_CORE_PERCENT = 1.0


def spec(image: str, command: list[str], seconds: int = 60) -> JobSpec:
    return JobSpec(image=image, command=command, max_duration_s=seconds, max_price_lovelace=0)


def runner_round(runner: Runner, image: str, job_id: str) -> tuple[float, float]:
    """(start latency ms, round trip ms) of one job through the runner."""
    called = time.time_ns()
    began = time.perf_counter()
    result = runner.run(job_id, spec(image, ["true"]))
    round_trip = (time.perf_counter() - began) * 1000
    assert result.status == "succeeded" and result.record is not None, result
    return (result.record.started_at_ms * 1_000_000 - called) / 1e6, round_trip


def docker_py_round(client: docker.DockerClient, image: str) -> tuple[float, float]:
    """The same for `containers.run` with default options, then wait and remove."""
    called = time.time_ns()
    began = time.perf_counter()
    container = client.containers.run(image, ["true"], detach=True)
    container.wait()
    container.reload()  # for StartedAt (the runner inspects its container too)
    container.remove()
    round_trip = (time.perf_counter() - began) * 1000
    started = docker_time_ns(container.attrs["State"]["StartedAt"])
    return (started - called) / 1e6, round_trip


def metering_cost(runner: Runner, image: str, seconds: int) -> tuple[float, float]:
    """(% of a core, microseconds per tick) of a sampler on a live job's cgroup."""
    job_id = "bench_metering"
    job = threading.Thread(
        target=runner.run, args=(job_id, spec(image, ["sleep", str(seconds + 2)]))
    )
    job.start()
    cgroup = JobCgroup(runner.runner_id, job_id, runner.systemd)
    while not cgroup.exists():
        time.sleep(0.01)
    sampler = Sampler(cgroup).start()
    time.sleep(seconds)
    sampler.stop()
    job.join()
    ticks = seconds * 1000 // SAMPLE_INTERVAL_MS
    return sampler.thread_cpu_ns / (seconds * 1e9) * 100, sampler.thread_cpu_ns / ticks / 1000


def run(rounds: int, metering_seconds: int) -> dict[str, float | int | str]:
    client = docker.from_env()
    image = images.busybox_image(client)
    with tempfile.TemporaryDirectory(prefix="unchained-bench-") as state:
        runner = Runner(client, RunnerSettings(state_dir=Path(state)))
        for warm in range(2):
            runner_round(runner, image, f"warm_{warm}")
            docker_py_round(client, image)
        ours, theirs = [], []
        for n in range(rounds):  # interleaved, so drift hits both alike
            ours.append(runner_round(runner, image, f"bench_{n}"))
            theirs.append(docker_py_round(client, image))
        core_percent, us_per_tick = metering_cost(runner, image, metering_seconds)
    info = client.info()
    ours_start = statistics.median(s for s, _ in ours)
    theirs_start = statistics.median(s for s, _ in theirs)
    return {
        "engine": f"docker {info['ServerVersion']}, cgroup v{info.get('CgroupVersion', '?')}",
        "cpus": info["NCPU"],
        "rounds": rounds,
        "runner_start_latency_ms_p50": round(ours_start, 1),
        "docker_py_start_latency_ms_p50": round(theirs_start, 1),
        "start_overhead_ms": round(ours_start - theirs_start, 1),
        "runner_round_trip_ms_p50": round(statistics.median(t for _, t in ours), 1),
        "docker_py_round_trip_ms_p50": round(statistics.median(t for _, t in theirs), 1),
        "metering_seconds": metering_seconds,
        "metering_core_percent_10hz": round(core_percent, 3),
        "metering_us_per_tick": round(us_per_tick, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--metering-seconds", type=int, default=20)
    args = parser.parse_args()
    results = run(args.rounds, args.metering_seconds)
    width = max(len(k) for k in results)
    for name, value in results.items():
        print(f"{name:<{width}}  {value}")
    verdicts = {
        "start_overhead_ms": results["start_overhead_ms"] <= TARGET_START_OVERHEAD_MS,
        "metering_core_percent_10hz": results["metering_core_percent_10hz"]
        <= TARGET_METERING_CORE_PERCENT,
    }
    for name, met in verdicts.items():
        print(f"target {name}: {'met' if met else 'MISSED'}")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
