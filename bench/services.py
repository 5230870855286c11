"""The provider's gateway (issue 23, inference endpoints): what it adds to a request, and how
many paid requests one gateway passes a second.

Three processes on this machine: a plain upstream under uvicorn (`upstream` of the gateway's
tests, answering 100 bytes), the gateway under uvicorn (its channel book and endpoint book on
disk, not tmpfs: `ChannelBook.accept` fsyncs each commit), and this one, the load, speaking
HTTP/1.1 with keep-alive over raw sockets (a light client, so the gateway is what is measured).

- `overhead`: one request at a time, each paid by a fresh IOU (signed beforehand), through the
  gateway (served as `unchained provider gateway` serves it: uvloop, the guarded protocol),
  against the same requests made to the upstream directly: latency p50/p99 of each, the
  overhead being their difference at each percentile; RUNS runs, each figure the median of
  the runs', every run's kept in `gateway_runs` (one run on a busy machine can be far off);
- `throughput`: CONCURRENCY renters at once, each its own channel and endpoint, each one
  request at a time: paid requests a second, and the IOU commits that took (group commit:
  IOUs queued during a flush are stored together, one per channel).

- `fee_cost`: on a devnet, what 1,000 paid requests cost in transaction fees: a renter opens a
  channel (deposit: the requests' price), the provider admits it (checked on chain, as its
  daemon does), 1,000 requests at bench/channels.py's price go through the gateway to a plain
  upstream, each paid by a fresh IOU, the daemon's claim schedule claims them in one
  transaction, and the provider ends the channel (the rest goes back to the renter); the fees
  of the three transactions, and per request, beside 1,000 one-request escrowed jobs' fees
  (bench/channels.py's `escrow_session`: a lock each and a share of a batch settle).

Prints a table and writes bench/results/services.json (a part run alone keeps the other's
numbers there).
- `llm`: LLM endpoints billed per token (bench/services_llm.py): cold start, the gateway's
  overhead on time to first token and tokens a second, the fees of 1,000 chat completions.
- `scale`: scale to zero (bench/services_scale.py): the first request to an endpoint the
  gateway scaled to zero, served after a cold start (the sample service and the LLM server).

Run: .venv/bin/python -m bench.services [--part gateway|fees|llm|scale] [--requests N]
[--concurrency C] [--runs R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import resource
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from bench.channels import CLOSE_MS, PRICE_PER_REQUEST, REQUESTS, escrow_session, renter_iou
from bench.contracts import deployed, wallet
from devnet.process import DevnetProcess
from offchain.chain.submit import tip_point
from offchain.protocol.ledger.iou import IOU_HEADER, SignedIou
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.channel import OPEN
from provider.config import DaemonSettings
from provider.daemon.chain import Chain
from provider.daemon.channel_claims import ChannelClaimer, admit
from provider.gateway.app import gateway_app
from provider.gateway.guard import ConnectionLimits, guarded_protocol
from provider.money.channel_book import ChannelBook, ChannelView
from provider.rentals.book import RentalBook
from tests.protocol.onchain import confirm, output, tx_fee
from tests.provider.test_gateway_support import (
    NETWORK,
    POINT,
    RENTER,
    SCRIPT,
    running,
    serving,
    upstream,
)

RESULTS = Path(__file__).parent / "results" / "services.json"
PRICE = 1_000
CAPACITY = 10**15
ANSWER = b"/big?n=100"  # the upstream's answer: 100 bytes
RUNS = 5


def channel_id(index: int) -> bytes:
    return index.to_bytes(28, "big")


def serve(app: Any, sock: socket.socket, stop: EventType, **config: Any) -> None:
    """`app` on `sock` until `stop` is set (not a signal: uvicorn raises a signal it caught
    again once it has stopped, which would end this process before it reports); `config`:
    uvicorn's settings beyond its defaults."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, **config))

    def stopper() -> None:
        stop.wait()
        server.should_exit = True

    threading.Thread(target=stopper).start()
    server.run([sock])


def serve_gateway(
    sock: socket.socket, stop: EventType, scratch: Path, report: Queue[tuple[int, float]]
) -> None:
    """The gateway over the books in `scratch`, opened in this (forked) process; once it stops,
    its number of IOU commits and the CPU seconds it used (all its threads) go on `report`."""
    book = ChannelBook(scratch / "channels.sqlite", NETWORK, SCRIPT, credit=0)
    app = gateway_app(book, RentalBook(scratch / "endpoints.sqlite"))
    serve(app, sock, stop, http=guarded_protocol(ConnectionLimits()), loop="uvloop")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report.put((app.store.commits, usage.ru_utime + usage.ru_stime))


def listening() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)  # connections queue while the server process starts
    return sock, sock.getsockname()[1]


class Connection:
    """One keep-alive HTTP/1.1 connection: GETs with given headers, answers with a length."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def to(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def get(self, path: bytes, headers: bytes = b"") -> int:
        self.writer.write(b"GET " + path + b" HTTP/1.1\r\nhost: bench\r\n" + headers + b"\r\n")
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]
        await self.reader.readexactly(int(length))
        return int(head[9:12])

    def close(self) -> None:
        self.writer.close()


def ious(channel: bytes, count: int) -> list[bytes]:
    """The header lines paying `count` requests in turn on `channel`."""
    return [
        f"{IOU_HEADER}: {SignedIou.sign(RENTER, NETWORK, SCRIPT, channel, n * PRICE).to_header()}"
        "\r\n".encode()
        for n in range(1, count + 1)
    ]


async def timed(port: int, path: bytes, headers: list[bytes]) -> list[float]:
    """Each request's latency in ms, one at a time on one connection."""
    connection = await Connection.to(port)
    await connection.get(ANSWER)  # the connection is warm (direct: upstream; else 402)
    latencies = []
    for header in headers:
        start = time.perf_counter()
        status = await connection.get(path, header)
        latencies.append((time.perf_counter() - start) * 1000)
        assert status == 200, status
    connection.close()
    return latencies


async def renter(port: int, index: int, headers: list[bytes]) -> None:
    connection = await Connection.to(port)
    for header in headers:
        status = await connection.get(b"/endpoints/e%d" % index + ANSWER, header)
        assert status == 200, status
    connection.close()


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(p * 10) - 1]


def run(requests: int, concurrency: int) -> dict[str, Any]:
    fork = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(dir=RESULTS.parent, prefix="services-") as directory:
        scratch = Path(directory)
        up_sock, up_port = listening()
        gw_sock, gw_port = listening()
        book = ChannelBook(scratch / "channels.sqlite", NETWORK, SCRIPT, credit=0)
        endpoints = RentalBook(scratch / "endpoints.sqlite")
        vkey = RENTER.to_verification_key().payload
        for index in range(concurrency + 1):  # e0 for the latency run, one a renter after
            view = ChannelView(channel_id(index), "ab" * 32 + "#0", "addr_test1bench", vkey, 0,
                               CAPACITY, OPEN)  # fmt: skip
            book.open(view, POINT)
            endpoints.add(running(f"e{index}", f"http://127.0.0.1:{up_port}", PRICE,
                                  channel=view.id))  # fmt: skip
        book.close()
        endpoints.close()
        report: Queue[tuple[int, float]] = fork.Queue()
        stop = fork.Event()
        servers = [
            fork.Process(target=serve, args=(upstream, up_sock, stop)),
            fork.Process(target=serve_gateway, args=(gw_sock, stop, scratch, report)),
        ]
        for server in servers:
            server.start()
        try:
            per_renter = requests // concurrency
            latency_ious = ious(channel_id(0), requests)
            renter_ious = [ious(channel_id(i), per_renter) for i in range(1, concurrency + 1)]
            direct = asyncio.run(timed(up_port, ANSWER, [b""] * requests))
            through = asyncio.run(timed(gw_port, b"/endpoints/e0" + ANSWER, latency_ious))

            async def all_renters() -> float:
                start = time.perf_counter()
                await asyncio.gather(*(renter(gw_port, i + 1, h) for i, h in
                                       enumerate(renter_ious)))  # fmt: skip
                return time.perf_counter() - start

            wall = asyncio.run(all_renters())
        finally:
            stop.set()
        stored, cpu_s = report.get()
        for server in servers:
            server.join()
    served = requests + per_renter * concurrency
    return {
        "machine": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
        "requests": requests,
        "concurrency": concurrency,
        "direct_ms": {"p50": percentile(direct, 50), "p99": percentile(direct, 99)},
        "gateway_ms": {"p50": percentile(through, 50), "p99": percentile(through, 99)},
        "overhead_ms": {
            "p50": percentile(through, 50) - percentile(direct, 50),
            "p99": percentile(through, 99) - percentile(direct, 99),
        },
        "throughput_rps": per_renter * concurrency / wall,
        "gateway_cpu_ms_per_request": cpu_s * 1000 / served,
        "iou_commits": stored,
        "ious_per_commit": served / stored,
    }


Signer = Callable[[int], str]  # an IOU header's value for so many lovelace in all
# the paid requests of `fee_cost`: through a gateway over (book, endpoints) on channel `id`,
# each IOU from `sign`; their wall time (s)
Load = Callable[[ChannelBook, RentalBook, bytes, Signer], float]


def plain_requests(requests: int) -> Load:
    """`requests` requests at PRICE_PER_REQUEST to a plain upstream, each paid ahead."""

    def load(book: ChannelBook, endpoints: RentalBook, channel: bytes, sign: Signer) -> float:
        headers = [{IOU_HEADER: sign(n * PRICE_PER_REQUEST)} for n in range(1, requests + 1)]
        with serving(upstream) as upstream_url:
            endpoints.add(running("fees", upstream_url, PRICE_PER_REQUEST, channel=channel))
            with serving(gateway_app(book, endpoints)) as url, httpx.Client() as client:
                start = time.perf_counter()
                for header in headers:
                    answer = client.get(f"{url}/endpoints/fees{ANSWER.decode()}", headers=header)
                    assert answer.status_code == 200, answer.text
                wall: float = time.perf_counter() - start
                return wall

    return load


async def fee_cost(
    requests: int, deposit: int | None = None, load: Load | None = None
) -> dict[str, Any]:
    """`requests` requests paid by IOUs through the gateway on one channel of `deposit`
    (`load` makes and pays them: by default `plain_requests`, PRICE_PER_REQUEST each): open
    (the renter's fee), one claim by the daemon's schedule and the provider's end (the
    provider's fees); and 1,000 escrowed one-request jobs' fees, scaled to `requests`."""
    deposit = requests * PRICE_PER_REQUEST if deposit is None else deposit
    load = plain_requests(requests) if load is None else load
    settings = DaemonSettings(channel_min_deposit_lovelace=deposit,
                              channel_min_close_period_ms=CLOSE_MS)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="services-fees-") as directory:
        scratch = Path(directory)
        devnet = DevnetProcess(scratch / "devnet").start()
        try:
            deployment = await deployed(devnet)
            renter, provider = [await wallet(devnet) for _ in range(2)]
            chain = Chain(devnet.url, devnet.context(), deployment, provider)
            opening, terms = channels.open_channel(
                devnet.context(), deployment, renter.address, renter.vkey, provider.address,
                provider.vkey, deposit, CLOSE_MS,
            )  # fmt: skip
            await confirm(devnet, renter.sign(opening))
            channel = channels.read_channel(deployment, output(opening, channels.CHANNEL_OUTPUT))
            book = ChannelBook(scratch / "channels.sqlite", deployment.network_id,
                               deployment.channel_hash, credit=0)  # fmt: skip
            admit(chain, book, channel.utxo.input, terms, settings)

            def sign(amount: int) -> str:
                return renter_iou(deployment, renter, channel, amount).to_header()

            wall = load(book, RentalBook(scratch / "endpoints.sqlite"), channel.id, sign)
            since = await tip_point(devnet.url)
            await ChannelClaimer(chain, book, settings).tick()
            entry = book.get(channel.id)
            assert entry is not None and entry.view.claimed == deposit, entry
            claim_fee = await tx_fee(devnet, entry.view.utxo.split("#")[0], since)
            utxo = chain.utxo(entry.view.utxo)
            assert utxo is not None
            claimed = channels.read_channel(deployment, utxo)
            ended = channels.provider_end(
                devnet.context(), deployment, claimed, terms, provider.address
            )
            await confirm(devnet, provider.sign(ended))
            escrowed = await escrow_session(devnet, deployment)
        finally:
            devnet.stop()
    fees = {"open": opening.transaction_body.fee, "claim": claim_fee,
            "provider_end": ended.transaction_body.fee}  # fmt: skip
    total = sum(fees.values())
    escrow_per_request = escrowed["fee_per_request_lovelace"]
    return {
        "requests": requests,
        "price_per_request_lovelace": deposit // requests,
        "paid_lovelace": deposit,
        "requests_per_s": requests / wall,  # one at a time, an fsync'd IOU each
        "load_average_1m": os.getloadavg()[0],  # this machine is shared: the rate varies
        "fees_lovelace": total,
        "fee_per_request_lovelace": -(-total // requests),  # rounded up, as bench/channels.py
        "fees_by_transaction_lovelace": fees,
        "renter_fees_lovelace": fees["open"],
        "provider_fees_lovelace": fees["claim"] + fees["provider_end"],
        "escrows": {
            "fees_lovelace": escrow_per_request * requests,
            "fee_per_request_lovelace": escrow_per_request,
            "how": f"{escrowed['transactions']} (bench/channels.py escrow_session, for "
            f"{REQUESTS:,} requests)",
        },
        "escrow_fees_over_channel_fees": escrow_per_request * requests / total,
    }


def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure of `runs` (one `run` each) as the median of the runs', and every run's
    latencies, throughput and CPU in `gateway_runs`."""

    def median(key: str, percentile: str | None = None) -> float:
        return statistics.median(run[key] if percentile is None else run[key][percentile]
                                 for run in runs)  # fmt: skip

    kept = ("overhead_ms", "gateway_ms", "throughput_rps", "gateway_cpu_ms_per_request")
    return {
        **runs[-1],
        "runs": len(runs),
        **{key: {p: median(key, p) for p in ("p50", "p99")}
           for key in ("direct_ms", "gateway_ms", "overhead_ms")},
        **{key: median(key) for key in (
            "throughput_rps", "gateway_cpu_ms_per_request", "ious_per_commit")},
        "gateway_runs": [{key: run[key] for key in kept} for run in runs],
    }  # fmt: skip


def gateway_rows(result: dict[str, Any], concurrency: int) -> list[tuple[str, str]]:
    each = result["gateway_runs"]
    return [
        ("runs (medians below)", str(result["runs"])),
        ("overhead p99 of each run (ms)", " ".join(f"{r['overhead_ms']['p99']:.2f}" for r in each)),
        ("CPU per request of each run (ms)",
         " ".join(f"{r['gateway_cpu_ms_per_request']:.2f}" for r in each)),
        ("direct p50 / p99 (ms)", f"{result['direct_ms']['p50']:.3f} / "
                                  f"{result['direct_ms']['p99']:.3f}"),
        ("through the gateway p50 / p99 (ms)", f"{result['gateway_ms']['p50']:.3f} / "
                                               f"{result['gateway_ms']['p99']:.3f}"),
        ("overhead p50 / p99 (ms)", f"{result['overhead_ms']['p50']:.3f} / "
                                    f"{result['overhead_ms']['p99']:.3f}"),
        (f"paid requests/s ({concurrency} renters)", f"{result['throughput_rps']:,.0f}"),
        ("gateway CPU per request (ms, all threads)",
         f"{result['gateway_cpu_ms_per_request']:.3f}"),
        ("IOUs per fsync'd commit", f"{result['ious_per_commit']:.2f}"),
    ]  # fmt: skip


def fee_rows(fees: dict[str, Any]) -> list[tuple[str, str]]:
    by_tx = fees["fees_by_transaction_lovelace"]
    escrows = fees["escrows"]
    n = f"{fees['requests']:,}"
    return [
        (f"{n} requests at {fees['price_per_request_lovelace']:,} lovelace, fees",
         f"{fees['fees_lovelace']:,} lovelace ({fees['fee_per_request_lovelace']:,} a "
         "request)"),
        ("  open / claim / provider end", f"{by_tx['open']:,} / {by_tx['claim']:,} / "
                                          f"{by_tx['provider_end']:,}"),
        (f"  as {n} escrowed jobs", f"{escrows['fees_lovelace']:,} lovelace "
                                     f"({escrows['fee_per_request_lovelace']:,} a request, "
                                     f"{fees['escrow_fees_over_channel_fees']:,.0f}x)"),
        ("  paid requests/s (one renter, on chain channel)", f"{fees['requests_per_s']:,.0f}"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "gateway", "fees", "llm", "scale"), default="all")
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--fee-requests", type=int, default=REQUESTS)
    parser.add_argument(
        "--llm-fee-requests",
        type=int,
        default=REQUESTS,
        help="chat completions paid for the llm fees (0: keep the last figures)",
    )
    args = parser.parse_args()
    result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    rows = []
    if args.part in ("all", "gateway"):
        runs = [run(args.requests, args.concurrency) for _ in range(args.runs)]
        result.update(median_of_runs(runs))
        rows += gateway_rows(result, args.concurrency)
    if args.part in ("all", "fees", "llm"):
        logging.getLogger("PyCardano").setLevel(logging.CRITICAL)
    if args.part in ("all", "fees"):
        result["fee_cost"] = asyncio.run(fee_cost(args.fee_requests))
        rows += fee_rows(result["fee_cost"])
    if args.part in ("all", "llm"):
        from bench import services_llm  # it imports this module

        result["llm"] = services_llm.run(services_llm.RUNS, services_llm.STREAMS,
                                         args.llm_fee_requests, result.get("llm"))  # fmt: skip
        rows += services_llm.rows(result["llm"])
    if args.part in ("all", "scale"):
        from bench import services_scale  # it imports this module

        result["scale_to_zero"] = services_scale.run()
        rows += services_scale.rows(result["scale_to_zero"])
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
