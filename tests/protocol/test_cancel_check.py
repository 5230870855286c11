"""`check_cancel`, as the provider's daemon runs it before it signs a renter's Cancel (and the
market before it stores one): the honest Cancel built by `escrow.cancel` passes; one that also
spends the provider's money (as an input or as collateral), spends no escrow, names an input
that is not on chain, spends the escrow by another redeemer, or withdraws is refused, saying
what it does beside. Real escrows on the devnet: the check reads every input from the chain."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pycardano import Transaction, TransactionInput, Withdrawals

from offchain.chain.utxo import utxo_at
from offchain.protocol.checks.cancel_check import CancelRefused, check_cancel
from offchain.protocol.ledger.types import Refund
from offchain.protocol.tx import escrow as escrows
from tests.protocol.onchain import lock, wallet


async def test_only_a_cancel_of_this_escrow_alone_is_signed(devnet, deployment):
    consumer, provider = await wallet(devnet), await wallet(devnet)
    escrow = await lock(devnet, deployment, consumer, provider)
    context = devnet.context()

    def checked(change: Callable[[Transaction], None] = lambda tx: None) -> TransactionInput:
        tx = escrows.cancel(context, deployment, escrow, consumer.address)
        change(tx)
        lookup = lambda ref: utxo_at(context, ref)  # noqa: E731
        return check_cancel(tx, deployment, escrow.input, provider.key_hash, lookup).input

    assert checked() == escrow.input
    provider_coin = context.utxos(provider.address)[0].input
    nowhere = TransactionInput(escrow.input.transaction_id, 99)
    reward = Withdrawals({bytes.fromhex("e0") + bytes(28): 0})
    for change, reason in [
        (adding("inputs", provider_coin), "the provider's own"),
        (adding("collateral", provider_coin), "the provider's own"),
        (adding("inputs", nowhere), "not an unspent output on chain"),
        (without(escrow.input), "does not spend escrow"),
        (as_refund, "not spent by the Cancel redeemer"),
        (lambda tx: setattr(tx.transaction_body, "withdraws", reward), "carries withdrawals"),
    ]:
        with pytest.raises(CancelRefused, match=reason):
            checked(change)


def adding(field: str, ref: TransactionInput) -> Callable[[Transaction], None]:
    def change(tx: Transaction) -> None:
        body = tx.transaction_body
        setattr(body, field, [*(getattr(body, field) or []), ref])

    return change


def without(ref: TransactionInput) -> Callable[[Transaction], None]:
    def change(tx: Transaction) -> None:
        tx.transaction_body.inputs = [i for i in tx.transaction_body.inputs if i != ref]

    return change


def as_refund(tx: Transaction) -> None:
    """The escrow spent by a Refund instead (same indices)."""
    for value in tx.transaction_witness_set.redeemer.values():
        value.data = Refund(value.data.own_input, value.data.consumer_output)
