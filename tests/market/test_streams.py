"""Live streams (server-sent events) hold no database connection while open, and are bounded.

Against a real market process over real sockets: with 200 job streams open (the explorer's
public one and the consumer's signed one) a signed request still answers at once, the chain
follower funds a new lock and the batcher settles the watched job, and every stream sees it
settle. Before, each stream kept its request's session: past some 30 streams the pool was
empty and a signed GET waited ~27 s. The bounds refuse the next stream per client (429) and in
all (503), naming why, and a closed stream frees its slot."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx

from tests.market.client import serve
from tests.market.flow import (
    deliver,
    job_status,
    leader_settings,
    provider_with_offer,
    quote_and_lock,
    wait_for,
)
from tests.market.processes import MarketProcess
from tests.market.test_body_limits import head

STREAMS = 200
SIGNED_STREAMS = 50  # of them, the consumer's own /jobs/{id}/events
PROMPT_S = 5  # "not stalled": measured well under a second, where it once took ~27 s


class Stream:
    """One live stream over a raw socket: its status and what it has sent."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes = b""
    ) -> None:
        self.reader, self.writer, self.head = reader, writer, head

    @classmethod
    async def open(
        cls, url: httpx.URL, path: str, headers: dict[str, str] | None = None,
        source: str = "127.0.0.1",
    ) -> tuple[int, Stream]:  # fmt: skip
        """GET `path` from `source` (any 127.0.0.0/8 address: another client), its head read."""
        reader, writer = await asyncio.open_connection(url.host, url.port, local_addr=(source, 0))
        writer.write(head("GET", path, headers or {}))
        async with asyncio.timeout(30):
            answer = await reader.readuntil(b"\r\n\r\n")
        return int(answer.split()[1]), cls(reader, writer, answer)

    async def refusal(self) -> dict:
        """The JSON body of a refused stream (its head already read; its connection may stay
        open for the next request, so the body is read by its length)."""
        lines = self.head.decode("latin-1").lower().split("\r\n")
        (length,) = [int(line.split(":")[1]) for line in lines if "content-length:" in line]
        async with asyncio.timeout(10):
            return json.loads(await self.reader.readexactly(length))

    async def sees(self, text: bytes, timeout_s: float = 60) -> None:
        async with asyncio.timeout(timeout_s):
            await self.reader.readuntil(text)

    async def close(self) -> None:
        """Closed, and the close sent (the market sees its client go)."""
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def test_200_open_streams_do_not_stall_the_market(
    devnet, market_deployment, settings, tmp_path
):
    made, _ = await leader_settings(
        settings, devnet, tmp_path, streams_per_client=STREAMS, streams_max=STREAMS
    )
    market = MarketProcess(made, tmp_path / "market.log").start()
    streams: list[Stream] = []
    try:
        async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, made.identity)
            watched = await quote_and_lock(devnet, market_deployment, http, made.identity)
            await wait_for(watched.consumer, watched.job, "funded")
            consumer = watched.consumer
            for n in range(STREAMS):
                path = f"/jobs/{watched.job}/events"
                if n < SIGNED_STREAMS:
                    status, stream = await Stream.open(
                        http.base_url, path, consumer.headers("GET", path)
                    )
                else:
                    status, stream = await Stream.open(
                        http.base_url, f"/explorer/jobs/{watched.job}/live"
                    )
                streams.append(stream)
                assert status == 200, n

            started = time.monotonic()
            assert (await job_status(consumer, watched.job))["state"] == "funded"
            signed_s = time.monotonic() - started
            print(f"a signed GET with {STREAMS} streams open: {signed_s * 1000:.0f} ms")
            assert signed_s < PROMPT_S

            started = time.monotonic()
            second = await quote_and_lock(devnet, market_deployment, http, made.identity)
            await wait_for(second.consumer, second.job, "funded")  # the follower's work
            await deliver(provider, market_deployment, watched)
            await wait_for(consumer, watched.job, "settled")  # the batcher's
            print(f"lock to funded, then receipt to settled: {time.monotonic() - started:.1f} s")
            for stream in streams:
                await stream.sees(b"settled")
    finally:
        for stream in streams:
            await stream.close()
        market.stop()


async def test_the_bounds_refuse_the_next_stream_and_a_closed_one_frees_its_slot(settings):
    """Two streams per address, three in all: a client's third is a 429, another client's
    second a 503 while three are open; each frees up when one of the open ones closes."""
    with serve(settings.model_copy(update={"streams_per_client": 2, "streams_max": 3})) as url:
        base = httpx.URL(url)
        first = [await Stream.open(base, "/explorer/live") for _ in range(2)]
        other = [await Stream.open(base, "/explorer/live", source="127.0.0.2")]
        assert [status for status, _ in first + other] == [200, 200, 200]
        await first[1][1].sees(b"event: home", timeout_s=10)  # they stream the home figures

        status, refused = await Stream.open(base, "/explorer/live")
        (problem,) = (await refused.refusal())["detail"]
        assert status == 429 and problem["loc"] == ["stream"] and "2 live streams" in problem["msg"]
        status, refused = await Stream.open(base, "/explorer/live", source="127.0.0.2")
        (problem,) = (await refused.refusal())["detail"]
        assert status == 503 and problem["loc"] == ["stream"] and "3 live streams" in problem["msg"]

        await first[0][1].close()  # the client goes away: its slot is free again, soon
        assert await opened_within(base, "127.0.0.2") == 200
        for _, stream in first[1:] + other:
            await stream.close()


async def opened_within(base: httpx.URL, source: str, timeout_s: float = 10) -> int:
    """The status of a new stream from `source`, retried while refused (up to `timeout_s`)."""
    until = time.monotonic() + timeout_s
    while True:
        status, stream = await Stream.open(base, "/explorer/live", source=source)
        await stream.close()
        if status == 200 or time.monotonic() > until:
            return status
        await asyncio.sleep(0.1)
