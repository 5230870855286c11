"""The devnet's faucet: a genesis wallet that pays out in ordinary signed transactions.

Funding goes through the same checks as any submission, so every funded UTxO can be traced
to a real transaction on the chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pycardano import (
    Address,
    Transaction,
    TransactionBody,
    TransactionOutput,
    TransactionWitnessSet,
    VerificationKeyWitness,
)

from devnet.errors import INVALID_PARAMS, LedgerError
from devnet.genesis import FAUCET_WALLET, load_wallet, wallet_address

if TYPE_CHECKING:
    from devnet.node import Devnet

MAX_FUND_LOVELACE = 1_000_000_000_000_000  # one billion ADA per request is plenty


def payment(devnet: Devnet, address: str, lovelace: int) -> bytes:
    """A signed transaction paying `lovelace` from the faucet to `address`."""
    if not 0 < lovelace <= MAX_FUND_LOVELACE:
        raise LedgerError(INVALID_PARAMS, f"lovelace must be in 1..{MAX_FUND_LOVELACE}")
    try:
        recipient = Address.from_primitive(address)
    except Exception as exc:  # any parse failure is the caller's bad input
        raise LedgerError(INVALID_PARAMS, f"not a Cardano address: {address!r}") from exc
    if recipient.network.value != 0:
        raise LedgerError(INVALID_PARAMS, "the devnet is a testnet: use an addr_test address")
    key = load_wallet(devnet.data_dir, FAUCET_WALLET)
    source = wallet_address(key)
    tx_in, funds = max(
        ((i, o) for i, o in devnet.pending.utxo.items() if o.address == source),
        key=lambda item: item[1].amount.coin,
    )
    fee = 200_000  # generous for a one-input, two-output payment; checked like any fee
    change = funds.amount.coin - lovelace - fee
    body = TransactionBody(
        inputs=[tx_in],
        outputs=[TransactionOutput(recipient, lovelace), TransactionOutput(source, change)],
        fee=fee,
    )
    signature = key.sign(body.hash())
    witness = VerificationKeyWitness(key.to_verification_key(), signature)
    return Transaction(body, TransactionWitnessSet(vkey_witnesses=[witness])).to_cbor()
