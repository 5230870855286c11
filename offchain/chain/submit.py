"""Submit a transaction and wait until it is confirmed on chain: every submission goes through
`submit` (or `submit_sync`, its twin for synchronous callers); an app that waits for the block
uses `submit_confirmed`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

from pycardano import Transaction, TransactionInput

from offchain.chain.follower import ChainEvent, Point, RollForward, follow, follow_from_tip
from offchain.chain.follower import tip_point as tip_point  # where its users import it from
from offchain.chain.ogmios import UNREACHABLE as UNREACHABLE  # where its users import it from
from offchain.chain.ogmios import Ogmios, OgmiosError, request_sync
from offchain.chain.utxo import spent_by
from offchain.core.errors import UnchainedError

CONFIRM_TIMEOUT_S = 60


class ConfirmationTimeout(TimeoutError):
    """The transaction was accepted but not confirmed in time (it may still land)."""


class ChainError(UnchainedError):
    """The chain could not be reached or refused what was asked; the message says which."""


async def submit(url: str, tx: Transaction | bytes) -> str:
    """Submit and return the transaction id; raises OgmiosError with the ledger's reason."""
    async with Ogmios(url) as ogmios:
        result = await ogmios.request("submitTransaction", _submission(tx))
    return str(result["transaction"]["id"])


def submit_sync(url: str, tx: Transaction | bytes) -> str:
    """`submit` for synchronous callers (the market's request handlers, its settle batcher)."""
    return str(request_sync(url, "submitTransaction", _submission(tx))["transaction"]["id"])


def _submission(tx: Transaction | bytes) -> dict[str, Any]:
    """submitTransaction's parameters: the bytes as given, or the transaction's CBOR."""
    cbor = tx if isinstance(tx, bytes) else tx.to_cbor()
    return {"transaction": {"cbor": cbor.hex()}}


async def wait_for_confirmations(
    url: str,
    tx_id: str,
    since: Point,
    confirmations: int = 1,
    timeout_s: float | None = 60.0,
    ttl: int | None = None,
    inputs: Collection[TransactionInput] = (),
) -> dict[str, Any]:
    """Follow the chain from `since` until `tx_id` is `confirmations` blocks deep.

    Returns the block holding the transaction. If that block is rolled back the count starts
    over, so the answer is only given for a transaction that is still on chain. With `ttl`
    (the transaction's first slot it is no longer valid in) it gives up on evidence: once a
    block at or past that slot came without it, it can never land (`timeout_s` None: no wall
    clock at all, however long the chain goes without a block); likewise once another
    transaction spent one of its `inputs`.
    """
    async with contextlib.aclosing(follow(url, [since])) as events:
        return await _confirmations(events, tx_id, confirmations, timeout_s, ttl, inputs)


async def _confirmations(
    events: AsyncIterator[ChainEvent],
    tx_id: str,
    confirmations: int,
    timeout_s: float | None,
    ttl: int | None,
    inputs: Collection[TransactionInput],
) -> dict[str, Any]:
    """`wait_for_confirmations` on a follower in place."""

    async def wait() -> dict[str, Any]:
        holder: dict[str, Any] | None = None
        async for event in events:
            if not isinstance(event, RollForward):
                point = event.point  # "origin", the only point that is no dict, or a block's
                if holder and (isinstance(point, str) or holder["slot"] > point["slot"]):
                    holder = None
                continue
            if holder is None and any(t["id"] == tx_id for t in event.block["transactions"]):
                holder = event.block
            if holder and event.block["height"] - holder["height"] + 1 >= confirmations:
                return holder
            if holder is None and ttl is not None and event.block["slot"] >= ttl:
                raise ConfirmationTimeout(f"transaction {tx_id} is not on chain by its ttl "
                                          f"(slot {ttl}): it can never land")  # fmt: skip
            if holder is None and (other := _spender(event.block, tx_id, inputs)):
                raise ConfirmationTimeout(f"transaction {other} spent an input of {tx_id}: "
                                          "it can never land")  # fmt: skip
        raise AssertionError("a chain follower never ends")

    try:
        return await asyncio.wait_for(wait(), timeout_s)
    except ConfirmationTimeout:  # its ttl passed: said in its own words
        raise
    except TimeoutError as exc:
        raise ConfirmationTimeout(
            f"transaction {tx_id} not {confirmations} block(s) deep within {timeout_s} s"
        ) from exc


def _spender(block: dict[str, Any], tx_id: str, inputs: Collection[TransactionInput]) -> str:
    """The id of a transaction in `block` other than `tx_id` that spent one of `inputs`
    ("": none did)."""
    for tx in block["transactions"] if inputs else ():
        if tx["id"] != tx_id and any(ref in inputs for ref in spent_by(tx)):
            return str(tx["id"])
    return ""


async def submit_and_wait(
    url: str,
    tx: Transaction | bytes,
    confirmations: int = 1,
    timeout_s: float | None = 60.0,
    ttl: int | None = None,
    inputs: Collection[TransactionInput] = (),
) -> dict[str, Any]:
    """Submit, then wait for confirmations (`wait_for_confirmations`); returns the block
    holding the transaction."""
    send = lambda: submit(url, tx)  # noqa: E731 - one call, named for what it does
    return await confirmed_after(url, send, confirmations, timeout_s, ttl, inputs)


async def confirmed_after(
    url: str,
    send: Callable[[], Awaitable[str]],
    confirmations: int = 1,
    timeout_s: float | None = 60.0,
    ttl: int | None = None,
    inputs: Collection[TransactionInput] = (),
) -> dict[str, Any]:
    """Call `send` (it submits a transaction, or has one submitted, and answers its id), then
    wait for confirmations (`wait_for_confirmations`); returns the block holding it.

    The follower is in place at the tip before `send`, so the block that takes the
    transaction is never missed, and a fork that orphans that tip meanwhile comes as a
    rollback instead of a point the chain no longer knows.
    """
    async with contextlib.aclosing(follow_from_tip(url)) as events:
        await anext(events)  # the intersection: in place
        tx_id = await send()
        return await _confirmations(events, tx_id, confirmations, timeout_s, ttl, inputs)


async def submit_confirmed(url: str, tx: Transaction) -> int:
    """Submit `tx` and wait until it is in a block (`submit_confirmed_block`); returns the
    block height. Refusals and timeouts come back as ChainError in words an operator can act
    on."""
    return int((await submit_confirmed_block(url, tx))["height"])


async def submit_confirmed_block(url: str, tx: Transaction) -> dict[str, Any]:
    """`submit_confirmed` following the chain instead of a clock: a transaction with a ttl is
    waited for until a block passes its ttl without it, however slow the blocks (on mainnet
    some minutes have none), or another transaction spends one of its inputs; one without a
    ttl, `CONFIRM_TIMEOUT_S`. Answers the block that holds `tx` ({slot, id, height}): where a
    caller that counts its depth later looks for it."""
    ttl = tx.transaction_body.ttl
    block = await _confirmed(url, tx, None if ttl else CONFIRM_TIMEOUT_S, ttl)
    return {key: block[key] for key in ("slot", "id", "height")}


async def _confirmed(
    url: str, tx: Transaction, timeout_s: float | None, ttl: int | None
) -> dict[str, Any]:
    inputs = set(tx.transaction_body.inputs)
    try:
        return await submit_and_wait(url, tx, timeout_s=timeout_s, ttl=ttl, inputs=inputs)
    except OgmiosError as exc:
        raise ChainError(f"the ledger refused transaction {tx.id}: {exc.message}") from exc
    except ConfirmationTimeout as exc:
        later = "" if ttl else "; it may still land, look again before retrying"
        raise ChainError(f"{exc}{later}") from exc
