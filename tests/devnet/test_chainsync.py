"""Chain-sync over the socket: followers see blocks, forced rollbacks, and a restart."""

from __future__ import annotations

import asyncio
import json

from pycardano import PaymentSigningKey
from websockets.asyncio.client import connect

from devnet.genesis import wallet_address
from offchain.chain.follower import RollBackward, RollForward, follow, tip_point
from offchain.chain.ogmios import request
from tests.devnet.payments import confirm, lovelace_at, payment
from tests.devnet.rpc import rpc_raw
from tests.ogmios_schema import validate


async def test_follower_sees_the_block_with_a_transaction(devnet):
    since = await tip_point(devnet.url)
    events = follow(devnet.url, [since])
    first = await anext(events)
    assert isinstance(first, RollBackward) and first.point == since
    tx = payment(devnet, "alice", devnet.address("bob"), 3_000_000)
    block = await confirm(devnet, tx)
    seen = [await anext(events) for _ in range(block["height"] - first.tip["height"])]
    assert all(isinstance(e, RollForward) for e in seen)
    assert [e.block["height"] for e in seen] == list(
        range(first.tip["height"] + 1, block["height"] + 1)
    )
    assert str(tx.id) in [t["id"] for t in seen[-1].block["transactions"]]
    await events.aclose()


async def test_chain_sync_messages_match_the_schema(devnet):

    async with connect(devnet.url) as ws:

        async def call(method, params=None):
            message = {"jsonrpc": "2.0", "method": method, "id": 1}
            if params is not None:
                message["params"] = params
            await ws.send(json.dumps(message))
            response = json.loads(await ws.recv())
            validate(method, response)
            return response

        intersection = await call("findIntersection", {"points": ["origin"]})
        assert intersection["result"]["intersection"] == "origin"
        backward = await call("nextBlock")
        assert backward["result"]["direction"] == "backward"
        forward = await call("nextBlock")
        assert forward["result"]["direction"] == "forward"
        assert forward["result"]["block"]["height"] == 1
        missing = await call("findIntersection", {"points": [{"slot": 1, "id": "ab" * 32}]})
        assert missing["error"]["code"] == 1000


async def test_forced_rollback_reaches_followers_and_undoes_the_ledger(own_devnet):
    devnet = own_devnet
    receiver = wallet_address(PaymentSigningKey.generate())
    since = await tip_point(devnet.url)
    events = follow(devnet.url, [since])
    await anext(events)  # the roll backward to the intersection
    block = await confirm(devnet, payment(devnet, "alice", receiver, 7_000_000))
    while True:
        event = await anext(events)
        if isinstance(event, RollForward) and event.block["id"] == block["id"]:
            break
    assert lovelace_at(devnet, receiver) == 7_000_000

    tip = await request(devnet.url, "devnet/rollback", {"blocks": 1})
    assert tip["tip"]["height"] == block["height"] - 1
    event = await asyncio.wait_for(anext(events), 10)
    assert isinstance(event, RollBackward)
    assert event.point == {"slot": tip["tip"]["slot"], "id": tip["tip"]["id"]}
    await asyncio.sleep(1.1)  # pycardano caches the tip for one second
    assert lovelace_at(devnet, receiver) == 0
    await events.aclose()

    # The chain goes on from there, on new slots only.
    later = await confirm(devnet, payment(devnet, "alice", receiver, 2_000_000))
    assert later["slot"] > block["slot"]
    assert later["height"] >= block["height"]  # heights are reused, slots never


async def test_restart_keeps_the_chain_and_reset_starts_fresh(own_devnet):
    devnet = own_devnet
    receiver = wallet_address(PaymentSigningKey.generate())
    block = await confirm(devnet, payment(devnet, "alice", receiver, 4_000_000))
    devnet.kill()  # an unclean stop: nothing is flushed on the way out
    devnet.start()
    response = await rpc_raw(
        devnet.url, "findIntersection", {"points": [{"slot": block["slot"], "id": block["id"]}]}
    )
    assert response["result"]["intersection"]["id"] == block["id"]
    assert lovelace_at(devnet, receiver) == 4_000_000
    alice_before = devnet.address("alice")

    devnet.stop()
    devnet.start(reset=True)
    assert lovelace_at(devnet, receiver) == 0
    assert devnet.address("alice") == alice_before  # wallets survive a reset
    assert lovelace_at(devnet, alice_before) == 100_000_000_000
