"""Many requests in flight on one WebSocket: each mini-protocol answers on its own queue.

A `nextBlock` parked at the tip, or an `acquireMempool` waiting for the mempool to change,
must not hold up queries and submissions sent after it on the same socket; answers within
one mini-protocol keep their order, and every `id` comes back exactly as sent.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pycardano import PaymentSigningKey, Transaction
from websockets.asyncio.client import ClientConnection, connect

from devnet.genesis import ADA, wallet_address
from devnet.process import DevnetProcess
from tests.devnet.conftest import forge
from tests.devnet.payments import payment
from tests.ogmios_schema import validate

QUERIES = [
    ("queryNetwork/tip", None),
    ("queryNetwork/blockHeight", None),
    ("queryLedgerState/epoch", None),
    ("queryLedgerState/eraSummaries", None),
    ("queryLedgerState/protocolParameters", None),
    ("queryNetwork/startTime", None),
]


def request_id(n: int) -> Any:
    """Ids of every JSON kind, distinct, so each answer is matched to its request exactly."""
    return [n, f"request-{n}", {"n": n, "path": [n, "x"]}, n + 0.5, [n, None]][n % 5]


async def send(ws: ClientConnection, method: str, params: Any, request_id: Any) -> None:
    message = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        message["params"] = params
    await ws.send(json.dumps(message))


async def receive(ws: ClientConnection, count: int, timeout_s: float = 10) -> list[dict]:
    """The next `count` answers, in the order they arrive."""
    async with asyncio.timeout(timeout_s):
        return [json.loads(await ws.recv()) for _ in range(count)]


def throwaway_payment(devnet: DevnetProcess, sender: str) -> Transaction:
    """A signed 2 ADA payment from a demo wallet to a fresh address, not yet submitted."""
    return payment(devnet, sender, wallet_address(PaymentSigningKey.generate()), 2 * ADA)


async def submit_on(ws: ClientConnection, tx: Transaction, request_id: Any) -> None:
    await send(ws, "submitTransaction", {"transaction": {"cbor": tx.to_cbor().hex()}}, request_id)


def same(a: Any, b: Any) -> bool:
    """Equal JSON values of the same types (1 is not 1.0 is not "1")."""
    return json.dumps(a) == json.dumps(b)


async def pipeline_queries(ws: ClientConnection, count: int) -> list[tuple[str, Any]]:
    sent = []
    for n in range(count):
        method, params = QUERIES[n % len(QUERIES)]
        await send(ws, method, params, request_id(n))
        sent.append((method, request_id(n)))
    return sent


def check_queries(sent: list[tuple[str, Any]], answers: list[dict]) -> None:
    """Every query answered, valid, with its own id, in the order sent."""
    queries = [a for a in answers if a["method"].startswith("query")]
    assert [(a["method"], json.dumps(a["id"])) for a in queries] == [
        (method, json.dumps(rid)) for method, rid in sent
    ]
    for answer in queries:
        validate(answer["method"], answer)


async def test_queries_and_a_submission_pass_a_parked_next_block(slow_devnet):
    tx = throwaway_payment(slow_devnet, "bob")
    async with connect(slow_devnet.url, max_size=None) as ws:
        await send(ws, "queryNetwork/tip", None, "tip")
        [tip] = await receive(ws, 1)
        await send(ws, "findIntersection", {"points": [tip["result"]]}, "intersect")
        await send(ws, "nextBlock", None, "backward")
        await send(ws, "nextBlock", None, "parked")  # at the tip: waits for the next block
        sent = await pipeline_queries(ws, 100)
        await submit_on(ws, tx, 7)
        answers = await receive(ws, 2 + len(sent) + 1)
        assert "parked" not in [a["id"] for a in answers]
        chain_sync = [a for a in answers if a["method"] in ("findIntersection", "nextBlock")]
        assert [a["id"] for a in chain_sync] == ["intersect", "backward"]
        assert chain_sync[1]["result"]["direction"] == "backward"
        check_queries(sent, answers)
        [submitted] = [a for a in answers if a["method"] == "submitTransaction"]
        assert same(submitted["id"], 7)
        assert submitted["result"]["transaction"]["id"] == str(tx.id)

        await forge(slow_devnet)  # the block with the payment releases the parked nextBlock
        [parked] = await receive(ws, 1)
    validate("nextBlock", parked)
    assert parked["id"] == "parked" and parked["result"]["direction"] == "forward"
    assert str(tx.id) in [t["id"] for t in parked["result"]["block"]["transactions"]]


async def test_a_parked_mempool_wait_holds_up_nothing_else(slow_devnet):
    tx = throwaway_payment(slow_devnet, "alice")
    async with connect(slow_devnet.url, max_size=None) as ws:
        await send(ws, "acquireMempool", None, "first")
        [first] = await receive(ws, 1)
        assert first["result"]["acquired"] == "mempool"
        await send(ws, "acquireMempool", None, "parked")  # waits until the mempool changes
        await send(ws, "nextTransaction", None, "after-parked")  # queued behind it
        sent = await pipeline_queries(ws, 50)
        answers = await receive(ws, len(sent))
        check_queries(sent, answers)

        await submit_on(ws, tx, None)
        rest = {json.dumps(a["id"]): a for a in await receive(ws, 3)}
    assert rest["null"]["result"]["transaction"]["id"] == str(tx.id)
    validate("acquireMempool", rest['"parked"'])
    after = rest['"after-parked"']
    validate("nextTransaction", after)
    assert after["result"]["transaction"]["id"] == str(tx.id)  # read the new snapshot
    await forge(slow_devnet)
