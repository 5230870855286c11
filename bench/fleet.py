"""A job placed through a Ray fleet against the single host (issue 36), on a real cluster of
separate `ray start` processes on this machine (tests/provider/ray_cluster.py: a head that runs
no jobs and two nodes, Ray's default health checks).

- `start_ms`: from `run` called to the job's container started (its `on_start`), the part of
  assignment-to-running that placement changes, for the host's runner and for the fleet (a
  placement group, the node actor's start, its first poll), runs alternated; the added p50 is
  the target's (<= 1 s over the single host's 766 ms assignment-to-running).
- `noticed_s`: from a node's processes killed mid-job (its container with them) to the job
  placed again on the other node: Ray's health checks marking the node dead (target <= 30 s).
- `rental_moved_s`: from the node of an endpoint's replica killed to the replica answering its
  health path on the other node, asked for where it runs as the daemon's loop does (every
  0.5 s): the node's death noticed, a placement group, the container started and healthy.

Prints a table and writes bench/results/fleet.json.
Run: .venv/bin/python -m bench.fleet [--runs N] [--deaths N] [--rental-deaths N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import httpx
import ray

from bench.services_cold_start import summary
from offchain.protocol.job.jobspec import JobSpec, ServiceSpec
from provider.config import DaemonSettings, RunnerSettings
from provider.daemon.rentals import TICK_MS
from provider.images import recipes as images
from provider.placement.fleet_rentals import FleetServices
from provider.placement.ray_fleet import RayPlacement
from provider.rentals.book import ENDPOINT, RUNNING, Rental
from provider.rentals.services import Services
from provider.sandbox.runner import Runner
from samples import images as sample_images
from tests.provider.ray_cluster import RayCluster

RESULTS = Path(__file__).parent / "results" / "fleet.json"


def job(image: str, script: str, seconds: int = 120) -> JobSpec:
    return JobSpec.model_validate({
        "image": image, "command": ["sh", "-c", script], "max_duration_s": seconds,
        "max_price_lovelace": 10_000_000,
        "resources": {"cpu_cores": 1, "memory_mib": 256, "disk_mib": 8},
    })  # fmt: skip


def start_ms(placement: Runner | RayPlacement, job_id: str, spec: JobSpec) -> float:
    """From `run` called to the container started; the run is waited to its end."""
    began = time.perf_counter()
    started: list[float] = []
    placement.run(job_id, spec, [], None, None, None,
                  lambda: started.append(time.perf_counter()))  # fmt: skip
    return round((started[0] - began) * 1000, 1)


def noticed_s(cluster: RayCluster, fleet: RayPlacement, spec: JobSpec, job_id: str) -> float:
    """A node killed under a running job: seconds until the job is placed on another."""
    pool = ThreadPoolExecutor(1)
    running = pool.submit(fleet.run, job_id, spec, [])
    while not ((attempt := fleet.attempts.get(job_id)) and attempt.started):
        time.sleep(0.05)
    node = attempt.nodes[0]
    killed = time.perf_counter()
    cluster.power_off(node, docker.from_env(), fleet.settings)
    while len(attempt.nodes) < 2:
        time.sleep(0.05)
    noticed = time.perf_counter() - killed
    while fleet.placed.get(job_id) is None:  # placed again: the stop reaches it there
        time.sleep(0.05)
    fleet.stop(job_id)
    running.result()
    pool.shutdown()
    cluster.reap(node, docker.from_env(), fleet.settings)
    cluster.add_node(node)
    return round(noticed, 1)


def rental_moved_s(cluster: RayCluster, fleet: RayPlacement, sample: str, n: int) -> float:
    """An endpoint's node killed: seconds until its replica answers on another node."""
    client = docker.from_env()
    spec = ServiceSpec.model_validate({
        "kind": "service", "image": sample, "port": sample_images.SAMPLE_SERVICE_PORT,
        "price_per_request": 1, "resources": {"cpu_cores": 1, "memory_mib": 256},
    })  # fmt: skip
    deployment = Rental(f"bench-svc-{n}", ENDPOINT, b"\x01" * 28, b"\x02" * 32,
                        spec.canonical_json().decode(), RUNNING, "", "", "", 0, 1, 0,
                        created_ms=1)  # fmt: skip
    services = FleetServices(fleet)
    services.start_deployment(deployment, [])
    (replica,) = services.placed[deployment.name].replicas
    node = replica.node
    assert node is not None
    killed = time.perf_counter()
    cluster.power_off(node.name, client, fleet.settings)
    while not ((now := services.upstream(deployment)) and replica.node not in (None, node)):
        time.sleep(TICK_MS / 1000)
    moved = time.perf_counter() - killed
    httpx.get(f"{now}/health").raise_for_status()
    services.stop(deployment.name)
    gone = Services(client, cluster.node_settings(node.name, fleet.settings))
    for name in set(gone.leftovers()["networks"]):  # its machine back: what it left removed
        gone.stop(name)
    cluster.add_node(node.name)
    return round(moved, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--deaths", type=int, default=2)
    parser.add_argument("--rental-deaths", type=int, default=2)
    args = parser.parse_args()
    client = docker.from_env()
    busybox = images.busybox_image(client)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as folder:
        settings = RunnerSettings(state_dir=Path(folder) / "state")
        cluster = RayCluster(Path(folder), settings.state_dir, fast_health_checks=False)
        try:
            cluster.start_head()
            cluster.wait_head()
            ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
            for name in ("a", "b"):
                cluster.add_node(name)
            daemon = DaemonSettings(placement="ray", ray_address=cluster.address)
            fleet = RayPlacement(daemon, settings)
            fleet.inventory()  # the node actors up, as at the daemon's start
            alone = settings.model_copy(update={"state_dir": settings.state_dir / "host"})
            host = Runner(client, alone)
            quick = job(busybox, "true")
            host_ms, fleet_ms = [], []
            for run in range(args.runs):
                host_ms.append(start_ms(host, f"bench_host_{run}", quick))
                fleet_ms.append(start_ms(fleet, f"bench_fleet_{run}", quick))
            deaths = [noticed_s(cluster, fleet, job(busybox, "sleep 100"), f"bench_death_{n}")
                      for n in range(args.deaths)]  # fmt: skip
            sample = sample_images.sample_service_image(client)
            moves = [rental_moved_s(cluster, fleet, sample, n) for n in range(args.rental_deaths)]
        finally:
            ray.shutdown()
            cluster.stop()
    results = {
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 1),
        "nodes": 2,
        "runs": args.runs,
        "host_start_ms": summary(host_ms),
        "fleet_start_ms": summary(fleet_ms),
        "fleet_adds_ms_p50": round(statistics.median(fleet_ms) - statistics.median(host_ms), 1),
        "node_death_noticed_s": summary(deaths),
        "rental_moved_s": summary(moves),
        "samples": {
            "host_start_ms": host_ms,
            "fleet_start_ms": fleet_ms,
            "noticed_s": deaths,
            "rental_moved_s": moves,
        },
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'placement':<10} {'start p50 ms':>13} {'min':>8} {'max':>8}")
    for name, values in (("host", host_ms), ("ray", fleet_ms)):
        print(f"{name:<10} {statistics.median(values):>13.1f} {min(values):>8.1f} "
              f"{max(values):>8.1f}")  # fmt: skip
    print(f"the fleet adds {results['fleet_adds_ms_p50']} ms (p50); a node's death noticed in "
          f"{deaths} s; an endpoint answering on another node {moves} s after its node "
          "died")  # fmt: skip


if __name__ == "__main__":
    main()
