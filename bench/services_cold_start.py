"""A service's cold start on the real engine (issue 23): from a ServiceSpec to its first healthy
answer (`Services.start`: its bridge, the hardened container created and started, the port
published on 127.0.0.1, /health polled every 50 ms until it answers, the endpoint registered),
then the first /predict through the published port, then `stop`; with the image cached, and
with the image NOT cached: named by digest, absent from the engine, pulled from a registry.

The sample service image (samples/sample_service.py on the python image) is built, or found
cached, before the first run; each run starts from nothing of the service left. For the
uncached runs, a copy of it with a layer of its own (its filesystem flattened, plus a file that
makes it unique: a copy sharing the python image's layer would find that layer in the engine)
is pushed to Debian's docker-registry on a free local port (tests/registry.py) and removed
from the engine before each run, so every layer comes over HTTP from the registry, is checked
against its digest and unpacked.

Prints a table and writes bench/results/services_cold_start.json.
Run: .venv/bin/python -m bench.services_cold_start [--runs N] [--uncached-runs N]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

import docker
import httpx

from offchain.protocol.job.jobspec import ServiceSpec
from provider.config import RunnerSettings
from provider.rentals.services import Services
from samples import images as sample_images
from tests.registry import LocalRegistry, forget, local_registry

RESULTS = Path(__file__).parent / "results" / "services_cold_start.json"
UNCACHED_REPOSITORY = "unchained/bench-uncached"


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


def runs_of(
    client: docker.DockerClient, spec: ServiceSpec, runs: int, scratch: Path, uncached: bool
) -> list[dict[str, float]]:
    """`runs` cold starts of `spec`; `uncached`: its image removed from the engine first."""
    settings = RunnerSettings(state_dir=scratch / "state", pull_images=uncached)
    services = Services(client, settings)
    samples = []
    for i in range(runs):
        if uncached:
            forget(client, spec.image)
        samples.append(one_run(services, spec, f"bench-{i}"))
    return samples


def registry_copy(client: docker.DockerClient, image: str, registry: LocalRegistry) -> str:
    """`image` flattened into one layer of its own (plus a unique file), pushed to `registry`
    and removed from the engine: its digest reference."""
    config = client.images.get(image).attrs["Config"]
    changes = [f"ENV {pair}" for pair in config.get("Env") or []]
    changes += [f"EXPOSE {port}" for port in config.get("ExposedPorts") or {}]
    changes.append(f"CMD {json.dumps(config['Cmd'])}")
    nonce = secrets.token_hex(8)
    holder = client.containers.create(image, ["true"])
    try:
        with tempfile.NamedTemporaryFile(suffix=".tar") as flat:
            for chunk in holder.export():
                flat.write(chunk)
            flat.flush()
            with tarfile.open(flat.name, "a") as tar:
                info = tarfile.TarInfo("etc/unchained-bench-copy")
                info.size = len(nonce)
                tar.addfile(info, io.BytesIO(nonce.encode()))
            client.api.import_image_from_file(
                flat.name, repository=UNCACHED_REPOSITORY, tag=nonce, changes=changes
            )
    finally:
        holder.remove()
    local = f"{UNCACHED_REPOSITORY}:{nonce}"
    pinned = registry.push(client, local, UNCACHED_REPOSITORY)
    forget(client, local)
    return pinned


def table(title: str, samples: list[dict[str, float]]) -> None:
    print(title)
    print(f"{'run':>4} {'cold start ms':>14} {'first /predict ms':>18} {'stop ms':>9}")
    for i, sample in enumerate(samples):
        print(f"{i:>4} {sample['cold_start_ms']:>14} {sample['first_predict_ms']:>18} "
              f"{sample['stop_ms']:>9}")  # fmt: skip


def summarized(samples: list[dict[str, float]]) -> dict:
    found = {key: summary([s[key] for s in samples]) for key in samples[0]}
    for key, values in found.items():
        print(f"  {key}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return {"runs": len(samples), **found, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--uncached-runs", type=int, default=3)
    arguments = parser.parse_args()
    client = docker.from_env()
    image = sample_images.sample_service_image(client)  # built here once, then cached by the engine
    spec = ServiceSpec(kind="service", image=image, port=sample_images.SAMPLE_SERVICE_PORT,
                       price_per_request=1_000)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="unchained-bench-services-") as scratch:
        root = Path(scratch)
        cached = runs_of(client, spec, arguments.runs, root / "cached", uncached=False)
        (root / "registry").mkdir()
        with local_registry(root / "registry") as registry:
            pinned = registry_copy(client, image, registry)
            by_digest = spec.model_copy(update={"image": pinned})
            uncached = runs_of(client, by_digest, arguments.uncached_runs, root / "pulled", True)
            forget(client, pinned)
    table(f"image cached ({image})", cached)
    cached_summary = summarized(cached)
    table(f"image NOT cached: pulled by digest from a local registry ({pinned})", uncached)
    uncached_summary = summarized(uncached)
    result = {
        "image": image,
        "cpus": os.cpu_count(),
        "docker": client.version()["Version"],
        "image_bytes": client.images.get(image).attrs["Size"],
        **cached_summary,
        "uncached": {"image": pinned, **uncached_summary},
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
