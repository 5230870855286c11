"""The chain index the explorer reads: every block's header, and the transactions that touch
the market's scripts (an output at the escrow or bond script, or a spend of one) with all their
inputs, outputs, datums and redeemers decoded once, when the block arrives.

The chain follower calls `index_block` inside the database transaction that applies a block,
and `roll_back` inside the one that undoes blocks, so the index never disagrees with the job
states it explains. Nothing here talks to the chain: a page reads one row, not Ogmios.
"""

from __future__ import annotations

import json
from typing import Any

from pycardano import Address, Transaction
from sqlalchemy import BigInteger, Column, Index, Text, delete, update
from sqlmodel import Field, Session, SQLModel, col, select

from offchain.market.explorer.decode import Scripts, ledger_inputs, output_view, tx_view
from offchain.protocol.deployment import Deployment


class ChainBlock(SQLModel, table=True):
    """A block the follower applied: what the home and block pages list."""

    slot: int = Field(
        sa_type=BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False}
    )
    height: int = Field(sa_type=BigInteger, unique=True, index=True)
    block_id: str = Field(max_length=64, index=True)
    tx_count: int
    indexed_txs: int = Field(description="transactions of this block that touch our scripts")


class ChainTx(SQLModel, table=True):
    """A transaction touching our scripts, decoded (`explorer.decode.tx_view`) as JSON."""

    __table_args__ = (Index("ix_chaintx_slot_tx", "slot", "tx_id"),)

    tx_id: str = Field(primary_key=True, max_length=64)
    slot: int = Field(sa_type=BigInteger)
    height: int = Field(sa_type=BigInteger)
    view: str = Field(sa_column=Column(Text, nullable=False))


class ChainTxOut(SQLModel, table=True):
    """An output of an indexed transaction: what an input that spends it showed, and what the
    address page lists (newest first, by the address index)."""

    __table_args__ = (Index("ix_chaintxout_address_slot", "address", "slot", "ref"),)

    ref: str = Field(primary_key=True, max_length=80, description="TXID#IX")
    slot: int = Field(sa_type=BigInteger)
    address: str = Field(max_length=128)
    lovelace: int = Field(sa_type=BigInteger)
    script: str | None = Field(default=None, max_length=8, description="escrow, bond or none")
    datum: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    spent_by: str | None = Field(default=None, max_length=64)
    spent_slot: int | None = Field(default=None, sa_type=BigInteger)


def _ref(json_input: dict[str, Any]) -> str:
    return f"{json_input['transaction']['id']}#{json_input['index']}"


def index_block(session: Session, deployment: Deployment, block: dict[str, Any]) -> None:
    """Record `block` (an Ogmios v6 block, transactions with CBOR) in the caller's transaction."""
    scripts = Scripts.of(deployment)
    spent = [_ref(i) for tx in block["transactions"] for i in tx["inputs"]]
    known = {
        out.ref: out
        for out in session.exec(select(ChainTxOut).where(col(ChainTxOut.ref).in_(spent)))
    }
    indexed = 0
    for json_tx in block["transactions"]:
        inputs = [_ref(i) for i in json_tx["inputs"]]
        at_script = any(
            scripts.name(Address.from_primitive(o["address"])) for o in json_tx["outputs"]
        )
        if not at_script and not any(known[r].script for r in inputs if r in known):
            continue
        tx = Transaction.from_cbor(bytes.fromhex(json_tx["cbor"]))
        if tx.valid is False:  # phase 2 failed: only its collateral moved
            continue
        indexed += 1
        _index_tx(session, scripts, block, tx, known)
    session.add(ChainBlock(
        slot=block["slot"], height=block["height"], block_id=block["id"],
        tx_count=len(block["transactions"]), indexed_txs=indexed,
    ))  # fmt: skip


def _index_tx(
    session: Session,
    scripts: Scripts,
    block: dict[str, Any],
    tx: Transaction,
    known: dict[str, ChainTxOut],
) -> None:
    tx_id = tx.id.payload.hex()
    for ref in ledger_inputs(tx):
        if ref in known:
            known[ref].spent_by, known[ref].spent_slot = tx_id, block["slot"]
            session.add(known[ref])
    view = tx_view(tx, scripts, {ref: out.script for ref, out in known.items()})
    session.add(ChainTx(tx_id=tx_id, slot=block["slot"], height=block["height"],
                        view=json.dumps(view)))  # fmt: skip
    for index, output in enumerate(tx.transaction_body.outputs):
        shown = output_view(output, scripts)
        out = ChainTxOut(
            ref=f"{tx_id}#{index}", slot=block["slot"], address=shown["address"],
            lovelace=shown["lovelace"], script=shown["script"],
            datum=json.dumps(shown["datum"]) if shown["datum"] else None,
        )  # fmt: skip
        known[out.ref] = out
        session.add(out)


def roll_back(session: Session, slot: int) -> None:
    """Forget everything after `slot` (in the caller's transaction): the blocks, their
    transactions and outputs, and their spends of older outputs."""
    session.execute(delete(ChainTxOut).where(col(ChainTxOut.slot) > slot))
    session.execute(
        update(ChainTxOut).where(col(ChainTxOut.spent_slot) > slot)
        .values(spent_by=None, spent_slot=None)
    )  # fmt: skip
    session.execute(delete(ChainTx).where(col(ChainTx.slot) > slot))
    session.execute(delete(ChainBlock).where(col(ChainBlock.slot) > slot))
