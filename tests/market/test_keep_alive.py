"""The market keeps an idle connection open longer than its clients do.

httpx drops a pooled connection after 5 s idle, and uvicorn closed it after 5 s too: a client
sending on it as the server closed it got "server disconnected without sending a response"
(a CLI test's provider long-poll failed so in CI). Over a raw socket to `unchained market
serve`: a second request on the same connection, sent once the client's expiry has passed, is
answered."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.market.processes import MarketProcess
from tests.market.test_body_limits import head

CLIENT_EXPIRY_S = httpx.Limits().keepalive_expiry or 0


@pytest.fixture
def database_url() -> str:
    """Keep-alive is the HTTP layer's: the default SQLite is enough."""
    return ""


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """One GET /health on the open connection: the status line (empty once it is closed)."""
    writer.write(head("GET", "/health", {}))
    async with asyncio.timeout(30):
        status = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
    return status


async def test_an_idle_connection_outlives_the_clients_expiry(settings, tmp_path):
    market = MarketProcess(settings, tmp_path / "market.log").start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", market.port)
        assert (await answer(reader, writer)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(CLIENT_EXPIRY_S + 1)
        assert (await answer(reader, writer)).startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        market.stop()
