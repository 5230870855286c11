"""`unchained job cancel`: take a job back. Nothing locked yet: the market drops the quote.
Locked: the renter builds the escrow's Cancel (it pays the fee; the escrow comes back whole)
and posts it to the market unsigned; the provider's daemon answers. A job it had not started:
it signs, and the renter adds its own witness and submits, so the ADA is back within a block or
two. A job it had started: it stops the container and signs a receipt for the units used, which
the market settles in its next batch (the rest comes back to the renter there). A provider that
does not answer in time leaves the request standing: run the command again, or refund after
the close."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from pycardano import Transaction

from consumer.sdk.errors import ConsumerError, NothingToDo
from consumer.sdk.pending import Prepared
from consumer.sdk.session import Consumer
from offchain.chain.ogmios import Ogmios
from offchain.chain.submit import submit_confirmed
from offchain.chain.time import iso
from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.protocol.api.market_errors import MarketRefused
from offchain.protocol.api.wire import EventPublic
from offchain.protocol.job.job_state import CancelState, JobState
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx import escrow as escrows

S = JobState
UNLOCKED = (S.REQUESTED, S.QUOTED)
LOCKED = (S.FUNDED, S.ACCEPTED, S.RUNNING)
STOPPED = (S.COMPLETED, S.SETTLING, S.FAILED)  # the provider's receipt is in (or its failure)
POLL_S = 0.5
Step = Callable[[str], None]
Defer = Callable[[Prepared], None]


@dataclasses.dataclass(frozen=True)
class Cancelled:
    """How a cancel ended: `dropped` (nothing was locked), `cancelled` (the Cancel is on
    chain), `pending` (signed by the provider, left for the renter's wallet) or `stopped` (the
    job ran: settled for the units it used)."""

    job_id: str
    how: str
    tx_id: str | None = None
    returned: int = 0  # lovelace that came back to the renter (less the fee it paid)
    fee: int = 0  # the Cancel's fee, paid by the renter
    units: int | None = None  # stopped: the units billed
    cost: int = 0  # stopped: price x units, paid to the provider
    blocks: int | None = None  # blocks from the request to the transaction that paid back
    state: str = ""


class ProviderSilent(ConsumerError):
    """The provider did not answer the cancel within the wait; the request stands."""


async def cancel(
    consumer: Consumer, job_id: str, wait_s: float, step: Step, defer: Defer | None = None
) -> Cancelled:
    """Cancel `job_id`, waiting up to `wait_s` for its provider (and, for a job that ran, for
    the settlement); `step` hears each step in words. With `defer`, the provider-signed Cancel
    is handed to it for a wallet's witness (`consumer.sdk.pending`) instead of signed here:
    `pending` then."""
    status = await consumer.market.job(job_id)
    state = status.state
    if state in UNLOCKED:
        await consumer.market.cancel(job_id)
        return Cancelled(job_id, "dropped", state=S.EXPIRED)
    if state not in LOCKED:
        raise NothingToDo(
            f"job {job_id} is {state}: only a job not yet run to its end can be cancelled "
            f"(see `unchained job status {job_id}`)", state=state,
        )  # fmt: skip
    escrow = await asyncio.to_thread(_escrow, consumer, job_id, status.escrow)
    unsigned = await asyncio.to_thread(
        escrows.cancel, consumer.context, consumer.deployment, escrow, consumer.key.address
    )
    since = await _height(consumer.ogmios_url)
    await _request(consumer, job_id, unsigned.to_cbor_hex())
    step(f"cancel requested: waiting up to {wait_s:.0f} s for the provider's answer")
    loop = asyncio.get_running_loop()
    until = loop.time() + wait_s
    while loop.time() < until:
        view = await consumer.market.cancel_status(job_id)
        if view.state == CancelState.SIGNED and view.transaction is not None:
            step(
                "the provider signed the cancel: "
                + ("writing it for your wallet" if defer else "adding yours and submitting it")
            )
            return await _submit(consumer, job_id, unsigned, view.transaction, escrow, since,
                                 defer)  # fmt: skip
        if view.state == CancelState.REFUSED:
            raise ConsumerError(
                f"the provider refused to sign the cancel: {view.refusal}",
                refusal=view.refusal,
            )  # fmt: skip
        if view.state == CancelState.STOPPING or view.job_state in STOPPED:
            step("the provider stopped the job: its receipt bills the units it used; waiting "
                 "for the market's settlement")  # fmt: skip
            return await _settled(consumer, job_id, escrow, wait_s, since, step)
        await asyncio.sleep(POLL_S)
    close = escrows.escrow_datum(consumer.deployment, escrow).close
    raise ProviderSilent(
        f"the provider did not answer the cancel within {wait_s:.0f} s (its daemon may be "
        f"offline): the request stays with the market. Run `unchained job cancel {job_id}` "
        f"again later, or `unchained job refund {job_id}` once the escrow closes at "
        f"{iso(close)} (chain time).", close_ms=close,
    )  # fmt: skip


async def _request(consumer: Consumer, job_id: str, cancel_hex: str) -> None:
    """Hand the market this Cancel. A 409 on `state` means the provider answered an earlier
    one (a `job cancel` that stopped waiting) while this was posted: post it once more, to
    replace that one; the provider signs a job it has not taken again. Stopping is final."""
    try:
        await consumer.market.cancel(job_id, cancel_hex)
    except MarketRefused as exc:
        if (exc.status, exc.field) != (409, "state"):
            raise
        await consumer.market.cancel(job_id, cancel_hex)


def _escrow(consumer: Consumer, job_id: str, ref: str | None) -> Any:
    if ref is None:
        raise NothingToDo(f"job {job_id} has no escrow yet: nothing to cancel on chain")
    utxo = utxo_at(consumer.context, parse_out_ref(ref))
    if utxo is None:
        raise NothingToDo(f"escrow {ref} is spent already: see `unchained job status {job_id}`")
    return utxo


async def _height(ogmios_url: str) -> int:
    async with Ogmios(ogmios_url) as ogmios:
        return int(await ogmios.request("queryNetwork/blockHeight"))


async def _submit(
    consumer: Consumer, job_id: str, unsigned: Transaction, signed_hex: str, escrow: Any,
    since: int, defer: Defer | None,
) -> Cancelled:  # fmt: skip
    """Add the renter's witness to the provider-signed Cancel, if it is the one built here (or
    leave that to a wallet: `defer`)."""
    tx = Transaction.from_cbor(bytes.fromhex(signed_hex))
    if tx.id != unsigned.id:
        raise ConsumerError(f"the market served another transaction ({tx.id}) than the cancel "
                            f"built here ({unsigned.id}): nothing submitted")  # fmt: skip
    fee = tx.transaction_body.fee
    facts = {"job_id": job_id, "returned": escrow.output.amount.coin - fee}
    if defer is not None:
        defer(Prepared("cancel", tx, facts))
        return Cancelled(job_id, "pending", tx_id=str(tx.id), returned=facts["returned"], fee=fee)
    height = await submit_confirmed(consumer.ogmios_url, consumer.key.sign(tx))
    return cancelled(facts, tx, height - since)


def cancelled(facts: dict[str, Any], signed: Transaction, blocks: int | None = None) -> Cancelled:
    """What a Cancel did once in a block (`blocks` after the request, when counted)."""
    return Cancelled(
        facts["job_id"], "cancelled", tx_id=str(signed.id), returned=facts["returned"],
        fee=signed.transaction_body.fee, blocks=blocks, state=S.CANCELLED,
    )  # fmt: skip


async def _settled(
    consumer: Consumer, job_id: str, escrow: Any, wait_s: float, since: int, step: Step
) -> Cancelled:
    """The stopped job once its receipt is settled (or as it stands when the wait ends): the
    job's events end at its final state, whose block tells how long the renter waited."""
    last: EventPublic | None = None
    try:
        async with asyncio.timeout(max(wait_s, 0)):
            async for event in consumer.events(job_id):
                last = event
    except TimeoutError:
        step(f"not settled yet: `unchained job status {job_id}` follows it")
    status = await consumer.market.job(job_id)
    units = status.receipt_units
    if units is None:
        return Cancelled(job_id, "stopped", state=status.state)
    datum = escrows.escrow_datum(consumer.deployment, escrow)
    split = settle_split(
        escrow.output.amount.coin, datum.price_per_unit, units, datum.max_units,
        datum.fee_allowance,
    )  # fmt: skip
    height = last.block_height if last is not None and status.state == S.SETTLED else None
    return Cancelled(
        job_id, "stopped", tx_id=status.settle_tx, returned=split.consumer, units=units,
        cost=split.provider, blocks=None if height is None else height - since,
        state=status.state,
    )  # fmt: skip
