"""Ogmios v6 JSON-RPC over WebSocket and HTTP on one port, served from a `Devnet`.

One dispatch table per mini-protocol maps each method to a handler; every response echoes the
request's method and id. A connection answers each mini-protocol on its own task and queue,
as Ogmios does: a `nextBlock` parked at the tip never holds up a query or a submission on the
same socket, and answers within one mini-protocol keep their order. Chain-sync and
mempool-monitor state lives in the per-connection `Session`. Plain HTTP serves `/health`,
`/metrics` and JSON-RPC by `POST /` (each request a fresh session, as Ogmios proxies it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import http
import json
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import websockets
from websockets.asyncio.server import ServerConnection, serve

from devnet import genesis_json, health
from devnet import ogmios_json as oj
from devnet.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    LedgerError,
)
from devnet.genesis import (
    demo_wallet_addresses,
)
from devnet.http import (
    HttpApp,
    HttpOrWebSocket,
    HttpRequest,
    HttpResponse,
    http_error,
)
from devnet.node import Block, Devnet
from devnet.txdecode import DecodedTx
from offchain.chain.ogmios import METHOD_NOT_FOUND

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1 << 20  # answered with a JSON-RPC error
MAX_FRAME_BYTES = 8 << 20  # beyond this the WebSocket layer closes the connection (1009)
MEMPOOL_CAPACITY_BYTES = 2 * 90_112
CLOSE_GRACE_S = 1  # at a stop, clients have this long to answer the close handshake
MAX_QUEUED_PER_PROTOCOL = 1000  # past this a connection's reading waits (back-pressure)
# Mini-protocols whose queued requests are still carried out once the client has gone: they
# change the ledger, and a client may send a submission and hang up without waiting.
FINISHED_AFTER_CLOSE = frozenset({"transactionSubmission", "devnet"})


@dataclasses.dataclass
class Session:
    """Per-connection protocol state."""

    cursor: Block | None = None  # chain-sync: the last point the client has (None = origin)
    seen_generation: int = 0  # chain-sync: rollbacks after this one concern the client
    intersected: bool = False  # chain-sync: the next nextBlock rolls back to the intersection
    mempool: list[DecodedTx] | None = None  # mempool monitor: the acquired snapshot
    mempool_position: int = 0
    mempool_slot: int = 0


Handler = Callable[[Session, dict[str, Any]], Awaitable[Any]]


class OgmiosServer:
    def __init__(self, devnet: Devnet) -> None:
        self.devnet = devnet
        self.stats = health.ServerStats()
        self.http_app = HttpApp(self.respond_http, max_body_bytes=MAX_FRAME_BYTES)
        self.mini_protocols: dict[str, dict[str, Handler]] = {
            "chainSync": {
                "findIntersection": self.find_intersection,
                "nextBlock": self.next_block,
            },
            "ledgerStateQuery": {
                "queryNetwork/tip": self.network_tip,
                "queryNetwork/blockHeight": self.block_height,
                "queryNetwork/startTime": self.start_time,
                "queryNetwork/genesisConfiguration": self.genesis_configuration,
                "queryLedgerState/tip": self.network_tip,
                "queryLedgerState/epoch": self.epoch,
                "queryLedgerState/eraStart": self.era_start,
                "queryLedgerState/eraSummaries": self.era_summaries,
                "queryLedgerState/protocolParameters": self.protocol_parameters,
                "queryLedgerState/utxo": self.utxo,
                "queryLedgerState/rewardAccountSummaries": self.reward_account_summaries,
            },
            "transactionSubmission": {
                "evaluateTransaction": self.evaluate_transaction,
                "submitTransaction": self.submit_transaction,
            },
            "mempoolMonitoring": {
                "acquireMempool": self.acquire_mempool,
                "nextTransaction": self.next_transaction,
                "hasTransaction": self.has_transaction,
                "sizeOfMempool": self.size_of_mempool,
                "releaseMempool": self.release_mempool,
            },
            "devnet": {
                "devnet/fund": self.fund,
                "devnet/advanceTime": self.advance_time,
                "devnet/rollback": self.rollback,
                "devnet/fork": self.fork,
                "devnet/reset": self.reset,
                "devnet/reward": self.reward,
                "devnet/wallets": self.wallets,
            },
        }
        self.methods: dict[str, Handler] = {
            method: handler
            for handlers in self.mini_protocols.values()
            for method, handler in handlers.items()
        }
        self.protocol_of = {
            method: protocol
            for protocol, handlers in self.mini_protocols.items()
            for method in handlers
        }
        self.http_routes: dict[str, dict[str, Callable[[HttpRequest], Awaitable[HttpResponse]]]] = {
            "/": {"GET": self.upgrade_required, "POST": self.json_rpc_over_http},
            "/health": {"GET": self.health},
            "/metrics": {"GET": self.metrics},
        }

    # --- WebSocket transport ------------------------------------------------------------------

    async def serve(self, host: str, port: int) -> websockets.asyncio.server.Server:
        return await serve(
            self._connection,
            host,
            port,
            max_size=MAX_FRAME_BYTES,
            create_connection=functools.partial(HttpOrWebSocket, app=self.http_app),
            open_timeout=None,  # HttpOrWebSocket times the WebSocket handshake itself
        )

    async def _connection(self, websocket: ServerConnection) -> None:
        """Read messages in order and queue each on its mini-protocol's own task."""
        session = Session()
        queues: dict[str, asyncio.Queue[dict[str, Any] | None]] = {}
        tasks: dict[str, asyncio.Task[None]] = {}
        started = self.stats.opened()
        try:
            async for message in websocket:
                self.stats.total_messages += 1
                try:
                    request = _parse_request(message)
                except LedgerError as exc:
                    self.stats.total_unrouted += 1
                    await websocket.send(json.dumps(_response(None, None, error=exc.to_json())))
                    continue
                protocol = self.protocol_of.get(request["method"])
                if protocol is None:  # answered at once: an unknown method
                    self.stats.total_unrouted += 1
                    await websocket.send(json.dumps(await self.answer(session, request)))
                    continue
                if protocol not in queues:
                    queues[protocol] = asyncio.Queue(MAX_QUEUED_PER_PROTOCOL)
                    tasks[protocol] = asyncio.create_task(
                        self._answer_in_order(websocket, session, queues[protocol])
                    )
                await queues[protocol].put(request)
        except websockets.ConnectionClosed:
            pass
        finally:
            for protocol, task in tasks.items():
                if protocol in FINISHED_AFTER_CLOSE:
                    queues[protocol].put_nowait(None)  # never full: the reader has stopped
                else:
                    task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            self.stats.closed(started)

    async def _answer_in_order(
        self,
        websocket: ServerConnection,
        session: Session,
        queue: asyncio.Queue[dict[str, Any] | None],
    ) -> None:
        """One mini-protocol of one connection: its requests answered one after another."""
        while (request := await queue.get()) is not None:
            response = json.dumps(await self.answer(session, request))
            with contextlib.suppress(websockets.ConnectionClosed):
                await websocket.send(response)

    async def handle(self, session: Session, message: str | bytes) -> dict[str, Any]:
        """Answer one JSON-RPC message by itself (what HTTP needs); never raises."""
        try:
            request = _parse_request(message)
        except LedgerError as exc:
            return _response(None, None, error=exc.to_json())
        return await self.answer(session, request)

    async def answer(self, session: Session, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one parsed request; never raises, so one bad request harms nobody else."""
        method, request_id = request["method"], request.get("id")
        try:
            handler = self.methods.get(method)
            if handler is None:
                raise LedgerError(
                    METHOD_NOT_FOUND,
                    f"Unknown method {method!r}. Known methods: {', '.join(self.methods)}.",
                )
            params = request.get("params") or {}
            if not isinstance(params, dict):
                raise LedgerError(INVALID_PARAMS, "params must be a JSON object")
            return _response(method, request_id, result=await handler(session, params))
        except LedgerError as exc:
            return _response(method, request_id, error=exc.to_json())
        except Exception as exc:
            log.exception("internal error answering %s", method)
            error = {"code": -32603, "message": f"Internal error: {exc}"}
            return _response(method, request_id, error=error)

    # --- HTTP -----------------------------------------------------------------------------------

    async def respond_http(self, request: HttpRequest) -> HttpResponse:
        """Route a plain HTTP request: unknown paths 404, other methods 405, CORS preflight 204."""
        methods = self.http_routes.get(request.path)
        if methods is None:
            return http_error(http.HTTPStatus.NOT_FOUND, f"No {request.path} here.")
        allowed = ", ".join([*methods, "OPTIONS"])
        if request.method == "OPTIONS":
            cors = (
                ("Allow", allowed),
                ("Access-Control-Allow-Methods", allowed),
                ("Access-Control-Allow-Headers", "Content-Type"),
            )
            return HttpResponse(http.HTTPStatus.NO_CONTENT, headers=cors)
        route = methods.get(request.method)
        if route is None:
            return dataclasses.replace(
                http_error(http.HTTPStatus.METHOD_NOT_ALLOWED, f"Use {allowed}."),
                headers=(("Allow", allowed),),
            )
        return await route(request)

    async def json_rpc_over_http(self, request: HttpRequest) -> HttpResponse:
        """What the WebSocket would answer, on a fresh session; 400 for errors, as Ogmios."""
        self.stats.total_messages += 1
        answer = await self.handle(Session(), request.body)
        status = http.HTTPStatus.BAD_REQUEST if "error" in answer else http.HTTPStatus.OK
        return _json_response(answer, status)

    async def health(self, request: HttpRequest) -> HttpResponse:
        return _json_response(health.health(self.devnet, self.stats))

    async def metrics(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(
            http.HTTPStatus.OK, health.prometheus(health.health(self.devnet, self.stats)).encode()
        )

    async def upgrade_required(self, request: HttpRequest) -> HttpResponse:
        return dataclasses.replace(
            http_error(
                http.HTTPStatus.UPGRADE_REQUIRED,
                "Open a WebSocket here, or POST a JSON-RPC request.",
            ),
            headers=(("Upgrade", "websocket"),),
        )

    # --- network and ledger-state queries -----------------------------------------------------

    async def network_tip(self, session: Session, params: dict) -> dict[str, Any]:
        tip = self.devnet.tip
        return {"slot": tip.slot, "id": tip.id.hex()}

    async def block_height(self, session: Session, params: dict) -> int:
        return self.devnet.tip.height

    async def start_time(self, session: Session, params: dict) -> str:
        return genesis_json.utc(self.devnet.genesis.system_start_s)

    async def epoch(self, session: Session, params: dict) -> int:
        return self.devnet.epoch

    async def era_start(self, session: Session, params: dict) -> dict[str, Any]:
        return genesis_json.bound(0, 0, 0)

    async def era_summaries(self, session: Session, params: dict) -> list[dict[str, Any]]:
        return genesis_json.era_summaries(self.devnet.genesis, self.devnet.epoch)

    async def genesis_configuration(self, session: Session, params: dict) -> dict[str, Any]:
        return genesis_json.genesis_configuration(
            params.get("era"), self.devnet.genesis, self.devnet.params
        )

    async def protocol_parameters(self, session: Session, params: dict) -> dict[str, Any]:
        return self.devnet.params.to_ogmios()

    async def utxo(self, session: Session, params: dict) -> list[dict[str, Any]]:
        """The confirmed UTxO set (as of the tip), by address, by reference, or whole."""
        utxo = self.devnet.state.utxo
        if "outputReferences" in params:
            refs = [oj.parse_output_reference(r) for r in _list_param(params, "outputReferences")]
            return [oj.utxo_json(ref, utxo[ref]) for ref in refs if ref in utxo]
        if "addresses" in params:
            wanted = {oj.parse_address(a).to_primitive() for a in _list_param(params, "addresses")}
            refs = [ref for address in wanted for ref in utxo.at(address)]
            return [oj.utxo_json(ref, utxo[ref]) for ref in refs]
        if params:
            raise LedgerError(
                INVALID_PARAMS, "queryLedgerState/utxo takes 'addresses' or 'outputReferences'"
            )
        return [oj.utxo_json(i, o) for i, o in utxo.items()]

    async def reward_account_summaries(self, session: Session, params: dict) -> list[dict]:
        """Ogmios v6.14's list of registered reward accounts (filtered by credentials asked)."""
        wanted = set(_credentials(params))
        deposit = {"ada": {"lovelace": self.devnet.params.key_deposit}}
        return [
            {
                "from": "script" if is_script else "verificationKey",
                "credential": cred.hex(),
                "rewards": {"ada": {"lovelace": balance}},
                "deposit": deposit,
            }
            for (is_script, cred), balance in self.devnet.state.reward_accounts.items()
            if not wanted or (is_script, cred) in wanted
        ]

    # --- transactions -------------------------------------------------------------------------

    async def evaluate_transaction(self, session: Session, params: dict) -> list[dict[str, Any]]:
        cbor = _transaction_cbor(params)
        return await self.devnet.evaluate(cbor, oj.parse_utxo(params.get("additionalUtxo")))

    async def submit_transaction(self, session: Session, params: dict) -> dict[str, Any]:
        dtx = await self.devnet.submit(_transaction_cbor(params))
        return {"transaction": {"id": dtx.id_hex}}

    # --- chain-sync ---------------------------------------------------------------------------

    async def find_intersection(self, session: Session, params: dict) -> dict[str, Any]:
        points = params.get("points")
        if not isinstance(points, list):
            raise LedgerError(INVALID_PARAMS, "findIntersection needs 'points': a list of points")
        by_id = {block.id.hex(): block for block in self.devnet.blocks}
        for point in points:
            if point == "origin":
                return self._intersect(session, None)
            block = by_id.get(point.get("id", "")) if isinstance(point, dict) else None
            if block is not None and block.slot == point.get("slot"):
                return self._intersect(session, block)
        raise LedgerError(
            1000,
            "No intersection found with the given points.",
            {"tip": oj.tip_json(self.devnet.tip)},
        )

    def _intersect(self, session: Session, block: Block | None) -> dict[str, Any]:
        session.cursor, session.intersected = block, True
        session.seen_generation = self.devnet.generation
        return {"intersection": oj.point_json(block), "tip": oj.tip_json(self.devnet.tip)}

    async def next_block(self, session: Session, params: dict) -> dict[str, Any]:
        """Roll forward one block, or backward after a rollback; at the tip, wait for a block."""
        devnet = self.devnet
        async with devnet.changed:
            while True:
                floor = devnet.rollback_floor_since(session.seen_generation)
                session.seen_generation = devnet.generation
                cursor_height = session.cursor.height if session.cursor else 0
                if floor is not None and floor < cursor_height:
                    session.cursor = devnet.blocks[floor - 1] if floor else None
                    session.intersected = True
                if session.intersected:
                    session.intersected = False
                    return self._roll("backward", point=oj.point_json(session.cursor))
                next_height = session.cursor.height + 1 if session.cursor else 1
                if next_height <= devnet.tip.height:
                    session.cursor = devnet.blocks[next_height - 1]
                    return self._roll("forward", block=oj.block_json(session.cursor))
                await devnet.changed.wait()

    def _roll(self, direction: str, **what: Any) -> dict[str, Any]:
        return {"direction": direction, **what, "tip": oj.tip_json(self.devnet.tip)}

    # --- mempool monitor ------------------------------------------------------------------------

    async def acquire_mempool(self, session: Session, params: dict) -> dict[str, Any]:
        """Snapshot the mempool; if one is held already, wait until the mempool changes."""
        devnet = self.devnet
        if session.mempool is not None:
            held = [tx.id for tx in session.mempool]
            async with devnet.changed:
                await devnet.changed.wait_for(lambda: [tx.id for tx in devnet.pending.txs] != held)
        session.mempool = list(devnet.pending.txs)
        session.mempool_position = 0
        session.mempool_slot = devnet.tip.slot
        return {"acquired": "mempool", "slot": session.mempool_slot}

    async def next_transaction(self, session: Session, params: dict) -> dict[str, Any]:
        snapshot = _snapshot(session)
        if session.mempool_position >= len(snapshot):
            return {"transaction": None}
        dtx = snapshot[session.mempool_position]
        session.mempool_position += 1
        if params.get("fields") == "all":
            return {"transaction": oj.transaction_json(dtx)}
        return {"transaction": {"id": dtx.id_hex}}

    async def has_transaction(self, session: Session, params: dict) -> bool:
        tx_id = params.get("id")
        if not isinstance(tx_id, str):
            raise LedgerError(INVALID_PARAMS, "hasTransaction needs 'id': a transaction id")
        return any(dtx.id_hex == tx_id for dtx in _snapshot(session))

    async def size_of_mempool(self, session: Session, params: dict) -> dict[str, Any]:
        snapshot = _snapshot(session)
        return {
            "maxCapacity": {"bytes": MEMPOOL_CAPACITY_BYTES},
            "currentSize": {"bytes": sum(dtx.size for dtx in snapshot)},
            "transactions": {"count": len(snapshot)},
        }

    async def release_mempool(self, session: Session, params: dict) -> dict[str, Any]:
        _snapshot(session)
        session.mempool = None
        return {"released": "mempool"}

    # --- devnet-only methods --------------------------------------------------------------------

    async def fund(self, session: Session, params: dict) -> dict[str, Any]:
        address, amount = params.get("address"), params.get("lovelace")
        if not isinstance(address, str) or not isinstance(amount, int) or isinstance(amount, bool):
            raise LedgerError(
                INVALID_PARAMS, "devnet/fund needs 'address' (bech32) and 'lovelace' (integer)"
            )
        dtx = await self.devnet.fund(address, amount)
        return {"transaction": {"id": dtx.id_hex}}

    async def advance_time(self, session: Session, params: dict) -> dict[str, Any]:
        slots = _positive_int(params, "slots")
        return {"tip": oj.tip_json(await self.devnet.advance(slots))}

    async def rollback(self, session: Session, params: dict) -> dict[str, Any]:
        blocks = _positive_int(params, "blocks")
        return {"tip": oj.tip_json(await self.devnet.rollback(blocks))}

    async def fork(self, session: Session, params: dict) -> dict[str, Any]:
        blocks = _positive_int(params, "blocks")
        return {"tip": oj.tip_json(await self.devnet.fork(blocks))}

    async def reset(self, session: Session, params: dict) -> dict[str, Any]:
        return {"tip": oj.tip_json(await self.devnet.reset())}

    async def reward(self, session: Session, params: dict) -> dict[str, Any]:
        """Pay `lovelace` into a registered reward account (`scripts` or `keys`: one hex
        credential), as a returned deposit or staking rewards would on a real chain."""
        credentials = _credentials(params)
        if len(credentials) != 1:
            raise LedgerError(
                INVALID_PARAMS, "devnet/reward needs one credential in 'scripts' or 'keys'"
            )
        balance = self.devnet.reward(credentials[0], _positive_int(params, "lovelace"))
        return {"rewards": {"ada": {"lovelace": balance}}}

    async def wallets(self, session: Session, params: dict) -> dict[str, str]:
        return demo_wallet_addresses(self.devnet.data_dir)


# --- helpers --------------------------------------------------------------------------------------


def _response(
    method: str | None, request_id: Any, *, result: Any = None, error: Any = None
) -> dict[str, Any]:
    """A JSON-RPC response: the request's method (when it had one) and id, echoed exactly."""
    response: dict[str, Any] = {"jsonrpc": "2.0"}
    if method is not None:
        response["method"] = method
    if error is not None:
        response["error"] = error
    else:
        response["result"] = result
    response["id"] = request_id
    return response


def _json_response(document: Any, status: int = http.HTTPStatus.OK) -> HttpResponse:
    return HttpResponse(status, json.dumps(document).encode(), "application/json; charset=utf-8")


def _parse_request(message: str | bytes) -> dict[str, Any]:
    if len(message) > MAX_REQUEST_BYTES:
        raise LedgerError(
            INVALID_REQUEST, f"Request too large: {len(message)} bytes, limit {MAX_REQUEST_BYTES}."
        )
    try:
        request = json.loads(message)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LedgerError(PARSE_ERROR, f"Invalid JSON: {exc}") from exc
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        raise LedgerError(
            INVALID_REQUEST,
            "Invalid request: expected a JSON-RPC 2.0 object with a string 'method'.",
        )
    return request


def _transaction_cbor(params: dict[str, Any]) -> bytes:
    transaction = params.get("transaction")
    cbor = transaction.get("cbor") if isinstance(transaction, dict) else None
    try:
        return bytes.fromhex(cbor)
    except (TypeError, ValueError) as exc:
        raise LedgerError(
            INVALID_PARAMS, "Expected params {'transaction': {'cbor': <hex string>}}."
        ) from exc


def _list_param(params: dict[str, Any], name: str) -> list[Any]:
    value = params[name]
    if not isinstance(value, list):
        raise LedgerError(INVALID_PARAMS, f"'{name}' must be a list")
    return value


def _positive_int(params: dict[str, Any], name: str) -> int:
    value = params.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise LedgerError(INVALID_PARAMS, f"'{name}' must be a positive integer")
    return value


def _credentials(params: dict[str, Any]) -> list[tuple[bool, bytes]]:
    """The stake credentials `keys` and `scripts` name (hex hashes), as (is_script, hash)."""
    return [
        (origin == "scripts", _credential_hash(text))
        for origin in ("keys", "scripts")
        for text in params.get(origin) or []
    ]


def _credential_hash(text: Any) -> bytes:
    try:
        raw = bytes.fromhex(text)
    except (TypeError, ValueError):
        raw = b""
    if len(raw) != 28:
        raise LedgerError(
            INVALID_PARAMS, f"Expected a 28-byte credential hash in hex, got {text!r}"
        )
    return raw


def _snapshot(session: Session) -> list[DecodedTx]:
    if session.mempool is None:
        raise LedgerError(4000, "You must acquire a mempool snapshot prior to accessing it.")
    return session.mempool


async def run(devnet: Devnet, host: str, port: int) -> None:
    """Serve, forging blocks on the slot clock, until SIGTERM or SIGINT; then stop serving.

    Closing the devnet itself (store, script pool) is the caller's, once this returns.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = OgmiosServer(devnet)
    server.stats.watch_garbage_collector()
    listener = await server.serve(host, port)
    production = asyncio.create_task(devnet.run_block_production())
    print(f"Ogmios v6 devnet serving on ws://{host}:{port} (and http://{host}:{port})", flush=True)
    try:
        await stop.wait()
        log.info("stopping: closing connections")
    finally:
        listener.close()  # no new connections; WebSocket clients are asked to close
        await server.http_app.end_connections(CLOSE_GRACE_S)
        await listener.wait_closed()
        production.cancel()
        await asyncio.gather(production, return_exceptions=True)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
