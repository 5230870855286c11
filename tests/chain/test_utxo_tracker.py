"""UTxOs kept from chain-sync (`offchain.chain.utxo_tracker`) on a devnet of the test's own: the
tracker asks the node once, then follows payments to and from the watched address block by
block, answering what the node answers without asking again; a rollback makes it ask afresh,
and it answers as the node does after the fork. A context answers the addresses it tracks from
the tracker, any other from the node."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pycardano import (
    Address,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
    UTxO,
)

from devnet.genesis import ADA
from offchain.chain.context import chain_context
from offchain.chain.ogmios import request
from offchain.chain.utxo_tracker import UtxoTracker
from offchain.protocol.tx.txbuild import Wallet
from tests.protocol.onchain import confirm, wallet


def holdings(utxos: list[UTxO] | None) -> set[tuple[str, int]] | None:
    """What a list of UTxOs holds, comparable across answers: (out-ref, lovelace)."""
    if utxos is None:
        return None
    return {(str(u.input), u.output.amount.coin) for u in utxos}


async def until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    """Wait for `check` (it waits on the tracker catching up with the chain's evidence)."""
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.05)


async def pay(devnet, payer: Wallet, to: Address, lovelace: int) -> Transaction:
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(payer.address)
    builder.add_output(TransactionOutput(to, lovelace))
    body = builder.build(change_address=payer.address)
    return await confirm(devnet, payer.sign(Transaction(body, TransactionWitnessSet())))


async def test_the_tracker_follows_payments_and_asks_again_after_a_rollback(own_devnet):
    devnet = own_devnet
    watched, other = await wallet(devnet), await wallet(devnet)
    asked: list[Address] = []

    def query(address: Address) -> list[UTxO]:
        asked.append(address)
        return devnet.context().utxos(address)

    tracker = UtxoTracker(devnet.url, [watched.address], query).start()
    try:

        def agrees() -> bool:  # with a fresh context: pycardano's keeps answers a second
            return holdings(tracker.utxos(watched.address)) == holdings(
                devnet.context().utxos(watched.address)
            )

        await until(agrees)
        assert tracker.utxos(other.address) is None  # not watched: the caller asks the node
        await pay(devnet, watched, other.address, 5 * ADA)  # out, and change back
        await pay(devnet, other, watched.address, 7 * ADA)  # in
        await until(agrees)
        assert len(asked) == 1  # one snapshot; every change since came from the blocks

        paid = await pay(devnet, other, watched.address, 3 * ADA)
        paid_out = TransactionInput(paid.id, 0)
        await until(lambda: paid_out in {u.input for u in tracker.utxos(watched.address) or []})
        await until(agrees)
        await request(devnet.url, "devnet/rollback", {"blocks": 1})
        await until(lambda: len(asked) == 2)  # the fork: a new snapshot
        await until(agrees)
    finally:
        tracker.stop()


def node(devnet, address: Address) -> set[tuple[str, int]] | None:
    """What the node holds at `address` now (a fresh context: pycardano's keeps a second)."""
    return holdings(devnet.context().utxos(address))


async def test_a_context_answers_tracked_addresses_from_chain_sync(devnet):
    watched, other = await wallet(devnet), await wallet(devnet)
    context = chain_context(devnet.url)
    tracker = context.track([watched.address])
    try:
        await until(lambda: tracker.utxos(watched.address) is not None)
        await pay(devnet, other, watched.address, 2 * ADA)
        held = watched.address
        await until(lambda: holdings(tracker.utxos(held)) == node(devnet, held))
        assert holdings(context.utxos(watched.address)) == node(devnet, watched.address)
        assert holdings(context.utxos(other.address)) == node(devnet, other.address)
    finally:
        context.untrack()
