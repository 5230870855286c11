"""Scale to zero (issue 35): the cold start of an endpoint the gateway scaled to zero, from the
renter's first request to its answer, with the image cached (the target: <= 5 s here).

For the sample service (`/predict`, its answer) and the sample LLM server (a streamed
completion, its first token): the service started as the daemon starts it (`Services.start`,
`min_replicas: 0`, `scale_down_after_s: 1`), in the book, behind the real gateway with its
`Scaler` (uvicorn in a thread of this process); each run waits until the gateway has scaled it
to zero (its row says so, its container stopped), then times one paid request. The same
request to the warm replica just after is timed too, for comparison.

Run: .venv/bin/python -m bench.services --part scale
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import httpx

from bench.services import CAPACITY
from bench.services_llm import INPUT, MAX_TOKENS, OUTPUT, PROMPT_TEXT, stream
from offchain.protocol.job.jobspec import LlmSpec, ServiceSpec
from offchain.protocol.ledger.iou import IOU_HEADER, SignedIou
from offchain.protocol.tx.channel import OPEN
from provider.config import RunnerSettings
from provider.gateway.app import gateway_app
from provider.gateway.scaler import Scaler
from provider.money.channel_book import ChannelBook, ChannelView
from provider.rentals.book import RentalBook
from provider.rentals.services import Services
from samples import images as sample_images
from tests.provider.test_gateway_support import NETWORK, POINT, RENTER, SCRIPT, running, serving

RUNS = 5
PRICE = 1_000
CHANNEL = b"\x05" * 28
AT_ZERO_WITHIN_S = 60
SCALING = {"replicas": 1, "min_replicas": 0, "scale_down_after_s": 1}
Request = Callable[[httpx.Client, str, dict[str, str]], float]  # one request: ms it took


def service_spec(image: str) -> ServiceSpec:
    return ServiceSpec.model_validate({
        "kind": "service", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
        "price_per_request": PRICE, "resources": {"cpu_cores": 1, "memory_mib": 256}, **SCALING,
    })  # fmt: skip


def llm_spec(image: str) -> LlmSpec:
    return LlmSpec.model_validate({
        "kind": "llm", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
        "price_per_request": PRICE, "price_per_input_token": INPUT,
        "price_per_output_token": OUTPUT, "resources": {"cpu_cores": 1, "memory_mib": 1024},
        **SCALING,
    })  # fmt: skip


def predict(client: httpx.Client, url: str, headers: dict[str, str]) -> float:
    """ms to the sample service's whole answer."""
    begin = time.perf_counter()
    answer = client.post(f"{url}/predict", json={"values": [1, 2, 3]}, headers=headers)
    assert answer.status_code == 200, answer.text
    return (time.perf_counter() - begin) * 1000


def first_token(client: httpx.Client, url: str, headers: dict[str, str]) -> float:
    """ms to a streamed completion's first token."""
    return stream(client, url, headers)[0]


def at_zero(endpoints: RentalBook, services: Services, name: str) -> None:
    """Until the gateway has scaled `name` to zero: its row says so, no container runs."""
    deadline = time.monotonic() + AT_ZERO_WITHIN_S
    while True:
        row = endpoints.get(name)
        if (
            row is not None
            and row.scaled_to_zero
            and not any(c.status == "running" for c in services._of(name))
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} never scaled to zero")
        time.sleep(0.05)


def cold_starts(
    services: Services, scratch: Path, spec: ServiceSpec, request: Request, runs: int
) -> dict[str, Any]:
    """`runs` requests to `spec`'s endpoint at zero and one to it warm after each: ms each."""
    book = ChannelBook(scratch / f"{spec.kind}-channels.sqlite", NETWORK, SCRIPT, credit=0)
    book.open(ChannelView(CHANNEL, "ab" * 32 + "#0", "addr_test1bench",
                          RENTER.to_verification_key().payload, 0, CAPACITY, OPEN),
              POINT)  # fmt: skip
    endpoints = RentalBook(scratch / f"{spec.kind}-endpoints.sqlite")
    row = running(spec.kind, "http://127.0.0.1:9", PRICE, channel=CHANNEL)
    started = services.start(row.name, spec)
    endpoints.add(dataclasses.replace(row, upstream=started.upstream,
                                      spec_json=spec.canonical_json().decode()))  # fmt: skip
    most = (len(PROMPT_TEXT) + 1) * INPUT + MAX_TOKENS * OUTPUT + PRICE  # a request's most
    paid = 0
    cold: list[float] = []
    warm: list[float] = []
    try:
        gateway = gateway_app(book, endpoints, scaler=Scaler(endpoints, services))
        with serving(gateway) as url, httpx.Client(timeout=120) as client:
            for _ in range(runs):
                at_zero(endpoints, services, row.name)
                for times in (cold, warm):
                    paid += most
                    iou = SignedIou.sign(RENTER, NETWORK, SCRIPT, CHANNEL, paid)
                    times.append(request(client, f"{url}/endpoints/{spec.kind}",
                                         {IOU_HEADER: iou.to_header()}))  # fmt: skip
    finally:
        services.stop(row.name)
        book.close()
        endpoints.close()
    return {"runs": runs, "cold_ms": summary(cold), "warm_ms": summary(warm),
            "samples": {"cold_ms": cold, "warm_ms": warm}}  # fmt: skip


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "max": max(values)}


def run(runs: int = RUNS) -> dict[str, Any]:
    client = docker.from_env()
    service_image = sample_images.sample_service_image(client)
    llm_image = sample_images.llm_service_image(client)
    with tempfile.TemporaryDirectory(prefix="unchained-bench-scale-") as directory:
        scratch = Path(directory)
        services = Services(client, RunnerSettings(state_dir=scratch / "state"))
        return {
            "service": {"image": service_image,
                        **cold_starts(services, scratch, service_spec(service_image), predict,
                                      runs)},
            "llm": {"image": llm_image,
                    **cold_starts(services, scratch, llm_spec(llm_image), first_token, runs)},
            "target_cold_ms": 5_000,
        }  # fmt: skip


def rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    shown = []
    for kind, what in (("service", "its answer"), ("llm", "a stream's first token")):
        cold, warm = result[kind]["cold_ms"], result[kind]["warm_ms"]
        shown += [
            (f"scale to zero, {kind}: first request at zero to {what} (ms)",
             f"median {cold['median']:,.0f}, max {cold['max']:,.0f} (target <= 5,000)"),
            (f"scale to zero, {kind}: the same request warm (ms)",
             f"median {warm['median']:,.1f}, max {warm['max']:,.1f}"),
        ]  # fmt: skip
    return shown
