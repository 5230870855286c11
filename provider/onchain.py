"""What the provider's commands need from the chain: UTxOs by out-ref and a submit that waits
for the block, with errors that say what happened in words an operator can act on."""

from __future__ import annotations

import asyncio
import logging
import re
import socket

from pycardano import Transaction, TransactionId, TransactionInput, UTxO
from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext
from websockets.exceptions import WebSocketException

from offchain.chain.ogmios import OgmiosError
from offchain.chain.submit import ConfirmationTimeout, submit_and_wait

CONFIRM_TIMEOUT_S = 60
# What a lost or refused connection to Ogmios raises, whichever client made it.
UNREACHABLE = (ConnectionError, socket.gaierror, TimeoutError, WebSocketException)
OUT_REF = re.compile(r"^([0-9a-fA-F]{64})#(\d+)$")


class ChainError(Exception):
    """The chain could not be reached or refused what was asked; the message says which."""


def quiet_chain_clients() -> None:
    """The Ogmios client logs a schema warning for every UTxO holding a Plutus V3 script, and
    pycardano dumps builder state on errors; the commands say what matters themselves."""
    logging.getLogger("ogmios").setLevel(logging.ERROR)
    logging.getLogger("PyCardano").setLevel(logging.ERROR)


def parse_out_ref(text: str) -> TransactionInput:
    """`TXID#IX`, as explorers and `out_ref` write an output reference."""
    match = OUT_REF.match(text.strip())
    if match is None:
        raise ValueError(f"expected an output reference TXID#INDEX (64 hex digits), got {text!r}")
    return TransactionInput(TransactionId(bytes.fromhex(match[1])), int(match[2]))


def utxo_at(context: OgmiosV6ChainContext, ref: TransactionInput) -> UTxO | None:
    """The unspent output at `ref`, or None when it is spent or never was."""
    return context.utxo_by_tx_id(ref.transaction_id.payload.hex(), ref.index)


def submit(url: str, tx: Transaction) -> int:
    """Submit `tx` and wait until it is in a block; returns the block height."""
    try:
        block = asyncio.run(submit_and_wait(url, tx, timeout_s=CONFIRM_TIMEOUT_S))
    except OgmiosError as exc:
        raise ChainError(f"the ledger refused transaction {tx.id}: {exc.message}") from exc
    except ConfirmationTimeout as exc:
        raise ChainError(f"{exc}; it may still land, look again before retrying") from exc
    return block["height"]
