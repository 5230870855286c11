"""Validity-range tricks at and around the deadline, the settle window and the unbonding
notice: each refused, next to the range one slot over that is accepted."""

from __future__ import annotations

import dataclasses

from pycardano import TransactionOutput

from offchain.protocol.ledger.types import BeginUnbond, Just, PayoutKind, Withdraw
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import Clock
from tests.protocol import onchain
from tests.protocol.onchain import (
    ADA,
    ALLOWANCE,
    LOCKED,
    SCRIPT_FAILED,
    UNBOUNDED,
    bond_by_hand,
    confirm,
    confirm_gains,
    plan,
    post_bond,
    refund_by_hand,
    rejected,
    tagged,
    travel_to,
    wallet,
)

UNITS = 1_000
OUTSIDE_VALIDITY = 3118  # Ogmios: the transaction is not valid at the current slot


async def test_settle_needs_an_upper_bound_no_later_than_deadline_plus_window(devnet, deployment):
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    clock = Clock.now(devnet.context())
    close_slot = clock.time.posix_ms_to_slot(escrow_datum(deployment, escrow).close)
    assert clock.time.slot_to_posix_ms(close_slot) == escrow_datum(deployment, escrow).close
    honest = plan(deployment, [(provider, [(escrow, UNITS)])])
    for ttl, reason in (
        (close_slot + 1, "units or time"),  # one slot after the close
        (UNBOUNDED, "one withdrawal, and an upper bound"),
    ):
        attack = honest.settle(devnet, deployment, market, ttl=ttl)
        await rejected(devnet, attack, SCRIPT_FAILED, f"traces: {reason}")
    await confirm_gains(
        devnet, honest.settle(devnet, deployment, market, ttl=close_slot), honest.gains
    )


async def test_refund_needs_a_finite_lower_bound_after_deadline_plus_window(devnet, deployment):
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    # in the refund window, where only the consumer refunds: its time checks hold for it too
    signed = {"signers": [consumer.key]}
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    close = escrow_datum(deployment, escrow).close
    close_slot = Clock.now(devnet.context()).time.posix_ms_to_slot(close)
    owed = [tagged(consumer.address, LOCKED - ALLOWANCE, PayoutKind.REFUND, escrow)]
    early = refund_by_hand(
        devnet, deployment, consumer, [(escrow, 0)], owed, start=close_slot + 1, **signed
    )
    await rejected(devnet, early, OUTSIDE_VALIDITY)  # the ledger keeps it out until then

    await travel_to(devnet, close + 1_000)
    for start, reason in (
        (close_slot, "refund before close"),  # exactly at the close
        (UNBOUNDED, "refund needs a lower bound"),
        (0, "refund before close"),  # from the origin of time
    ):
        attack = refund_by_hand(
            devnet, deployment, consumer, [(escrow, 0)], owed, start=start, **signed
        )
        await rejected(devnet, attack, SCRIPT_FAILED, f"traces: {reason}")
    honest = refund_by_hand(
        devnet, deployment, consumer, [(escrow, 0)], owed, start=close_slot + 1, **signed
    )
    await confirm(devnet, honest)


async def test_the_unbonding_notice_runs_from_the_upper_bound(devnet, deployment):
    """The audit's attack: BeginUnbond with its lower bound backdated past the whole notice
    (the datum backdated with it, or left at now), then Withdraw at once. The notice starts
    at the upper bound, the one bound the ledger forces into the future, so a backdated lower
    bound buys nothing; the withdrawal is refused one slot before the notice ends."""
    provider = await wallet(devnet)
    bond = await post_bond(devnet, deployment, provider, 100 * ADA)
    datum = bonds.bond_datum(deployment, bond)
    notice = deployment.notice_ms
    await travel_to(devnet, Clock.now(devnet.context()).tip_ms + notice + 60_000)
    clock = Clock.now(devnet.context())
    backdated = clock.tip_ms - notice - 60_000
    old_slot = clock.time.posix_ms_to_slot(backdated)
    ttl = clock.ttl_until(clock.tip_ms + 60_000)
    upper = clock.time.slot_to_posix_ms(ttl)

    def unbond(since: int, start: int, ttl: int):
        output = dataclasses.replace(datum, unbonding_since=Just(since))
        continuing = [TransactionOutput(bond.output.address, 100 * ADA, datum=output)]
        return bond_by_hand(
            devnet, deployment, provider, bond, BeginUnbond(0), continuing, start=start,
            ttl=ttl, signers=[provider.key],
        )  # fmt: skip

    for since in (backdated, clock.tip_ms):
        attack = unbond(since, old_slot, ttl)
        await rejected(devnet, attack, SCRIPT_FAILED, "traces: continuing output datum")
    unbounded = unbond(upper, old_slot, UNBOUNDED)
    await rejected(devnet, unbounded, SCRIPT_FAILED, "traces: needs a finite upper bound")
    expired = unbond(clock.time.slot_to_posix_ms(clock.tip_slot), old_slot, clock.tip_slot)
    await rejected(devnet, expired, OUTSIDE_VALIDITY)  # an upper bound in the past
    bond = onchain.output(await confirm(devnet, unbond(upper, old_slot, ttl)), 0)
    assert bonds.bond_datum(deployment, bond).unbonding_since == Just(upper)

    def withdraw(start: int):
        return bond_by_hand(
            devnet, deployment, provider, bond, Withdraw(), start=start, signers=[provider.key]
        )

    now = Clock.now(devnet.context()).tip_slot
    await rejected(devnet, withdraw(now), SCRIPT_FAILED, "traces: notice not over")
    ready = clock.first_slot_at(upper + notice)
    await travel_to(devnet, upper + notice + 1_000)
    for start, reason in ((ready - 1, "notice not over"), (UNBOUNDED, "needs a finite lower")):
        await rejected(devnet, withdraw(start), SCRIPT_FAILED, f"traces: {reason}")
    await confirm(devnet, withdraw(ready))
