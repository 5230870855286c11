"""A STAND-IN for Ogmios versions and flags we cannot run here: a real WebSocket server on a
real socket (with `/health` over HTTP on the same port, as Ogmios serves it) that answers the
few requests the start-up checks make the way another Ogmios would. It is a fake, labelled:
only our devnet (v6.14 shapes) runs on this machine, and no cardano-node + Ogmios 6.12, 7.0 or
one started without `--include-cbor` does.

Its shapes come from the schemas: the reward account summaries as a map keyed by credential
before 6.13 (the `ogmios` package's older schema copy) and a list from 6.13 (v6.14's); a
chain-sync transaction carries `cbor` only when Ogmios runs with `--include-cbor`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from devnet.process import free_port

TIP = {"slot": 1_000, "id": "ab" * 32}
BEFORE = {"slot": 990, "id": "cd" * 32}  # a point before a block that holds a transaction
TX_ID = "ef" * 32
TX_CBOR = "84a0a0f5f6"  # what the server would add under --include-cbor (shape, not meaning)


@dataclasses.dataclass
class StandIn:
    """One stand-in Ogmios: its version, its node's network magic and synchronization (as
    `/health` reports it), its CBOR flag, and the rewards it holds per script credential."""

    version: str
    magic: int = 42
    synchronization: float = 1.0
    include_cbor: bool = True
    rewards: dict[str, int] = dataclasses.field(default_factory=dict)
    port: int = dataclasses.field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def list_summaries(self) -> bool:
        """From 6.13 the summaries are a list (`version` reads `vMAJOR.MINOR...`)."""
        major, minor = (int(part) for part in self.version.lstrip("v").split(".")[:2])
        return (major, minor) >= (6, 13)

    def health(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path != "/health":
            return None  # a WebSocket handshake
        document = {"version": self.version, "connectionStatus": "connected",
                    "networkSynchronization": self.synchronization}  # fmt: skip
        return connection.respond(HTTPStatus.OK, json.dumps(document))

    async def session(self, ws: ServerConnection) -> None:
        chain_sync: list[dict[str, Any]] = []
        async for raw in ws:
            message = json.loads(raw)
            method = message["method"]
            result = self.answer(method, message.get("params") or {}, chain_sync)
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": method, "result": result,
                                      "id": message.get("id")}))  # fmt: skip

    def answer(self, method: str, params: dict[str, Any], chain_sync: list[dict[str, Any]]) -> Any:
        if method == "queryNetwork/genesisConfiguration":
            return {"era": "shelley", "networkMagic": self.magic, "network": "testnet"}
        if method == "queryNetwork/tip":
            return TIP
        if method == "findIntersection":
            chain_sync[:] = [
                {"direction": "backward", "point": params["points"][0], "tip": TIP},
                {"direction": "forward", "block": self.block(), "tip": TIP},
            ]
            return {"intersection": params["points"][0], "tip": TIP}
        if method == "nextBlock":
            return chain_sync.pop(0)
        if method == "queryLedgerState/rewardAccountSummaries":
            return self.summaries(params["scripts"])
        raise AssertionError(f"the stand-in does not answer {method}")

    def block(self) -> dict[str, Any]:
        tx: dict[str, Any] = {"id": TX_ID, "spends": "inputs", "inputs": [], "outputs": []}
        if self.include_cbor:
            tx["cbor"] = TX_CBOR
        return {"type": "praos", "era": "conway", "id": "12" * 32, "ancestor": BEFORE["id"],
                "height": 100, "slot": TIP["slot"], "transactions": [tx]}  # fmt: skip

    def summaries(self, scripts: list[str]) -> Any:
        held = {s: self.rewards[s] for s in scripts if s in self.rewards}
        value = {s: {"ada": {"lovelace": n}} for s, n in held.items()}
        deposit = {"ada": {"lovelace": 2_000_000}}
        if self.list_summaries:
            return [{"from": "script", "credential": s, "rewards": value[s], "deposit": deposit}
                    for s in held]  # fmt: skip
        return {s: {"delegate": {"id": "pool1"}, "rewards": value[s], "deposit": deposit}
                for s in held}  # fmt: skip


class Running:
    """The stand-in served on its own event loop in a thread, so that the synchronous checks
    under test (they run their own loops) can call it from the test's."""

    def __init__(self, stand_in: StandIn) -> None:
        self.stand_in = stand_in
        self.loop = asyncio.new_event_loop()
        self.server: Server | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result()
        return self.stand_in

    async def _serve(self) -> Server:
        s = self.stand_in
        return await serve(s.session, "127.0.0.1", s.port, process_request=s.health)

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        asyncio.run_coroutine_threadsafe(self.server.wait_closed(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
