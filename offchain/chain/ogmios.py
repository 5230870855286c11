"""A small async Ogmios v6 JSON-RPC client over one WebSocket connection."""

from __future__ import annotations

import itertools
import json
import socket
from typing import TYPE_CHECKING, Any

from websockets.exceptions import WebSocketException

from offchain.chain import DEFAULT_OGMIOS_URL
from offchain.core.errors import UnchainedError

if TYPE_CHECKING:  # the clients are imported on first use: a CLI naming the URL needs neither
    from websockets.asyncio.client import ClientConnection

# What a lost or refused connection to Ogmios raises, whichever client made it.
UNREACHABLE = (ConnectionError, socket.gaierror, TimeoutError, WebSocketException)
# JSON-RPC's code for a method the server does not have: how a client tells the devnet (its
# `devnet/*` methods) from any other chain's Ogmios, and what the devnet answers.
METHOD_NOT_FOUND = -32601


class OgmiosError(UnchainedError):
    """An Ogmios error answer: its code, message and data, as the server sent them."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        self.method = method
        self.code: int = error.get("code", 0)
        self.message: str = error.get("message", "")
        self.data: Any = error.get("data")
        super().__init__(f"{method} failed with {self.code}: {self.message}")


class Ogmios:
    """One connection; requests are answered in order (Ogmios pipelines per connection)."""

    def __init__(self, url: str = DEFAULT_OGMIOS_URL) -> None:
        self.url = url
        self._ids = itertools.count()
        self._ws: ClientConnection | None = None

    async def __aenter__(self) -> Ogmios:
        from websockets.asyncio.client import connect

        self._ws = await connect(self.url, max_size=64 << 20)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request and return its result, or raise OgmiosError."""
        assert self._ws is not None, "use `async with Ogmios(url) as ogmios`"
        await self._ws.send(_message(method, params, next(self._ids)))
        return _result(method, await self._ws.recv())


async def request(url: str, method: str, params: dict[str, Any] | None = None) -> Any:
    """One request on a fresh connection (for one-off queries and devnet control)."""
    async with Ogmios(url) as ogmios:
        return await ogmios.request(method, params)


def request_sync(url: str, method: str, params: dict[str, Any] | None = None) -> Any:
    """`request` for synchronous callers (transaction builders run beside pycardano's calls)."""
    from websockets.sync.client import connect as connect_sync

    with connect_sync(url, max_size=64 << 20) as ws:
        ws.send(_message(method, params, 0))
        return _result(method, ws.recv())


def utxo_lovelace(url: str, query: dict[str, Any]) -> int:
    """The lovelace in the unspent outputs `query` selects (`queryLedgerState/utxo`'s
    `addresses` or `outputReferences`): one request, no chain context (pycardano)."""
    utxos = request_sync(url, "queryLedgerState/utxo", query)
    return sum(int(utxo["value"]["ada"]["lovelace"]) for utxo in utxos)


def _message(method: str, params: dict[str, Any] | None, request_id: int) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        message["params"] = params
    return json.dumps(message)


def _result(method: str, raw: str | bytes) -> Any:
    response = json.loads(raw)
    if "error" in response:
        raise OgmiosError(method, response["error"])
    return response["result"]
