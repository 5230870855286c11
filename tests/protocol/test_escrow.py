"""Escrow honest paths on the devnet, balances checked to the lovelace, and the builders'
refusals that say what is missing."""

from __future__ import annotations

import pytest

from offchain.chain.time import iso
from offchain.protocol.ledger.claim import Claim
from offchain.protocol.ledger.split import refund_amount, settle_split
from offchain.protocol.tx.batch import SmallPayout, settle
from offchain.protocol.tx.escrow import cancel, escrow_datum, lock, refund
from offchain.protocol.tx.txbuild import BuildError, Clock
from tests.protocol import onchain
from tests.protocol.onchain import (
    ALLOWANCE,
    EVIDENCE,
    LOCKED,
    MAX_UNITS,
    PRICE,
    REFUND_WINDOW_MS,
    RESULT,
    balance,
    confirm,
    escrow_terms,
    to_settle,
    travel_to,
    wallet,
)


def spent(devnet, escrow) -> bool:
    return escrow.input not in {u.input for u in devnet.context().utxos(escrow.output.address)}


async def test_settle_pays_provider_price_times_units_and_the_consumer_the_rest(devnet, deployment):
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    receipt = to_settle(deployment, provider.key, escrow, 1_234, RESULT, EVIDENCE)
    before = [balance(devnet, w.address) for w in (consumer, provider, market)]

    tx = await confirm(
        devnet, market.sign(settle(devnet.context(), deployment, [receipt], market.address))
    )

    split = settle_split(LOCKED, PRICE, 1_234, MAX_UNITS, ALLOWANCE)
    fee = tx.transaction_body.fee
    after = [balance(devnet, w.address) for w in (consumer, provider, market)]
    assert after[0] - before[0] == split.consumer
    assert after[1] - before[1] == split.provider == PRICE * 1_234
    assert after[2] - before[2] == split.fee - fee  # the allowance paid the fee
    assert fee < ALLOWANCE
    assert spent(devnet, escrow)


async def test_a_batch_settles_many_escrows_and_providers_in_one_transaction(devnet, deployment):
    """Five escrows, two providers, units from 0 to max; one settle run for all. Each provider
    is paid once for all its receipts, exactly price x units summed; each consumer gets
    locked - due - fee_allowance, and the submitter what the allowances leave."""
    consumers = [await wallet(devnet) for _ in range(5)]
    providers = [await wallet(devnet) for _ in range(2)]
    market = await wallet(devnet)
    units = [0, 600, 1_800, MAX_UNITS, 1_234]
    escrows = [
        await onchain.lock(devnet, deployment, c, providers[i % 2]) for i, c in enumerate(consumers)
    ]
    receipts = [
        to_settle(deployment, providers[i % 2].key, e, u, RESULT, EVIDENCE)
        for i, (e, u) in enumerate(zip(escrows, units, strict=True))
    ]
    parties = [*consumers, *providers, market]
    before = [balance(devnet, w.address) for w in parties]

    tx = await confirm(
        devnet, market.sign(settle(devnet.context(), deployment, receipts, market.address))
    )

    owed = [0] * len(parties)
    for i, used in enumerate(units):
        split = settle_split(LOCKED, PRICE, used, MAX_UNITS, ALLOWANCE)
        owed[i] += split.consumer
        owed[5 + i % 2] += split.provider
    owed[-1] = 5 * LOCKED - sum(owed) - tx.transaction_body.fee
    after = [balance(devnet, w.address) for w in parties]
    assert [a - b for a, b in zip(after, before, strict=True)] == owed
    assert len(tx.transaction_body.outputs) == 2 + 5 + 1  # payouts, refunds, change
    assert len(tx.transaction_witness_set.redeemer) == 6  # 5 spends + 1 withdraw
    assert all(spent(devnet, e) for e in escrows)


async def test_a_claim_on_many_escrows_pays_its_provider_one_output(devnet, deployment):
    """One signature for three escrows (two of one consumer, adjacent: one refund), beside a
    receipt of the same provider: one payout for all four, whatever signed them."""
    alice, bob, provider, market = [await wallet(devnet) for _ in range(4)]
    a1, a2 = await onchain.lock_together(devnet, deployment, alice, [provider, provider])
    b1 = await onchain.lock(devnet, deployment, bob, provider)
    b2 = await onchain.lock(devnet, deployment, bob, provider)
    units = {a1.input: 100, a2.input: 600, b1.input: 0}
    claim = Claim.sign(provider.key, deployment.network_id, deployment.settle_hash, units)
    receipt = to_settle(deployment, provider.key, b2, 1_234, RESULT, EVIDENCE)
    parties = [alice, bob, provider]
    before = [balance(devnet, w.address) for w in parties]

    built = settle(
        devnet.context(), deployment, [receipt], market.address, claims=[([a1, a2, b1], claim)]
    )
    tx = await confirm(devnet, market.sign(built))

    split = {n: settle_split(LOCKED, PRICE, n, MAX_UNITS, ALLOWANCE) for n in (100, 600, 0, 1_234)}
    paid = [o.amount.coin for o in tx.transaction_body.outputs if o.address == provider.address]
    assert paid == [PRICE * (700 + 1_234)]  # one output per provider address
    gained = [balance(devnet, w.address) - b for w, b in zip(parties, before, strict=True)]
    assert gained == [
        split[100].consumer + split[600].consumer,
        split[0].consumer + split[1_234].consumer,
        PRICE * (700 + 1_234),
    ]
    refunds = [o for o in tx.transaction_body.outputs if o.address == alice.address]
    assert len(refunds) == 1
    assert all(spent(devnet, e) for e in (a1, a2, b1, b2))


async def test_a_payout_below_the_minimum_waits_unless_its_provider_settles(devnet, deployment):
    """Ten units earn 20,000 lovelace, less than an output may hold: the settler would pay the
    rest, so the builder refuses (the receipt waits for a larger batch); the provider itself
    may settle it, its own change raising its own payout."""
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    receipt = to_settle(deployment, provider.key, escrow, 10, RESULT, EVIDENCE)
    with pytest.raises(SmallPayout, match="below the minimum UTxO"):
        settle(devnet.context(), deployment, [receipt], market.address)
    before = balance(devnet, consumer.address)
    built = settle(devnet.context(), deployment, [receipt], provider.address)
    await confirm(devnet, provider.sign(built))
    owed = settle_split(LOCKED, PRICE, 10, MAX_UNITS, ALLOWANCE).consumer
    assert balance(devnet, consumer.address) - before == owed
    assert spent(devnet, escrow)


async def test_refund_after_deadline_and_window_returns_all_but_the_allowance(devnet, deployment):
    consumer, provider, anyone = [await wallet(devnet) for _ in range(3)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    close = escrow_datum(deployment, escrow).close
    with pytest.raises(BuildError, match="not yet past deadline \\+ window: refundable at"):
        refund(devnet.context(), deployment, escrow, anyone.address)

    await travel_to(devnet, close + 1)  # within the refund window: only the consumer
    with pytest.raises(BuildError, match="only the consumer"):
        refund(devnet.context(), deployment, escrow, anyone.address)
    await travel_to(devnet, close + REFUND_WINDOW_MS + 1)
    before = [balance(devnet, w.address) for w in (consumer, anyone)]
    tx = await confirm(
        devnet, anyone.sign(refund(devnet.context(), deployment, escrow, anyone.address))
    )

    after = [balance(devnet, w.address) for w in (consumer, anyone)]
    assert after[0] - before[0] == refund_amount(LOCKED, ALLOWANCE) == LOCKED - ALLOWANCE
    assert after[1] - before[1] == ALLOWANCE - tx.transaction_body.fee


async def test_refund_error_names_the_first_refundable_time(devnet, deployment):
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    close = escrow_datum(deployment, escrow).close
    clock = Clock.now(devnet.context())
    first = clock.iso_slot(clock.first_slot_after(close))
    with pytest.raises(BuildError, match=f"refundable at {first}"):
        refund(devnet.context(), deployment, escrow, consumer.address)


async def test_cancel_signed_by_both_returns_the_escrow_at_any_time(devnet, deployment):
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    before = [balance(devnet, w.address) for w in (consumer, provider)]
    unsigned = cancel(devnet.context(), deployment, escrow, consumer.address)
    by_consumer = consumer.sign(unsigned)  # each party signs in its own process, in turn
    tx = await confirm(devnet, provider.sign(by_consumer))
    after = [balance(devnet, w.address) for w in (consumer, provider)]
    assert after[0] - before[0] == LOCKED - tx.transaction_body.fee
    assert after[1] == before[1]


async def test_lock_refuses_escrows_that_could_not_be_settled_as_agreed(devnet, deployment):
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    context = devnet.context()
    now = Clock.now(context).tip_ms
    cases = {
        "provider_vkey must be 32 bytes": dict(provider_vkey=provider.key_hash.payload),
        "job_id must be 32 bytes": dict(job_id=b"x" * 33),
        "must not be negative": dict(price_per_unit=-1),
        f"the deadline {iso(now - 1)} has passed": dict(deadline=now - 1),
        "settle window must be positive": dict(settle_window=0),
    }
    for message, changes in cases.items():
        with pytest.raises(BuildError, match=message):
            lock(
                context,
                deployment,
                consumer.address,
                escrow_terms(consumer, provider, now, **changes),
                LOCKED,
            )
    with pytest.raises(BuildError, match="cannot pay max units, the fee and the return deposit"):
        terms = escrow_terms(consumer, provider, now, fee_allowance=ALLOWANCE + 3_000_001)
        lock(context, deployment, consumer.address, terms, LOCKED)


async def test_settle_refuses_a_bad_receipt_and_a_closed_window(devnet, deployment):
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    forged = to_settle(deployment, consumer.key, escrow, 10, RESULT, EVIDENCE)
    with pytest.raises(BuildError, match="is not signed by its provider key"):
        settle(devnet.context(), deployment, [forged], market.address)
    too_many = to_settle(deployment, provider.key, escrow, MAX_UNITS + 1, RESULT, EVIDENCE)
    with pytest.raises(BuildError, match="units must be within"):
        settle(devnet.context(), deployment, [too_many], market.address)
    honest = to_settle(deployment, provider.key, escrow, 1_000, RESULT, EVIDENCE)
    with pytest.raises(BuildError, match="two claims for one escrow"):
        settle(devnet.context(), deployment, [honest, honest], market.address)
    close = escrow_datum(deployment, escrow).close
    await travel_to(devnet, close)
    with pytest.raises(BuildError, match=f"the settle window closed at {iso(close)}"):
        settle(devnet.context(), deployment, [honest], market.address)
