"""Provider runner costs, measured against the real docker engine.

- start latency: from the call to the engine's StartedAt, for the runner (hardened options,
  /out filesystem, inputs, cgroup parent) and for docker-py's `containers.run` of the same
  image and command with default options; `start_overhead_ms` is the difference of medians
- round trip: the whole job (runner: start, meter, pack /out, clean up) against
  `containers.run` + `wait` + `remove`
- metering: CPU time of the sampling thread while it samples a live job's cgroup at 10 Hz,
  as a percentage of one core (`metering_core_percent_10hz`)

- the daemon (`unchained provider run` in its own process, default loop periods) against a
  devnet and the real market in its own process: `assignment_to_running_ms_p50`, from the
  daemon's log line for an assignment received to the engine's start event for the job's
  container (image cached; the escrow checked on chain and the acceptance sent in between);
  `daemon_idle_core_percent`, the daemon's CPU time (/proc/<pid>/stat) while it heartbeats,
  long-polls and runs its payout rounds with no job, as a percentage of one core

Targets: start overhead <= 150 ms; metering <= 1% of a core; assignment to running p50
<= 1,000 ms; idle daemon <= 1% of a core.
Prints a table and writes bench/results/provider.json (`--daemon-only` measures the daemon
and keeps the other figures). Run: .venv/bin/python -m bench.provider
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import docker
import httpx

from devnet.process import DevnetProcess
from offchain.protocol.job.jobspec import JobSpec
from provider.config import RunnerSettings
from provider.images import recipes as images
from provider.metering.cgroups import JobCgroup
from provider.metering.sampler import SAMPLE_INTERVAL_MS, Sampler, docker_time_ns
from provider.sandbox.hardening import LABEL_JOB
from provider.sandbox.runner import Runner
from tests.market.client import Party
from tests.market.processes import MarketProcess
from tests.protocol.onchain import wallet
from tests.provider.chain import deployed
from tests.provider.daemon_harness import (
    IDENTITY,
    ProviderProcess,
    market_settings,
    new_provider,
    request_and_lock,
    wait_state,
)
from tests.provider.daemon_harness import spec as daemon_spec

RESULTS = Path(__file__).parent / "results" / "provider.json"
TARGET_START_OVERHEAD_MS = 150
TARGET_METERING_CORE_PERCENT = 1.0
TARGET_ASSIGNMENT_TO_RUNNING_MS = 1_000
TARGET_DAEMON_IDLE_CORE_PERCENT = 1.0
PRODUCTION_LOOPS = {"heartbeat_ms": 30_000, "poll_s": 20, "payout_every_ms": 30_000}


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


def assigned_ms(log: str, job: str) -> int:
    """When the daemon received `job`'s assignment: its log line's time (local, ms)."""
    line = next(line for line in log.splitlines() if f"job {job} assigned" in line)
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return int(stamp.timestamp() * 1000)


def started_ms(client: docker.DockerClient, job: str, since: int) -> int:
    """The engine's start event for `job`'s container (ms)."""
    events = client.events(
        since=since, until=int(time.time()) + 1, decode=True,
        filters={"event": "start", "label": f"{LABEL_JOB}={job}"},
    )  # fmt: skip
    return next(iter(events))["timeNano"] // 1_000_000


def daemon_cpu_ticks(pid: int) -> int:
    """utime + stime of the process, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def daemon_figures(work: Path, rounds: int, idle_s: int) -> dict[str, float | int]:
    """The daemon on a devnet with the real market: assignment to running, then idle CPU."""
    client = docker.from_env()
    image = images.busybox_image(client)
    devnet = DevnetProcess(work / "devnet").start()
    daemon: ProviderProcess | None = None
    try:
        deployment_file = work / "deployment.json"
        deployment = await deployed(devnet, deployment_file)
        settle_key = await wallet(devnet)
        settle_key.key.save(str(work / "market.skey"))
        settings = market_settings(work, devnet, deployment_file, work / "market.skey")
        market = MarketProcess(settings, work / "market.log").start()
        try:
            daemon, _ = await new_provider(devnet, work, deployment_file, market.url,
                                           bundles=1, **PRODUCTION_LOOPS)  # fmt: skip
            await daemon.start().logged("offer published")
            latencies = []
            async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
                consumer = Party.new(http, IDENTITY, await wallet(devnet))
                for _ in range(rounds):  # one slot: each job ends before the next is locked
                    since = int(time.time()) - 1
                    job = await request_and_lock(
                        devnet, deployment, consumer, daemon_spec(image, "true")
                    )
                    await wait_state(consumer, job.job, {"completed", "settling", "settled"})
                    began = assigned_ms(daemon.log(), job.job)
                    latencies.append(started_ms(client, job.job, since) - began)
                    await wait_state(consumer, job.job, {"settled"})
            await asyncio.sleep(2)  # the last delivery's requests are over
            assert daemon.process is not None
            ticks = os.sysconf("SC_CLK_TCK")
            before, began_s = daemon_cpu_ticks(daemon.process.pid), time.monotonic()
            await asyncio.sleep(idle_s)
            used = daemon_cpu_ticks(daemon.process.pid) - before
            idle = used / ticks / (time.monotonic() - began_s) * 100
        finally:
            if daemon is not None:
                daemon.stop()
                daemon.reap()
            market.stop()
    finally:
        devnet.stop()
    return {
        "daemon_rounds": rounds,
        "assignment_to_running_ms_p50": round(statistics.median(latencies)),
        "assignment_to_running_ms_max": max(latencies),
        "daemon_idle_seconds": idle_s,
        "daemon_idle_core_percent": round(idle, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--metering-seconds", type=int, default=20)
    parser.add_argument("--daemon-rounds", type=int, default=10)
    parser.add_argument("--idle-seconds", type=int, default=30)
    parser.add_argument("--daemon-only", action="store_true", help="keep the runner's figures")
    args = parser.parse_args()
    if args.daemon_only:
        results = json.loads(RESULTS.read_text())
    else:
        results = run(args.rounds, args.metering_seconds)
    with tempfile.TemporaryDirectory(prefix="unchained-bench-daemon-") as work:
        daemon = asyncio.run(daemon_figures(Path(work), args.daemon_rounds, args.idle_seconds))
    results.update(daemon)
    width = max(len(k) for k in results)
    for name, value in results.items():
        print(f"{name:<{width}}  {value}")
    verdicts = {
        "start_overhead_ms": results["start_overhead_ms"] <= TARGET_START_OVERHEAD_MS,
        "metering_core_percent_10hz": results["metering_core_percent_10hz"]
        <= TARGET_METERING_CORE_PERCENT,
        "assignment_to_running_ms_p50": results["assignment_to_running_ms_p50"]
        <= TARGET_ASSIGNMENT_TO_RUNNING_MS,
        "daemon_idle_core_percent": results["daemon_idle_core_percent"]
        <= TARGET_DAEMON_IDLE_CORE_PERCENT,
    }
    for name, met in verdicts.items():
        print(f"target {name}: {'met' if met else 'MISSED'}")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
