"""Raw JSON-RPC over the devnet's WebSocket, for tests that look at whole responses."""

from __future__ import annotations

import json
from typing import Any

from websockets.asyncio.client import connect


async def rpc_raw(url: str, method: str, params: Any = None, **extra: Any) -> dict[str, Any]:
    """Send one request on a fresh connection and return the whole response object."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": "test", **extra}
    if params is not None:
        message["params"] = params
    async with connect(url, max_size=64 << 20) as ws:
        await ws.send(json.dumps(message))
        return json.loads(await ws.recv())
