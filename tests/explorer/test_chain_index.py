"""The chain index on its own: a block whose transaction locks an escrow is recorded with the
datum decoded; a later block that refunds it records the redeemer and marks the escrow spent;
a rollback to the first block forgets the second and its spend, and nothing else."""

from __future__ import annotations

import json

import pytest
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    Redeemer,
    RedeemerTag,
    Transaction,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
)
from sqlmodel import Session, select

from offchain.chain.utxo import format_out_ref
from offchain.market.models import ChainBlock, ChainTx, ChainTxOut
from offchain.market.services import chain_index
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.types import Refund
from offchain.protocol.tx.escrow import lock_escrow, new_escrow
from tests.market.database import engine_at_head


def _address() -> Address:
    return Address(
        PaymentSigningKey.generate().to_verification_key().hash(), network=Network.TESTNET
    )


def block(slot: int, tx: Transaction) -> dict:
    """An Ogmios v6 block holding `tx`, as the follower receives it."""
    return {
        "slot": slot, "height": slot, "id": f"{slot:064x}",
        "transactions": [{
            "id": tx.id.payload.hex(),
            "inputs": [{"transaction": {"id": i.transaction_id.payload.hex()}, "index": i.index}
                       for i in tx.transaction_body.inputs],
            "outputs": [{"address": str(o.address)} for o in tx.transaction_body.outputs],
            "cbor": tx.to_cbor_hex(),
        }],
    }  # fmt: skip


@pytest.fixture
def engine(tmp_path):
    engine = engine_at_head(MarketSettings(data_dir=tmp_path))
    yield engine
    engine.dispose()


def test_lock_refund_and_rollback(engine, market_deployment):
    consumer, provider = _address(), _address()
    datum = new_escrow(consumer, provider, bytes(32), 50_000, 600, 1_800_000_000_000, 3_600_000,
                       bytes(range(32)), 2_000_000)  # fmt: skip
    funding = TransactionInput(TransactionId(bytes(32)), 0)
    lock = Transaction(
        TransactionBody(
            inputs=[funding],
            fee=200_000,
            outputs=[
                TransactionOutput(
                    market_deployment.escrow_address(consumer), 32_000_000, datum=datum
                )
            ],
        ),
        TransactionWitnessSet(),
    )
    escrow = format_out_ref(lock_escrow(lock.id))
    redeemer = Redeemer(Refund(0, 0))
    redeemer.tag = RedeemerTag.SPEND
    refund = Transaction(
        TransactionBody(inputs=[lock_escrow(lock.id)], fee=300_000,
                        outputs=[TransactionOutput(consumer, 30_000_000)]),
        TransactionWitnessSet(redeemer=[redeemer]),
    )  # fmt: skip
    with Session(engine) as session:
        chain_index.index_block(session, market_deployment, block(10, lock))
        chain_index.index_block(session, market_deployment, block(11, refund))
        session.commit()
        locked = session.get(ChainTxOut, escrow)
        assert (locked.script, locked.spent_by) == ("escrow", refund.id.payload.hex())
        decoded = json.loads(locked.datum)
        assert decoded["type"] == "EscrowDatum" and decoded["consumer"] == str(consumer)
        assert decoded["job_id"] == bytes(range(32)).hex() and decoded["deadline"] == datum.deadline
        view = json.loads(session.get(ChainTx, refund.id.payload.hex()).view)
        assert view["inputs"] == [
            {"ref": escrow, "redeemer": {"type": "Refund", "own_input": 0, "consumer_output": 0}}
        ]

        chain_index.roll_back(session, 10)
        session.commit()
        assert session.get(ChainTx, refund.id.payload.hex()) is None
        assert session.get(ChainTxOut, escrow).spent_by is None
        assert session.exec(select(ChainBlock.height)).all() == [10]
