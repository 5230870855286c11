"""Output references, one type: pycardano's `TransactionInput`, what a UTxO, a transaction's
inputs and the chain context already carry, so the code holds no second type to convert to and
from. The text people, JSON bodies and database columns write (`TXID#IX`) and Ogmios's JSON
(`{"transaction": {"id"}, "index"}`) are its edges, converted here and nowhere else.

pycardano is imported only by the functions that build one: `split_out_ref` serves the CLI's
commands that only read the market's JSON, which must start without it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pycardano import TransactionInput, UTxO

    from offchain.chain.context import ChainQueries

# The canonical text `format_out_ref` writes (lower-case hex, an index of at most 5 digits: the
# ledger's are 16 bits), for patterns that validate a JSON field or recognise a search.
OUT_REF_PATTERN = r"^[0-9a-f]{64}#[0-9]{1,5}$"  # anchored: pydantic searches
# What `split_out_ref` reads: people paste upper-case ids too.
_TYPED = re.compile(r"^([0-9a-fA-F]{64})#(\d+)$")


def split_out_ref(text: str) -> tuple[str, int]:
    """`TXID#IX` as its transaction id (hex) and index; ValueError names the expected form."""
    match = _TYPED.match(text.strip())
    if match is None:
        raise ValueError(f"expected an output reference TXID#INDEX (64 hex digits), got {text!r}")
    return match[1], int(match[2])


def out_ref_of(tx_id: str, index: int) -> TransactionInput:
    """Output `index` of the transaction whose id is `tx_id` in hex."""
    from pycardano import TransactionId, TransactionInput

    return TransactionInput(TransactionId(bytes.fromhex(tx_id)), index)


def parse_out_ref(text: str) -> TransactionInput:
    """`TXID#IX`, as explorers and `format_out_ref` write an output reference; ValueError names
    the expected form."""
    return out_ref_of(*split_out_ref(text))


def format_out_ref(ref: TransactionInput) -> str:
    """`TXID#IX`: the text `parse_out_ref` reads back."""
    return f"{tx_id_of(ref)}#{ref.index}"


def ogmios_ref(text: str) -> dict[str, Any]:
    """`TXID#IX` as Ogmios v6 writes an output reference (a query's `outputReferences`)."""
    tx_id, index = split_out_ref(text)
    return {"transaction": {"id": tx_id}, "index": index}


def ogmios_out_ref(json_input: dict[str, Any]) -> TransactionInput:
    """An input of an Ogmios v6 transaction, `{"transaction": {"id": HEX}, "index": N}`."""
    return out_ref_of(json_input["transaction"]["id"], json_input["index"])


def spent_by(tx: dict[str, Any]) -> list[TransactionInput]:
    """What an Ogmios transaction spent: its inputs, or only its collateral when its scripts
    failed (its inputs are then untouched; `spends` says which)."""
    return [ogmios_out_ref(spent) for spent in tx.get(tx.get("spends", "inputs"), [])]


def tx_id_of(ref: TransactionInput) -> str:
    """The id, in hex, of the transaction that made the output."""
    return ref.transaction_id.payload.hex()


def utxo_at(context: ChainQueries, ref: TransactionInput) -> UTxO | None:
    """The unspent output at `ref`, or None when it is spent or never was."""
    return context.utxo_by_tx_id(tx_id_of(ref), ref.index)
