"""The provider's gateway (issue 23, inference endpoints): what it adds to a request, and how
many paid requests one gateway passes a second.

Three processes on this machine: a plain upstream under uvicorn (`upstream` of the gateway's
tests, answering 100 bytes), the gateway under uvicorn (its channel book and endpoint book on
disk, not tmpfs: `ChannelBook.accept` fsyncs each commit), and this one, the load, speaking
HTTP/1.1 with keep-alive over raw sockets (a light client, so the gateway is what is measured).

- `overhead`: one request at a time, each paid by a fresh IOU (signed beforehand), through the
  gateway, against the same requests made to the upstream directly: latency p50/p99 of each,
  the overhead being their difference at each percentile;
- `throughput`: CONCURRENCY renters at once, each its own channel and endpoint, each one
  request at a time: paid requests a second, and the IOU commits that took (group commit:
  IOUs queued during a flush are stored together, one per channel).

Prints a table and writes bench/results/services.json.
Run: .venv/bin/python -m bench.services [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import tempfile
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import uvicorn

from offchain.protocol.channel import OPEN
from offchain.protocol.iou import IOU_HEADER, SignedIou
from provider.channels import ChannelBook, ChannelView
from provider.endpoints import EndpointBook
from provider.gateway import gateway_app
from tests.provider.test_gateway_support import NETWORK, POINT, RENTER, SCRIPT, running, upstream

RESULTS = Path(__file__).parent / "results" / "services.json"
PRICE = 1_000
CAPACITY = 10**15
ANSWER = b"/big?n=100"  # the upstream's answer: 100 bytes


def channel_id(index: int) -> bytes:
    return index.to_bytes(28, "big")


def serve(app: Any, sock: socket.socket, stop: EventType) -> None:
    """`app` on `sock` until `stop` is set (not a signal: uvicorn raises a signal it caught
    again once it has stopped, which would end this process before it reports)."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))

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
    app = gateway_app(book, EndpointBook(scratch / "endpoints.sqlite"))
    serve(app, sock, stop)
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
        endpoints = EndpointBook(scratch / "endpoints.sqlite")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    result = run(args.requests, args.concurrency)
    rows = [
        ("direct p50 / p99 (ms)", f"{result['direct_ms']['p50']:.3f} / "
                                  f"{result['direct_ms']['p99']:.3f}"),
        ("through the gateway p50 / p99 (ms)", f"{result['gateway_ms']['p50']:.3f} / "
                                               f"{result['gateway_ms']['p99']:.3f}"),
        ("overhead p50 / p99 (ms)", f"{result['overhead_ms']['p50']:.3f} / "
                                    f"{result['overhead_ms']['p99']:.3f}"),
        (f"paid requests/s ({args.concurrency} renters)", f"{result['throughput_rps']:,.0f}"),
        ("gateway CPU per request (ms, all threads)",
         f"{result['gateway_cpu_ms_per_request']:.3f}"),
        ("IOUs per fsync'd commit", f"{result['ious_per_commit']:.2f}"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
