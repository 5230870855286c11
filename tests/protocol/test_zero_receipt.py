"""A zero-unit receipt (a refused job, or one that failed before it ran) settles the escrow at
once with no provider output: the renter gets `locked - fee_allowance` back in the next batch
(PROTOCOL.md, batch settle). Hand-made twins show the consumer's output is still required and a
receipt for units still needs the provider's output."""

from __future__ import annotations

from offchain.protocol.escrow import escrow_datum, settle
from offchain.protocol.split import settle_split
from offchain.protocol.types import PayoutKind
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
    item,
    rejected,
    settle_by_hand,
    tagged,
    to_settle,
    wallet,
)
from tests.protocol.test_escrow import spent

UNITS = 1_234


async def test_a_zero_unit_receipt_pays_the_consumer_and_no_provider_output(devnet, deployment):
    """Built by the off-chain builder beside a paying receipt: the zero item has one output."""
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
    to_consumer = tagged(consumer.address, OWED, PayoutKind.SETTLE, escrow)
    short = tagged(consumer.address, OWED - 1, PayoutKind.SETTLE, escrow)
    zero = [(escrow, item(deployment, provider.key, escrow, 0, 0, 0))]
    for outputs in ([], [short]):  # the provider index points at the consumer's, ignored
        attack = settle_by_hand(devnet, deployment, market, zero, outputs)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: consumer payout")

    split = settle_split(LOCKED, PRICE, UNITS, MAX_UNITS, ALLOWANCE)
    paid = [(escrow, item(deployment, provider.key, escrow, UNITS, 0, 0))]
    consumer_only = [tagged(consumer.address, split.consumer, PayoutKind.SETTLE, escrow)]
    attack = settle_by_hand(devnet, deployment, market, paid, consumer_only)
    await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: provider payout")

    before = balance(devnet, consumer.address)
    await confirm(devnet, settle_by_hand(devnet, deployment, market, zero, [to_consumer]))
    assert balance(devnet, consumer.address) - before == OWED
    assert spent(devnet, escrow)
