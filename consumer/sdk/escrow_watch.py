"""A job's escrow watched block by block until something happens to it: it is started (its
provider's Start), spent by someone (a receipt's settle), or refundable, and then refunded by
the renter at once: at its start deadline when no Start came (an early refund), at its close
when no receipt came (the provider went silent while it ran).

Fast by evidence, not by wall clock: the refund is built and signed ahead (valid from the first
slot a script sees past the deadline, `escrow.refund(valid_from=...)`), and submitted the
moment the chain's tip reaches that slot, which the renter learns from a chain-sync follower
(a block arrives, not a poll comes round). It goes into the next block. A Start can only be in
a block before the start deadline, so an escrow read unstarted once the tip is past it stays
so; the refund built ahead is dropped when the escrow moved (started) or went (settled)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator
from typing import Literal

from pycardano import Transaction

from consumer.sdk.errors import NothingToDo
from consumer.sdk.session import Consumer
from offchain.chain.follower import follow_from_tip
from offchain.chain.submit import UNREACHABLE, ChainError, submit_confirmed
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import Clock

AHEAD_MS = 5 * 60_000  # a refund is built this long (chain time) before it is due, or less
RECONNECT_S = 2.0  # the pause before the chain follower connects again


@dataclasses.dataclass(frozen=True)
class Ended:
    """What happened to the escrow: `started` (a Start moved it), `spent` (by another
    transaction: a settle), `refunded` (by the renter, `refund`)."""

    how: Literal["started", "spent", "refunded"]
    refund: Transaction | None = None


async def tips(url: str) -> AsyncGenerator[int, None]:
    """The chain tip's slot now, and again at every block (or rollback) from then on; a lost
    connection is made again (a wait for a close may last hours), starting with the tip."""
    while True:
        try:
            async with contextlib.aclosing(follow_from_tip(url)) as events:
                async for event in events:
                    tip = event.tip
                    yield int(tip["slot"]) if isinstance(tip, dict) else 0
        except UNREACHABLE:
            await asyncio.sleep(RECONNECT_S)


async def watch_escrow(consumer: Consumer, job_id: str, until_started: bool) -> Ended:
    """Follow the job's escrow (`consumer.current_escrow`) block by block until it is spent,
    started (with `until_started`), or refundable (`escrows.refundable_after`: its start
    deadline while unstarted, else its close): then refunded, with a refund built ahead."""
    clock = await asyncio.to_thread(Clock.now, consumer.context)
    ready: Transaction | None = None
    async with contextlib.aclosing(tips(consumer.ogmios_url)) as chain:
        async for tip in chain:  # the tip first, then the escrow as it is at or after it
            try:
                escrow, datum = await asyncio.to_thread(
                    consumer.current_escrow, consumer.store.get(job_id)
                )
            except NothingToDo:
                return Ended("spent")
            if until_started and datum.start_deadline == 0:
                return Ended("started")
            first = clock.first_slot_after(escrows.refundable_after(datum))
            if ready is not None and escrow.input not in ready.transaction_body.inputs:
                ready = None  # built for the escrow before its Start moved it
            if tip >= first:
                return await refunded(consumer, job_id, ready)
            due_in = clock.time.slot_to_posix_ms(first) - clock.time.slot_to_posix_ms(tip)
            if ready is None and due_in <= AHEAD_MS:
                unsigned = await asyncio.to_thread(
                    escrows.refund, consumer.context, consumer.deployment, escrow,
                    consumer.key.address, first,
                )  # fmt: skip
                ready = consumer.key.sign(unsigned)
    raise AssertionError("a chain follower never ends")


async def refunded(consumer: Consumer, job_id: str, ready: Transaction | None) -> Ended:
    """Submit the refund built ahead and wait for its block; built now when there is none or
    the ledger refuses it (its fee inputs spent meanwhile by another transaction of this key,
    its validity over). `spent` when the escrow went meanwhile."""
    if ready is not None:
        try:
            await submit_confirmed(consumer.ogmios_url, ready)
            return Ended("refunded", ready)
        except ChainError:
            pass  # built anew below, from the chain as it is now
    try:
        return Ended("refunded", await consumer.refund(job_id))
    except NothingToDo:  # spent between the read and the build
        return Ended("spent")
