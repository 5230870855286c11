"""LLM endpoints (`kind: llm`, issue 35) on this machine: the sample LLM server
(`samples/llm_service.py`, a PyTorch transformer on the CPU) run by the provider's hardened
service runner, reached directly and through the gateway.

- `cold_start`: from an LlmSpec to its first healthy answer (`Services.start`, the image
  cached), then the first streamed token: RUNS runs, each from nothing of it left;
- `streams`: STREAMS streamed completions (temperature 0, the same prompt: the same tokens
  each time; usage in every chunk, as the gateway asks), alternately straight to the server
  and through the gateway (a forked uvicorn, uvloop, as `unchained provider gateway` serves;
  each paid by a fresh IOU): time to first
  token p50/p99 of each and the gateway's overhead on it, tokens a second after the first
  (median) of each and the gateway's cost on it, in per cent;
- `fee_cost`: 1,000 chat completions paid by IOUs (by their tokens, the renter paying each
  answer with the next request's IOU and the last with a pay) on one devnet channel: the fees
  of its open, claim and end, beside 1,000 escrowed jobs' (bench/services.py `fee_cost`).

Written into bench/results/services.json under "llm".
Run: .venv/bin/python -m bench.services --part llm
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
import httpx

from bench.services import (
    CAPACITY,
    Load,
    Signer,
    channel_id,
    fee_cost,
    listening,
    percentile,
    serve_gateway,
)
from offchain.protocol.job.jobspec import Bundle, LlmSpec
from offchain.protocol.ledger.iou import IOU_HEADER, SignedIou
from offchain.protocol.tx.channel import OPEN
from provider.config import RunnerSettings
from provider.gateway.app import gateway_app
from provider.gateway.tokens import STREAM_OPTIONS
from provider.money.channel_book import ChannelBook, ChannelView
from provider.rentals.book import Rental, RentalBook
from provider.rentals.services import Services
from samples import images as sample_images
from tests.provider.test_gateway_support import NETWORK, POINT, RENTER, SCRIPT, running, serving

RUNS = 5
STREAMS = 100
MAX_TOKENS = 32
PROMPT_TEXT = "Once upon a time"
# the stream options the gateway adds to a stream (usage in every chunk): asked directly too,
# so both ways the server does the same work
PROMPT = {"prompt": PROMPT_TEXT, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
          "stream_options": STREAM_OPTIONS}  # fmt: skip
CHAT = {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8, "temperature": 0}
INPUT, OUTPUT = 100, 1_000  # lovelace a token
FEE_REQUESTS = 1_000


def spec(image: str) -> LlmSpec:
    return LlmSpec(kind="llm", image=image, port=sample_images.SAMPLE_SERVICE_PORT,
                   price_per_input_token=INPUT, price_per_output_token=OUTPUT,
                   resources=Bundle(cpu_cores=1, memory_mib=1024))  # fmt: skip


def llm_endpoint(name: str, upstream: str, llm: LlmSpec, channel: bytes) -> Rental:
    """The book's row of `llm` running at `upstream`, paid on `channel`."""
    return dataclasses.replace(running(name, upstream, 0, channel=channel),
                               spec_json=llm.canonical_json().decode())  # fmt: skip


def stream(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[float, float, int]:
    """One streamed completion: ms to its first token, tokens a second after it, tokens."""
    start = time.perf_counter()
    first = last = 0.0
    tokens = 0
    with client.stream("POST", f"{url}/v1/completions", json=PROMPT, headers=headers) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:])["choices"]
            if choices and choices[0]["text"]:
                last = time.perf_counter()
                first = first or last
                tokens += 1
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    return (first - start) * 1000, rate, tokens


def cold_start(services: Services, llm: LlmSpec, runs: int) -> tuple[list[dict[str, float]], str]:
    """`runs` cold starts, each but the last stopped after: their figures, where the last runs."""
    samples = []
    upstream = ""
    for run in range(runs):
        start = time.perf_counter()
        started = services.start(f"bench-llm-{run}", llm)
        upstream = started.upstream
        healthy = time.perf_counter()
        with httpx.Client(timeout=60) as client:
            first_token_ms, _, _ = stream(client, started.upstream, {})
        samples.append({"healthy_ms": (healthy - start) * 1000,
                        "first_token_ms": (healthy - start) * 1000 + first_token_ms,
                        "ttft_after_healthy_ms": first_token_ms})  # fmt: skip
        if run < runs - 1:
            services.stop(f"bench-llm-{run}")
    return samples, upstream


def streams(upstream: str, image_spec: LlmSpec, count: int) -> dict[str, Any]:
    """`count` streams each way, alternately; the gateway in a forked process."""
    fork = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="services-llm-") as directory:
        scratch = Path(directory)
        book = ChannelBook(scratch / "channels.sqlite", NETWORK, SCRIPT, credit=0)
        endpoints = RentalBook(scratch / "endpoints.sqlite")
        view = ChannelView(channel_id(0), "ab" * 32 + "#0", "addr_test1bench",
                           RENTER.to_verification_key().payload, 0, CAPACITY, OPEN)  # fmt: skip
        book.open(view, POINT)
        endpoints.add(llm_endpoint("llm", upstream, image_spec, view.id))
        book.close()
        endpoints.close()
        sock, port = listening()
        stop = fork.Event()
        report = fork.Queue()
        server = fork.Process(target=serve_gateway, args=(sock, stop, scratch, report))
        server.start()
        most = (len(PROMPT_TEXT) + 1) * INPUT + MAX_TOKENS * OUTPUT  # a stream's most
        direct, through = [], []
        try:
            with httpx.Client(timeout=60) as client:
                gateway = f"http://127.0.0.1:{port}/endpoints/llm"
                for n in range(count + 1):  # the first of each warms its connection
                    iou = SignedIou.sign(RENTER, NETWORK, SCRIPT, view.id, (n + 1) * most)
                    pair = (stream(client, upstream, {}),
                            stream(client, gateway, {IOU_HEADER: iou.to_header()}))  # fmt: skip
                    if n:
                        direct.append(pair[0])
                        through.append(pair[1])
        finally:
            stop.set()
            report.get()
            server.join()
    ttft = {"direct": [d[0] for d in direct], "gateway": [t[0] for t in through]}
    rates = {"direct": statistics.median(d[1] for d in direct),
             "gateway": statistics.median(t[1] for t in through)}  # fmt: skip
    return {
        "streams": count,
        "tokens_per_stream": direct[0][2],
        "ttft_ms": {way: {"p50": percentile(v, 50), "p99": percentile(v, 99)}
                    for way, v in ttft.items()},
        "ttft_overhead_ms": {p: percentile(ttft["gateway"], q) - percentile(ttft["direct"], q)
                             for p, q in (("p50", 50), ("p99", 99))},
        "tokens_per_s": rates,
        "tokens_per_s_overhead_percent": (rates["direct"] - rates["gateway"])
        / rates["direct"] * 100,
    }  # fmt: skip


def chat_completions(upstream: str, llm: LlmSpec, requests: int) -> tuple[int, Load]:
    """`fee_cost`'s load: `requests` chat completions through the gateway, each paying the
    answers before it by their tokens (one completion costs `each`, the same tokens every
    time at temperature 0), the last paid after."""
    with httpx.Client(timeout=60) as probe:
        usage = probe.post(f"{upstream}/v1/chat/completions", json=CHAT).json()["usage"]
    each = usage["prompt_tokens"] * INPUT + usage["completion_tokens"] * OUTPUT

    def load(book: ChannelBook, endpoints: RentalBook, channel: bytes, sign: Signer) -> float:
        endpoints.add(llm_endpoint("chat", upstream, llm, channel))
        with serving(gateway_app(book, endpoints)) as url, httpx.Client(timeout=60) as client:
            start = time.perf_counter()
            for n in range(requests):
                answer = client.post(f"{url}/endpoints/chat/v1/chat/completions", json=CHAT,
                                     headers={IOU_HEADER: sign(n * each)})  # fmt: skip
                assert answer.status_code == 200, answer.text
            paid = client.post(f"{url}/deployments/chat/pay",
                               headers={IOU_HEADER: sign(requests * each)})  # fmt: skip
            assert paid.status_code == 200, paid.text
            return time.perf_counter() - start

    return each, load


def run(
    runs: int, count: int, fee_requests: int, kept: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The figures; `fee_requests` 0: `kept`'s fee_cost is kept (the other parts re-run)."""
    client = docker.from_env()
    image = sample_images.llm_service_image(client)
    llm = spec(image)
    with tempfile.TemporaryDirectory(prefix="unchained-bench-llm-") as scratch:
        services = Services(client, RunnerSettings(state_dir=Path(scratch) / "state"))
        try:
            starts, upstream = cold_start(services, llm, runs)
            measured = streams(upstream, llm, count)
            if fee_requests:
                each, load = chat_completions(upstream, llm, fee_requests)
                fees = asyncio.run(fee_cost(fee_requests, fee_requests * each, load))
                fees["chat_completion_lovelace"] = each
            else:
                fees = (kept or {})["fee_cost"]
        finally:
            for name in set(services.leftovers()["containers"]):
                services.stop(name)
    return {
        "image": image,
        "cold_start": {
            "runs": runs,
            **{key: {"median": statistics.median(s[key] for s in starts),
                     "max": max(s[key] for s in starts)} for key in starts[0]},
            "samples": starts,
        },
        **measured,
        "fee_cost": fees,
    }  # fmt: skip


def rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    start, ttft, rate = result["cold_start"], result["ttft_ms"], result["tokens_per_s"]
    fees = result["fee_cost"]
    return [
        ("llm: cold start to healthy, cached image (ms)",
         f"median {start['healthy_ms']['median']:,.0f}, max {start['healthy_ms']['max']:,.0f}"),
        ("llm: cold start to first token (ms)",
         f"median {start['first_token_ms']['median']:,.0f}, "
         f"max {start['first_token_ms']['max']:,.0f}"),
        ("llm: TTFT direct p50 / p99 (ms)", f"{ttft['direct']['p50']:.2f} / "
                                            f"{ttft['direct']['p99']:.2f}"),
        ("llm: TTFT via gateway p50 / p99 (ms)", f"{ttft['gateway']['p50']:.2f} / "
                                                 f"{ttft['gateway']['p99']:.2f}"),
        ("llm: gateway overhead on TTFT p50 / p99 (ms)",
         f"{result['ttft_overhead_ms']['p50']:.2f} / {result['ttft_overhead_ms']['p99']:.2f}"),
        ("llm: tokens/s direct / via gateway", f"{rate['direct']:,.1f} / {rate['gateway']:,.1f}"),
        ("llm: gateway cost on tokens/s (%)", f"{result['tokens_per_s_overhead_percent']:.2f}"),
        (f"llm: {fees['requests']:,} chat completions by IOUs, fees",
         f"{fees['fees_lovelace']:,} lovelace ({fees['fee_per_request_lovelace']:,} each; "
         f"{fees['chat_completion_lovelace']:,} paid each)"),
        ("llm:   as escrowed jobs", f"{fees['escrows']['fees_lovelace']:,} lovelace "
                                    f"({fees['escrow_fees_over_channel_fees']:,.0f}x)"),
    ]  # fmt: skip
