"""Whether a transaction is a Cancel of one escrow and nothing else, before the provider signs
it. The provider's witness is its payment key's: it authorises every input locked by that key
(its wallet), every script that asks for that key (its bond, its other escrows) and whatever
the transaction does beside. So a renter's cancel is signed only when it spends this escrow by
Cancel, other inputs only of others' keys (all on chain now), no other script, and takes,
mints, certifies or votes nothing. The market runs the same check on a cancel a renter posts.
"""

from __future__ import annotations

from collections.abc import Callable

from pycardano import Transaction, TransactionInput, UTxO, VerificationKeyHash

from offchain.chain.utxo import format_out_ref
from offchain.core.errors import UnchainedError
from offchain.protocol.ledger.types import Cancel
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.tx_reader import Script, TxReader

Lookup = Callable[[TransactionInput], UTxO | None]  # the unspent output at a ref, or None
NOTHING_ELSE = {
    "certificates": "certificates", "withdraws": "withdrawals", "mint": "minting",
    "voting_procedures": "votes", "proposal_procedures": "governance proposals",
    "donation": "a treasury donation",
}  # fmt: skip


class CancelRefused(UnchainedError):
    """Not a transaction the provider may sign as a cancel of this escrow; the message says
    what it does beside."""


def check_cancel(
    tx: Transaction,
    deployment: Deployment,
    escrow: TransactionInput,
    provider: VerificationKeyHash,
    lookup: Lookup,
) -> UTxO:
    """The escrow's UTxO if `tx` spends it by Cancel and does nothing else a signature by
    `provider` (the escrow's provider key hash) would authorise; CancelRefused otherwise."""
    body = tx.transaction_body
    for field, what in NOTHING_ELSE.items():
        if getattr(body, field, None):
            raise CancelRefused(f"the transaction carries {what}: a cancel spends one escrow")
    inputs = list(body.inputs)
    if escrow not in inputs:
        raise CancelRefused(f"the transaction does not spend escrow {format_out_ref(escrow)}")
    spent = {ref: _on_chain(lookup, ref, "input") for ref in inputs}
    if spent[escrow].output.address.payment_part != deployment.escrow_hash:
        raise CancelRefused(f"{format_out_ref(escrow)} is not at this deployment's escrow script")
    others = [u for ref, u in spent.items() if ref != escrow]
    collateral = [_on_chain(lookup, ref, "collateral") for ref in body.collateral or []]
    for utxo in [*others, *collateral]:
        payment = utxo.output.address.payment_part
        if not isinstance(payment, VerificationKeyHash):
            raise CancelRefused(f"it spends {format_out_ref(utxo.input)}, locked by another script")
        if payment == provider:
            raise CancelRefused(f"it spends {format_out_ref(utxo.input)}, the provider's own")
    if not isinstance(TxReader(tx).spend(escrow, Script.ESCROW), Cancel):
        raise CancelRefused(f"escrow {format_out_ref(escrow)} is not spent by the Cancel redeemer")
    return spent[escrow]


def _on_chain(lookup: Lookup, ref: TransactionInput, what: str) -> UTxO:
    utxo = lookup(ref)
    if utxo is None:
        raise CancelRefused(f"its {what} {format_out_ref(ref)} is not an unspent output on chain")
    return utxo
