"""Execution units remembered between settle batches: a batch of a shape already evaluated is
built without evaluateTransaction (the devnet runs its scripts once, on submit), and units that
turn out too small are refused by the ledger before they cost anything."""

from __future__ import annotations

import dataclasses

from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx.batch import settle
from offchain.protocol.tx.budgets import ExecutionBudgets
from tests.protocol import onchain
from tests.protocol.onchain import (
    ALLOWANCE,
    EVIDENCE,
    LOCKED,
    MAX_UNITS,
    PRICE,
    RESULT,
    balance,
    confirm,
    rejected,
    to_settle,
    wallet,
)

SPENDS_MISMATCH = 3136


def counting_evaluations(devnet) -> tuple[object, list[bytes]]:
    """A chain context that records each transaction it sends to evaluateTransaction."""
    context = devnet.context()
    sent: list[bytes] = []
    evaluate = context.evaluate_tx_cbor

    def counted(cbor):
        sent.append(cbor)
        return evaluate(cbor)

    context.evaluate_tx_cbor = counted
    return context, sent


async def three_receipts(devnet, deployment):
    consumers = [await wallet(devnet) for _ in range(3)]
    provider, market = await wallet(devnet), await wallet(devnet)
    escrows = [await onchain.lock(devnet, deployment, c, provider) for c in consumers]
    receipts = [to_settle(deployment, provider.key, e, 600, RESULT, EVIDENCE) for e in escrows]
    return receipts, provider, market


def units(tx) -> list[tuple[int, int, int, int]]:
    """(tag, index, memory, cpu) of each redeemer (a Conway redeemer map)."""
    redeemers = tx.transaction_witness_set.redeemer
    return sorted(
        (key.tag.value, key.index, value.ex_units.mem, value.ex_units.steps)
        for key, value in redeemers.items()
    )


async def test_a_batch_of_a_known_shape_declares_its_units_and_lands_evaluated_once(
    devnet, deployment
):
    receipts, provider, market = await three_receipts(devnet, deployment)
    budgets = ExecutionBudgets()
    context, evaluated = counting_evaluations(devnet)

    first = settle(context, deployment, receipts, market.address, budgets)
    assert len(evaluated) == 1 and not budgets.declared
    assert len(budgets.units) == 2  # the escrow spends (one cost at any index), the batch

    again = settle(context, deployment, receipts, market.address, budgets)
    assert len(evaluated) == 1 and budgets.declared  # the units came from `budgets`
    assert units(again) == units(first)
    before = balance(devnet, provider.address)
    await confirm(devnet, market.sign(again))  # the devnet ran the scripts on submit

    owed = settle_split(LOCKED, PRICE, 600, MAX_UNITS, ALLOWANCE).provider
    assert balance(devnet, provider.address) - before == 3 * owed


async def test_units_remembered_too_small_are_refused_and_forgetting_them_recovers(
    devnet, deployment
):
    receipts, _, market = await three_receipts(devnet, deployment)
    budgets = ExecutionBudgets()
    context, evaluated = counting_evaluations(devnet)
    settle(context, deployment, receipts, market.address, budgets)
    for key, known in budgets.units.items():  # as if the last batches had been cheaper
        budgets.units[key] = dataclasses.replace(known, mem=known.mem // 2)

    starved = market.sign(settle(context, deployment, receipts, market.address, budgets))
    assert len(evaluated) == 1 and budgets.declared
    await rejected(devnet, starved, SPENDS_MISMATCH, "ran out of its budget")
    assert all(escrow_unspent(devnet, escrow) for escrow, _ in receipts)

    budgets.forget()
    honest = settle(context, deployment, receipts, market.address, budgets)
    await confirm(devnet, market.sign(honest))
    assert len(evaluated) == 2
    assert not any(escrow_unspent(devnet, escrow) for escrow, _ in receipts)


def escrow_unspent(devnet, escrow) -> bool:
    return escrow.input in {u.input for u in devnet.context().utxos(escrow.output.address)}
