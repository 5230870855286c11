"""Ogmios over plain HTTP on the WebSocket's port: `GET /health`, `GET /metrics`, and JSON-RPC
by `POST /` answering exactly as the WebSocket does (a payment submitted, a real script spend
evaluated, a 3002 refusal); other paths and methods get HTTP errors."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import httpx
import pytest
from pycardano import PaymentSigningKey

from devnet.genesis import ADA, wallet_address
from devnet.ogmios_json import output_reference_json
from tests.devnet.conftest import forge
from tests.devnet.payments import payment
from tests.devnet.rpc import rpc_raw
from tests.devnet.test_evaluate_errors import lock_in_the_mempool
from tests.ogmios_schema import validate

STATELESS = [
    ("queryNetwork/tip", None),
    ("queryNetwork/blockHeight", None),
    ("queryNetwork/startTime", None),
    ("queryNetwork/genesisConfiguration", {"era": "shelley"}),
    ("queryLedgerState/epoch", None),
    ("queryLedgerState/eraStart", None),
    ("queryLedgerState/eraSummaries", None),
    ("queryLedgerState/protocolParameters", None),
    ("queryLedgerState/rewardAccountSummaries", None),
    (
        "queryLedgerState/utxo",
        {"outputReferences": [{"transaction": {"id": "00" * 32}, "index": 0}]},
    ),
    ("queryLedgerState/utxo", {"addresses": [str(wallet_address(PaymentSigningKey.generate()))]}),
    ("evaluateTransaction", {"transaction": {"cbor": "deadbeef"}}),
    ("devnet/wallets", None),
]


def http_url(devnet) -> str:
    return f"http://127.0.0.1:{devnet.port}"


def rpc_body(method: str, params: Any, request_id: Any = "http") -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        body["params"] = params
    return body


async def test_health_has_what_ogmios_clients_read(slow_devnet):
    async with httpx.AsyncClient(base_url=http_url(slow_devnet)) as client:
        tip = (await client.post("/", json=rpc_body("queryNetwork/tip", None))).json()["result"]
        height = (await client.post("/", json=rpc_body("queryNetwork/blockHeight", None))).json()
        response = await client.get("/health")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["access-control-allow-origin"] == "*"
    health = response.json()
    assert health["lastKnownTip"] == {**tip, "height": height["result"]}
    for moment in ("startTime", "lastTipUpdate"):  # the TypeScript client needs both set
        assert datetime.datetime.fromisoformat(health[moment].replace("Z", "+00:00"))
    assert health["networkSynchronization"] == 1
    assert health["currentEra"] == "conway"
    assert health["connectionStatus"] == "connected"
    assert health["currentEpoch"] >= 1 and health["slotInEpoch"] >= 0
    assert health["version"].startswith("v6.")
    metrics = health["metrics"]
    assert set(metrics) == {
        "activeConnections",
        "runtimeStats",
        "sessionDurations",
        "totalConnections",
        "totalMessages",
        "totalUnrouted",
    }
    assert set(metrics["runtimeStats"]) == {
        "cpuTime",
        "gcCpuTime",
        "maxHeapSize",
        "currentHeapSize",
    }
    assert set(metrics["sessionDurations"]) == {"max", "mean", "min"}
    assert metrics["totalMessages"] >= 2


async def test_health_counts_connections_and_messages(slow_devnet):
    url = http_url(slow_devnet)
    async with httpx.AsyncClient(base_url=url) as client:
        before = (await client.get("/health")).json()["metrics"]
        await rpc_raw(slow_devnet.url, "queryNetwork/tip")
        await rpc_raw(slow_devnet.url, "noSuchMethod")
        after = (await client.get("/health")).json()["metrics"]
        prometheus = (await client.get("/metrics")).text
    assert after["totalConnections"] == before["totalConnections"] + 2
    assert after["totalMessages"] == before["totalMessages"] + 2
    assert after["totalUnrouted"] == before["totalUnrouted"] + 1
    lines = dict(line.split(" ") for line in prometheus.splitlines() if not line.startswith("#"))
    assert lines["ogmios_connected"] == "1"
    assert int(lines["ogmios_tip_slot"]) > 0 and int(lines["ogmios_total_connections"]) >= 2


@pytest.mark.parametrize(("method", "params"), STATELESS, ids=[m for m, _ in STATELESS])
async def test_post_answers_as_the_websocket_does(slow_devnet, method, params):
    over_socket = await rpc_raw(slow_devnet.url, method, params, id={"same": [1]})
    async with httpx.AsyncClient(base_url=http_url(slow_devnet)) as client:
        response = await client.post("/", json=rpc_body(method, params, {"same": [1]}))
    assert response.json() == over_socket
    assert response.status_code == (400 if "error" in over_socket else 200)
    if not method.startswith("devnet/"):
        validate(method, response.json())


async def test_submit_and_evaluate_over_http(slow_devnet):
    tx = payment(slow_devnet, "consumer", wallet_address(PaymentSigningKey.generate()), 2 * ADA)
    submit = rpc_body("submitTransaction", {"transaction": {"cbor": tx.to_cbor().hex()}}, 5)
    evaluated = await evaluate_both(slow_devnet, tx.to_cbor().hex())
    assert evaluated.json()["result"] == []  # a payment runs no script
    async with httpx.AsyncClient(base_url=http_url(slow_devnet)) as client:
        accepted = await client.post("/", json=submit)
        again = await client.post("/", json=submit)  # its inputs are spent in the mempool now
    assert accepted.status_code == 200
    assert accepted.json() == {
        "jsonrpc": "2.0",
        "method": "submitTransaction",
        "result": {"transaction": {"id": str(tx.id)}},
        "id": 5,
    }
    assert again.status_code == 400 and again.json()["error"]["code"] == 3117
    validate("submitTransaction", again.json())


async def test_http_errors(slow_devnet):
    async with httpx.AsyncClient(base_url=http_url(slow_devnet)) as client:
        missing = await client.get("/nothing")
        wrong_method = await client.delete("/health")
        plain_get = await client.get("/")
        preflight = await client.options("/")
        not_json = await client.post("/", content=b"{not json")
        not_rpc = await client.post("/", json=[1, 2])
        too_big = await client.post("/", content=b"x" * (9 << 20))
    assert missing.status_code == 404
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "GET, OPTIONS"
    assert plain_get.status_code == 426 and plain_get.headers["upgrade"] == "websocket"
    assert preflight.status_code == 204
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == -32700
    assert not_rpc.status_code == 400 and not_rpc.json()["error"]["code"] == -32600
    assert too_big.status_code == 413


async def raw_exchange(devnet, request: bytes) -> bytes:
    """Send bytes as they are and read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", devnet.port)
    writer.write(request)
    await writer.drain()
    try:
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()


async def test_malformed_http_is_refused_and_keep_alive_serves_many(slow_devnet):
    chunked = await raw_exchange(
        slow_devnet,
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    )
    assert chunked.startswith(b"HTTP/1.1 411 ")
    garbage = await raw_exchange(slow_devnet, b"HELLO\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.1 400 ")
    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    three = await raw_exchange(slow_devnet, health + health + last)
    assert three.count(b"HTTP/1.1 200 OK") == 3
    body = three.rsplit(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["connectionStatus"] == "connected"


async def evaluate_both(devnet, cbor: str, additional: list | None = None) -> httpx.Response:
    """`evaluateTransaction` by POST /, checked to be the WebSocket's answer, byte for byte
    the same JSON, and valid under the Ogmios schema."""
    params = {"transaction": {"cbor": cbor}, "additionalUtxo": additional}
    over_socket = await rpc_raw(devnet.url, "evaluateTransaction", params, id="same")
    async with httpx.AsyncClient(base_url=http_url(devnet)) as client:
        response = await client.post("/", json=rpc_body("evaluateTransaction", params, "same"))
    assert response.json() == over_socket
    assert response.status_code == (400 if "error" in over_socket else 200)
    validate("evaluateTransaction", response.json())
    return response


async def test_evaluate_a_script_spend_over_http(slow_devnet):
    """A real script spend's budget by POST /: with the locked output passed as additionalUtxo
    while its transaction waits in the mempool, then from the ledger once a block holds it;
    restating that ledger output in additionalUtxo is 3002 over HTTP as over the socket."""
    locked, additional, cbor = await lock_in_the_mempool(slow_devnet)

    chained = (await evaluate_both(slow_devnet, cbor, additional)).json()["result"]
    [evaluated] = chained
    assert evaluated["validator"] == {"purpose": "spend", "index": 0}
    assert evaluated["budget"]["memory"] > 0 and evaluated["budget"]["cpu"] > 0

    await forge(slow_devnet)  # the ledger holds the locked output now
    assert (await evaluate_both(slow_devnet, cbor)).json()["result"] == chained
    overlapping = (await evaluate_both(slow_devnet, cbor, additional)).json()["error"]
    assert overlapping["code"] == 3002
    assert overlapping["data"] == {"overlappingOutputReferences": [output_reference_json(locked)]}
