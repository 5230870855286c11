"""Output references as people write them (`TXID#IX`) and the UTxO behind one."""

from __future__ import annotations

import re

from pycardano import TransactionId, TransactionInput, UTxO

from offchain.chain.context import ChainQueries

OUT_REF = re.compile(r"^([0-9a-fA-F]{64})#(\d+)$")


def parse_out_ref(text: str) -> TransactionInput:
    """`TXID#IX`, as explorers and `out_ref` write an output reference."""
    match = OUT_REF.match(text.strip())
    if match is None:
        raise ValueError(f"expected an output reference TXID#INDEX (64 hex digits), got {text!r}")
    return TransactionInput(TransactionId(bytes.fromhex(match[1])), int(match[2]))


def format_out_ref(ref: TransactionInput) -> str:
    """`TXID#IX`: the text `parse_out_ref` reads back."""
    return f"{ref.transaction_id.payload.hex()}#{ref.index}"


def utxo_at(context: ChainQueries, ref: TransactionInput) -> UTxO | None:
    """The unspent output at `ref`, or None when it is spent or never was."""
    return context.utxo_by_tx_id(ref.transaction_id.payload.hex(), ref.index)
