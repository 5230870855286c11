"""A zero-unit receipt (a refused job, or one that failed before it ran) settles the escrow at
once with no provider output: the renter gets `locked - fee_allowance` back in the next batch
(PROTOCOL.md, batch settle). Hand-made twins show the consumer's refund is still required and
a receipt for units still needs the provider's payout."""

from __future__ import annotations

import dataclasses

from pycardano import TransactionOutput

from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx.batch import settle
from offchain.protocol.tx.escrow import escrow_datum
from tests.protocol import onchain
from tests.protocol.onchain import (
    ALLOWANCE,
    EVIDENCE,
    LOCKED,
    MAX_UNITS,
    OWED,
    PRICE,
    RESULT,
    SCRIPT_FAILED,
    balance,
    confirm,
    confirm_gains,
    plan,
    rejected,
    to_settle,
    wallet,
)
from tests.protocol.test_escrow import spent

UNITS = 1_234


async def test_a_zero_unit_receipt_pays_the_consumer_and_no_provider_output(devnet, deployment):
    """Built by the off-chain builder beside a paying receipt: the zero one has no output."""
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    refused = await onchain.lock(devnet, deployment, consumer, provider)
    ran = await onchain.lock(devnet, deployment, consumer, provider)
    receipts = [
        to_settle(deployment, provider.key, refused, 0, RESULT, EVIDENCE),
        to_settle(deployment, provider.key, ran, UNITS, RESULT, EVIDENCE),
    ]
    before = [balance(devnet, w.address) for w in (consumer, provider, market)]

    tx = await confirm(
        devnet, market.sign(settle(devnet.context(), deployment, receipts, market.address))
    )

    split = settle_split(LOCKED, PRICE, UNITS, MAX_UNITS, ALLOWANCE)
    after = [balance(devnet, w.address) for w in (consumer, provider, market)]
    assert after[0] - before[0] == OWED + split.consumer  # all but the allowance, and the rest
    assert after[1] - before[1] == split.provider  # nothing for the zero receipt
    assert after[2] - before[2] == 2 * ALLOWANCE - tx.transaction_body.fee
    to_provider = [o for o in tx.transaction_body.outputs if o.address == provider.address]
    assert len(to_provider) == 1
    assert spent(devnet, refused) and spent(devnet, ran)


async def test_zero_units_still_owe_the_consumer_and_units_still_owe_the_provider(
    devnet, deployment
):
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    assert escrow_datum(deployment, escrow).fee_allowance == ALLOWANCE
    zero = plan(deployment, [(provider, [(escrow, 0)])])
    assert zero.outputs[0].amount.coin == OWED and zero.first_refund == 0
    short = TransactionOutput(consumer.address, OWED - 1)
    for outputs in ([], [short]):  # with none, the change output is read as the refund
        attack = dataclasses.replace(zero, outputs=outputs).settle(devnet, deployment, market)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: consumer refund")

    paid = plan(deployment, [(provider, [(escrow, UNITS)])])
    # the provider's payout named at the consumer's refund (the refunds read from the change)
    refund_only = dataclasses.replace(paid, outputs=paid.outputs[1:], first_refund=1)
    assert refund_only.items == [UNITS, 0, 0]
    attack = refund_only.settle(devnet, deployment, market)
    await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: one provider per payout")

    await confirm_gains(devnet, zero.settle(devnet, deployment, market), zero.gains)
    assert zero.gains == {str(consumer.address): OWED}
    assert spent(devnet, escrow)
