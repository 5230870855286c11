"""The follower's channel index over blocks made here from real transactions, on each
database: a channel opened, claimed and topped up within one block is followed from output to
output; a rollback to the block before forgets it. Outputs at the channel script that open
nothing are left out: no terms in the metadata, terms of another id, another payee, a nonce the
transaction does not spend, a second open of an id already indexed."""

from __future__ import annotations

import dataclasses

import pytest
from pycardano import (
    AuxiliaryData,
    Transaction,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
)
from sqlmodel import Session, col, select

from offchain.chain.utxo import format_out_ref
from offchain.market.models import Channel, ChannelEvent
from offchain.market.services.follower import ChainFollower
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.types import ChannelDatum, ChannelTerms, TxOutRef
from offchain.protocol.tx.channel import OPEN, channel_id, payee_hash, terms_metadata
from tests.explorer.test_chain_index import block
from tests.market.channel_flow import claim, top_up
from tests.market.database import engine_at_head
from tests.protocol.channels import open_on
from tests.protocol.onchain import ADA, wallet


def one_block(slot: int, *txs: Transaction) -> dict:
    """An Ogmios v6 block at `slot` (its height too) holding `txs` in order."""
    held = [block(slot, tx)["transactions"][0] for tx in txs]
    return {"slot": slot, "height": slot, "id": f"{slot:064x}", "transactions": held}


@pytest.fixture
def follower(tmp_path, market_deployment, database_url):
    engine = engine_at_head(MarketSettings(data_dir=tmp_path, database_url=database_url))
    yield ChainFollower(engine, market_deployment, confirmations=1, keep_blocks=100)
    engine.dispose()


def rows(follower: ChainFollower) -> tuple[list[Channel], list[ChannelEvent]]:
    with Session(follower.engine) as session:
        channels = list(session.exec(select(Channel)))
        events = list(session.exec(select(ChannelEvent).order_by(col(ChannelEvent.id))))
    return channels, events


async def test_moves_within_one_block_and_a_rollback_before_it(devnet, market_deployment, follower):
    renter, provider = [await wallet(devnet) for _ in range(2)]
    channel, terms, opened = await open_on(devnet, market_deployment, renter, provider)
    claimed, channel = await claim(devnet, market_deployment, renter, provider, channel, ADA)
    topped, channel = await top_up(devnet, market_deployment, renter, channel, terms, 2 * ADA)
    follower.roll_forward(one_block(10, renter.sign(opened)))
    follower.roll_forward(one_block(11))
    follower.roll_forward(one_block(12, claimed, topped))

    (indexed,), events = rows(follower)
    assert [(e.move, e.amount, e.slot) for e in events] == [
        ("open", events[0].funded, 10), ("claim", ADA, 12), ("top-up", 2 * ADA, 12)
    ]  # fmt: skip
    assert (indexed.ref, indexed.claimed, indexed.lovelace) == (
        format_out_ref(channel.utxo.input), ADA, channel.lovelace
    )  # fmt: skip

    follower.roll_backward({"slot": 11, "id": f"{11:064x}"}, {"slot": 11, "height": 11})
    (indexed,), events = rows(follower)
    assert [e.move for e in events] == ["open"]
    assert (indexed.claimed, indexed.lovelace) == (0, events[0].lovelace)
    follower.roll_backward({"slot": 9, "id": f"{9:064x}"}, {"slot": 9, "height": 9})
    assert rows(follower) == ([], [])


def lock(deployment, datum, metadata, spends=()) -> Transaction:
    """A transaction (never submitted) locking `datum` at the channel script, with `metadata`
    (or none), spending `spends` and a funding input."""
    aux = AuxiliaryData(metadata) if metadata is not None else None
    body = TransactionBody(
        inputs=[TransactionInput(TransactionId(bytes(32)), 0), *spends], fee=200_000,
        outputs=[TransactionOutput(deployment.channel_address(), 10 * ADA, datum=datum)],
        auxiliary_data_hash=aux.hash() if aux is not None else None,
    )  # fmt: skip
    return Transaction(body, TransactionWitnessSet(), auxiliary_data=aux)


async def test_outputs_that_open_nothing_are_left_out(devnet, market_deployment, follower):
    renter, provider, other = [await wallet(devnet) for _ in range(3)]
    nonce = TransactionInput(TransactionId(bytes([7]) * 32), 3)
    terms = ChannelTerms(to_plutus(renter.address), to_plutus(provider.address), provider.vkey,
                         20_000, TxOutRef.of(nonce))  # fmt: skip
    datum = ChannelDatum(renter.vkey, payee_hash(terms.provider), channel_id(terms), 0, OPEN)
    metadata = terms_metadata(terms)
    other_terms = dataclasses.replace(terms, close_period_ms=1)
    other_payee = dataclasses.replace(datum, payee=payee_hash(to_plutus(other.address)))
    refused = [
        lock(market_deployment, datum, None, [nonce]),  # no terms
        lock(market_deployment, datum, terms_metadata(other_terms), [nonce]),  # another id
        lock(market_deployment, other_payee, metadata, [nonce]),  # another payee
        lock(market_deployment, datum, metadata),  # the nonce is not spent
    ]
    follower.roll_forward(one_block(20, *refused))
    assert rows(follower) == ([], [])
    follower.roll_forward(one_block(21, lock(market_deployment, datum, metadata, [nonce])))
    again = lock(market_deployment, datum, metadata, [nonce, TransactionInput(
        TransactionId(bytes([8]) * 32), 0)])  # fmt: skip
    follower.roll_forward(one_block(22, again))
    (indexed,), events = rows(follower)
    assert indexed.id == channel_id(terms).hex() and [e.slot for e in events] == [21]
