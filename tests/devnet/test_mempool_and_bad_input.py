"""The mempool monitor, and bad input: every request gets a clear answer, nobody else suffers."""

from __future__ import annotations

import json

import pytest
from pycardano import PaymentSigningKey
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from devnet.genesis import wallet_address
from devnet.process import DevnetProcess
from offchain.chain.follower import tip_point
from offchain.chain.ogmios import request
from offchain.chain.submit import submit, wait_for_confirmations
from tests.devnet.payments import payment
from tests.devnet.rpc import rpc_raw
from tests.ogmios_schema import validate


async def call(ws, method, params=None):
    message = {"jsonrpc": "2.0", "method": method, "id": method}
    if params is not None:
        message["params"] = params
    await ws.send(json.dumps(message))
    response = json.loads(await ws.recv())
    assert response["method"] == method and response["id"] == method
    return response


@pytest.mark.devnet  # a devnet of its own
async def test_mempool_monitor_shows_a_pending_transaction(tmp_path):
    """Minute-long slots keep the transaction in the mempool while we look; time travel then
    forges the block that takes it out."""
    devnet = DevnetProcess(tmp_path / "slow", slot_length_ms=60_000).start()
    try:
        await _pending_then_confirmed(devnet)
    finally:
        devnet.stop()


async def _pending_then_confirmed(devnet: DevnetProcess) -> None:
    receiver = wallet_address(PaymentSigningKey.generate())
    tx = payment(devnet, "bob", receiver, 2_000_000)
    async with connect(devnet.url) as ws:
        not_acquired = await call(ws, "sizeOfMempool")
        assert not_acquired["error"]["code"] == 4000
        validate("sizeOfMempool", not_acquired)
        tx_id = await submit(devnet.url, tx)
        acquired = await call(ws, "acquireMempool")
        validate("acquireMempool", acquired)
        size = await call(ws, "sizeOfMempool")
        validate("sizeOfMempool", size)
        has = await call(ws, "hasTransaction", {"id": tx_id})
        validate("hasTransaction", has)
        missing = await call(ws, "hasTransaction", {"id": "00" * 32})
        listed = []
        while (nxt := await call(ws, "nextTransaction", {"fields": "all"}))["result"][
            "transaction"
        ]:
            validate("nextTransaction", nxt)
            listed.append(nxt["result"]["transaction"])
        released = await call(ws, "releaseMempool")
        validate("releaseMempool", released)
    assert [t["id"] for t in listed] == [tx_id]
    assert bytes.fromhex(listed[0]["cbor"]) == tx.to_cbor()
    assert has["result"] is True and missing["result"] is False
    assert size["result"]["transactions"]["count"] == 1
    assert size["result"]["currentSize"]["bytes"] == len(tx.to_cbor())

    since = await tip_point(devnet.url)
    await request(devnet.url, "devnet/advanceTime", {"slots": 1})
    block = await wait_for_confirmations(devnet.url, tx_id, since, timeout_s=30)
    assert tx_id in [t["id"] for t in block["transactions"]]


BAD_REQUESTS = [
    ("not json at all", -32700),
    (json.dumps([1, 2, 3]), -32600),
    (json.dumps({"jsonrpc": "2.0", "method": "noSuchMethod"}), -32601),
    (json.dumps({"jsonrpc": "2.0", "method": "queryLedgerState/utxo", "params": [1]}), -32602),
    (
        json.dumps(
            {"jsonrpc": "2.0", "method": "queryLedgerState/utxo", "params": {"addresses": ["zz"]}}
        ),
        -32602,
    ),
    (
        json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "submitTransaction",
                "params": {"transaction": {"cbor": "zz"}},
            }
        ),
        -32602,
    ),
    (
        json.dumps({"jsonrpc": "2.0", "method": "devnet/advanceTime", "params": {"slots": -4}}),
        -32602,
    ),
    (json.dumps({"jsonrpc": "2.0", "method": "devnet/fund", "params": {"address": "x"}}), -32602),
    ("{" * 10_000 + "}" * 10_000, -32700),
    ("x" * (2 << 20), -32600),
]


@pytest.mark.parametrize(("message", "code"), BAD_REQUESTS)
async def test_bad_requests_get_json_rpc_errors_and_the_connection_lives(devnet, message, code):
    async with connect(devnet.url, max_size=None) as ws:
        await ws.send(message)
        response = json.loads(await ws.recv())
        assert response["error"]["code"] == code
        assert response["error"]["message"]
        tip = await call(ws, "queryNetwork/tip")  # the same connection still works
        assert tip["result"]["slot"] > 0


@pytest.mark.parametrize("cbor", ["deadbeef", "8201", "84a0a0f5", "84a0a0f5f6ff"])
async def test_undecodable_transaction_is_a_deserialisation_failure(devnet, cbor):
    response = await rpc_raw(devnet.url, "submitTransaction", {"transaction": {"cbor": cbor}})
    validate("submitTransaction", response)
    assert response["error"]["code"] == -32602
    assert set(response["error"]["data"]) == {
        "shelley",
        "allegra",
        "mary",
        "alonzo",
        "babbage",
        "conway",
    }


async def test_a_huge_frame_closes_only_that_connection(devnet):
    async with connect(devnet.url, max_size=None) as ws:
        await ws.send("x" * (9 << 20))
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd.code == 1009  # message too big
    response = await rpc_raw(devnet.url, "queryNetwork/blockHeight")
    assert response["result"] >= 1
