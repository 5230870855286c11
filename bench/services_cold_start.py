"""A service's cold start on the real engine, its image cached (issue 23): from a ServiceSpec to
its first healthy answer (`Services.start`: its bridge, the hardened container created and
started, the port published on 127.0.0.1, /health polled every 50 ms until it answers, the
endpoint registered), then the first /predict through the published port, then `stop`.

The sample service image (provider/sample_service.py on the python image) is built, or found
cached, before the first run; each run starts from nothing of the service left.

Prints a table and writes bench/results/services_cold_start.json.
Run: .venv/bin/python -m bench.services_cold_start [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import docker
import httpx

from offchain.protocol.jobspec import ServiceSpec
from provider import images
from provider.config import RunnerSettings
from provider.services import Services

RESULTS = Path(__file__).parent / "results" / "services_cold_start.json"


def ms_since(start_ns: int) -> float:
    return round((time.perf_counter_ns() - start_ns) / 1e6, 1)


def one_run(services: Services, spec: ServiceSpec, name: str) -> dict[str, float]:
    start = time.perf_counter_ns()
    started = services.start(name, spec)
    cold_start_ms = ms_since(start)
    start = time.perf_counter_ns()
    answer = httpx.post(f"{started.upstream}/predict", json={"values": [1, 2, 3]})
    answer.raise_for_status()
    first_predict_ms = ms_since(start)
    start = time.perf_counter_ns()
    services.stop(name)
    return {"cold_start_ms": cold_start_ms, "first_predict_ms": first_predict_ms,
            "stop_ms": ms_since(start)}  # fmt: skip


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": round(statistics.median(values), 1), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    client = docker.from_env()
    image = images.sample_service_image(client)  # built here once, then cached by the engine
    spec = ServiceSpec(kind="service", image=image, port=images.SAMPLE_SERVICE_PORT,
                       price_per_request=1_000)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="unchained-bench-services-") as scratch:
        settings = RunnerSettings(state_dir=Path(scratch) / "state")
        services = Services(client, settings)
        samples = [one_run(services, spec, f"bench-{i}") for i in range(runs)]
    print(f"{'run':>4} {'cold start ms':>14} {'first /predict ms':>18} {'stop ms':>9}")
    for i, sample in enumerate(samples):
        print(f"{i:>4} {sample['cold_start_ms']:>14} {sample['first_predict_ms']:>18} "
              f"{sample['stop_ms']:>9}")  # fmt: skip
    result = {
        "image": image,
        "runs": runs,
        "cpus": os.cpu_count(),
        "docker": client.version()["Version"],
        **{key: summary([s[key] for s in samples]) for key in samples[0]},
        "samples": samples,
    }
    for key in samples[0]:
        print(f"{key}: " + ", ".join(f"{k} {v}" for k, v in result[key].items()))
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
