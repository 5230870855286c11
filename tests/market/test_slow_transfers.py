"""Slow uploads and downloads hold no database connection while their bytes move.

A result or metering upload checked its job, then streamed the body with that session's
connection still checked out; a result download kept its session until the last byte had gone.
Forty stalled uploads and forty stalled downloads (clients that stop sending, or never read)
would hold every connection of the pool and stall every other request. Here a signed request
answers at once while eighty such transfers are open."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time

import pytest

from offchain.market.settings import MarketSettings
from tests.market.flow import job_status
from tests.market.test_body_limits import chunked, head
from tests.market.test_evidence import running

STALLED = 40  # of each kind: 80 in all, where the pool has 32 connections
RESULT_BYTES = 32 << 20  # more than loopback's socket buffers take before the sender blocks
PROMPT_S = 5


@pytest.fixture
def settings(settings: MarketSettings) -> MarketSettings:
    return settings.model_copy(update={"result_limit_bytes": 2 * RESULT_BYTES})


async def test_stalled_uploads_and_downloads_do_not_stall_the_market(
    devnet, market_deployment, http, settings
):
    provider, locked = await running(devnet, market_deployment, http, settings)
    archive = b"r" * RESULT_BYTES
    uploaded = await provider.send("PUT", f"/jobs/{locked.job}/result", raw=archive)
    assert uploaded.json()["result_sha256"] == hashlib.sha256(archive).hexdigest(), uploaded.text

    url, open_ = http.base_url, []
    try:
        for _ in range(STALLED):  # each sends a first chunk, then nothing more
            path = f"/jobs/{locked.job}/result"
            headers = provider.headers("PUT", path, archive) | {"transfer-encoding": "chunked"}
            _, writer = await asyncio.open_connection(url.host, url.port)
            writer.write(head("PUT", path, headers) + chunked(archive[: 1 << 20]))
            open_.append(writer)
        for _ in range(STALLED):  # each asks for the result, then never reads it
            path = f"/jobs/{locked.job}/result"
            _, writer = await asyncio.open_connection(url.host, url.port)
            writer.write(head("GET", path, locked.consumer.headers("GET", path)))
            open_.append(writer)
        await asyncio.sleep(2)  # every transfer reaches its route and stalls there

        started = time.monotonic()
        assert (await job_status(locked.consumer, locked.job))["state"] == "running"
        signed_s = time.monotonic() - started
        print(f"a signed GET with {2 * STALLED} stalled transfers open: {signed_s * 1000:.0f} ms")
        assert signed_s < PROMPT_S
    finally:
        for writer in open_:
            writer.transport.abort()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
