"""Bodies over their limit are refused while they arrive, whatever their framing: over raw
sockets, a chunked body (no Content-Length) or an upload longer than its limit is answered 413,
naming the limit, before the client has finished sending it, and the connection is closed
rather than the rest read. A body within the limit is served whatever its framing."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from offchain.market.models import Blob
from offchain.market.services import delivery
from tests.market.client import Party
from tests.market.flow import RESULT, UNITS, stored
from tests.market.records import metering, receipt_body
from tests.market.test_evidence import hand_in, running
from tests.market.test_lifecycle import offer_terms

ANSWER_S = 10  # today's server waits for the body's end: no answer at all
CHUNK = 16 << 10


@pytest.fixture
def database_url() -> str:
    """The limits are the HTTP layer's: the default SQLite is enough."""
    return ""


def chunked(body: bytes) -> bytes:
    """`body` as chunks of the chunked transfer coding, without the final empty chunk."""
    pieces = (body[i : i + CHUNK] for i in range(0, len(body), CHUNK))
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: market",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def exchange(http: httpx.AsyncClient, request: bytes) -> tuple[int, dict, bytes]:
    """Send `request` and, without sending anything more, read the answer until the server
    closes the connection: (status, JSON body, what came after the head)."""
    url = http.base_url
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(ANSWER_S):
            answer = await reader.read()  # until EOF: the server closed
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    headers_text, _, body = rest.partition(b"\r\n\r\n")
    status = int(status_line.split()[1])
    if b"transfer-encoding: chunked" in headers_text.lower():
        body = body.partition(b"\r\n")[2].rpartition(b"\r\n0\r\n")[0]
    return status, json.loads(body), headers_text


def names_the_limit(answer: tuple[int, dict, bytes], limit: int) -> None:
    status, body, _ = answer
    assert status == 413, body
    (problem,) = body["detail"]
    assert problem["loc"] == ["body"] and str(limit) in problem["msg"], problem


@pytest.mark.parametrize("path", ["/jobs", "/offers"])
async def test_a_chunked_body_over_the_limit_is_refused_before_it_ends(http, settings, path):
    """Twice the limit sent, no final chunk: answered 413 and closed while the body is open
    (the server read no further); before, nothing came back until the body ended."""
    party = Party.new(http, settings.identity)
    over = b'{"pad": "' + b"x" * (2 * settings.body_limit_bytes) + b'"}'
    signed = party.headers("POST", path, over)  # signed well: only the size is wrong
    framing = {"content-type": "application/json", "transfer-encoding": "chunked"}
    answer = await exchange(http, head("POST", path, signed | framing) + chunked(over))
    names_the_limit(answer, settings.body_limit_bytes)
    assert b"connection: close" in answer[2].lower()


async def test_a_chunked_body_within_the_limit_is_served(http, settings):
    """The same framing under the limit loses nothing: the offer is taken, byte for byte."""
    provider = Party.new(http, settings.identity)
    body = json.dumps(offer_terms(provider)).encode()
    headers = provider.headers("POST", "/offers", body) | {
        "content-type": "application/json", "transfer-encoding": "chunked", "connection": "close",
    }  # fmt: skip
    request = head("POST", "/offers", headers) + chunked(body) + b"0\r\n\r\n"
    status, offered, _ = await exchange(http, request)
    assert status == 201, offered
    assert offered["body"] == body.decode(), offered


async def test_a_declared_length_over_the_limit_is_refused_unread(http, settings):
    """A Content-Length over the limit: 413 before a byte of the body is read."""
    answer = await exchange(http, head("POST", "/jobs", {"content-length": str(100 << 20)}) + b"{")
    names_the_limit(answer, settings.body_limit_bytes)


def over_the_limit(provider: Party, path: str, limit: int, framing: str) -> bytes:
    """A signed upload of twice `limit`, chunked, or under a Content-Length that promises
    twice more than is sent (the route must count what arrives, not trust the header)."""
    over = b"x" * (2 * limit)
    headers = provider.headers("PUT", path, over)
    if framing == "chunked":
        return head("PUT", path, headers | {"transfer-encoding": "chunked"}) + chunked(over)
    return head("PUT", path, headers | {"content-length": str(4 * limit)}) + over


@pytest.mark.parametrize("framing", ["chunked", "lying length"])
async def test_an_upload_over_its_limit_is_refused_before_it_ends(
    http, settings, devnet, market_deployment, monkeypatch, framing
):
    """The result and metering uploads stream to disk within their own limits: over them the
    answer is 413 while the client is still sending, and nothing is kept (the metering limit
    is lowered to keep the test small)."""
    provider, locked = await running(devnet, market_deployment, http, settings)
    path = f"/jobs/{locked.job}/result"
    request = over_the_limit(provider, path, settings.result_limit_bytes, framing)
    names_the_limit(await exchange(http, request), settings.result_limit_bytes)

    record = metering(locked.job, UNITS)
    await hand_in(
        provider, locked, receipt_body(provider, market_deployment, locked, RESULT, record)
    )
    monkeypatch.setattr(delivery, "EVIDENCE_LIMIT_BYTES", 256 << 10)
    path = f"/jobs/{locked.job}/metering"
    request = over_the_limit(provider, path, delivery.EVIDENCE_LIMIT_BYTES, framing)
    names_the_limit(await exchange(http, request), delivery.EVIDENCE_LIMIT_BYTES)
    assert stored(settings, Blob) == []
