"""The market client skips loading the CA bundle only for a plain http:// market (it never does
TLS); an https market, in whatever case the URL spells it, still has its certificate checked:
a market with a self-signed certificate is refused, nothing sent past the handshake. The same
for the standard library's client of the commands that only read the market."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from consumer.sdk.client import MarketClient
from consumer.sdk.market_read import MarketReader
from consumer.sdk.request_key import RequestKey
from offchain.protocol.api.market_errors import MarketRefused


def self_signed(tmp_path: Path) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True,
                   capture_output=True)  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def my_jobs(client: str, url: str, key: RequestKey) -> None:
    """Ask `url` for this key's jobs with the SDK's client (httpx) or the reading commands'."""
    if client == "stdlib":
        await asyncio.to_thread(MarketReader(url, "market", key).my_jobs)
        return
    market = MarketClient.open(url, "market", key)
    try:
        await market.my_jobs()
    finally:
        await market.aclose()


@pytest.mark.parametrize("client", ["httpx", "stdlib"])
@pytest.mark.parametrize("scheme", ["https", "HTTPS"])
async def test_an_https_market_with_a_certificate_no_one_signed_is_refused(
    client, scheme, tmp_path
):
    requests: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ssl.SSLError, ConnectionError):  # it gave up in the handshake
            requests.append(await reader.read(1024))
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=self_signed(tmp_path))
    port = server.sockets[0].getsockname()[1]
    key = RequestKey(SigningKey.generate(), 0)
    try:
        with pytest.raises(MarketRefused, match="CERTIFICATE_VERIFY_FAILED"):
            await my_jobs(client, f"{scheme}://127.0.0.1:{port}", key)
    finally:
        server.close()
        await server.wait_closed()
    assert not any(b"GET /jobs" in request for request in requests)
