"""Test-side parties of the market: a key that signs its requests to a market over real HTTP
(the way a provider daemon or consumer SDK will), and the market served by uvicorn."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from pycardano import Network, PaymentSigningKey

from devnet.process import free_port
from offchain.core.serving import KEEP_ALIVE_S
from offchain.market.app import create_app
from offchain.market.settings import MarketSettings
from offchain.protocol.api.signed_request import RequestFields, sign_request
from offchain.protocol.tx.txbuild import Wallet


@contextmanager
def serve(settings: MarketSettings) -> Iterator[str]:
    """The market on a free local port for the duration; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the market did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclasses.dataclass
class Party:
    """One key talking to the market: every request signed, with a fresh nonce."""

    wallet: Wallet
    http: httpx.AsyncClient
    market: str

    @classmethod
    def new(cls, http: httpx.AsyncClient, market: str, wallet: Wallet | None = None) -> Party:
        return cls(wallet or Wallet.of(PaymentSigningKey.generate(), Network.TESTNET), http, market)

    def headers(self, method: str, path: str, body: bytes = b"", **changes: Any) -> dict:
        """The headers signing a request to `path` as httpx sends it (percent-encoded);
        `changes` (nonce, timestamp_ms) go to the signed fields."""
        target = httpx.URL(path).raw_path.decode()
        fields = RequestFields.of(method, target, body, self.market, **changes)
        return sign_request(self.wallet.key, fields, network=self.wallet.address.network)

    async def send(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, **changes: Any
    ) -> httpx.Response:
        """`body` as JSON (or `raw` bytes), signed; `changes` go to the signature's fields."""
        content = raw if raw is not None else b"" if body is None else json.dumps(body).encode()
        headers = self.headers(method, path, content, **changes)
        if body is not None:
            headers["content-type"] = "application/json"
        return await self.http.request(method, path, content=content, headers=headers)
