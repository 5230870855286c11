"""The gateway's IOU store and its group commit, on a real channel book: IOUs that queue while a
commit is under way are stored together, one `accept` for the largest of a channel, each still
checked as alone (a forged one and a stale one refused, the others taken); when the largest is
above what the channel can pay, the others are taken one by one, as if they had come so."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from offchain.protocol.ledger.iou import SignedIou
from provider.gateway.commit import IouStore, NotServed
from provider.money.channel_book import BadIouSignature, IouAboveChannel, StaleIou, UnknownChannel
from tests.provider.test_gateway_support import (
    CAPACITY,
    CHANNEL,
    OTHER_CHANNEL,
    book_with_channels,
    iou,
)

UNKNOWN = b"\x09" * 28  # a channel the book does not hold


async def stored_together(store: IouStore, first: SignedIou, rest: list[SignedIou]) -> list:
    """Store `first`, holding its commit until `rest` are all queued behind it; each outcome."""
    entered, go = threading.Event(), threading.Event()
    take = store._take

    def held(signed: SignedIou) -> None:
        if signed is first:
            entered.set()
            go.wait()
        take(signed)

    store._take = held  # type: ignore[method-assign]
    tasks = [asyncio.ensure_future(store.store(first, 0))]
    await asyncio.to_thread(entered.wait)  # the store's thread is committing `first`
    tasks += [asyncio.ensure_future(store.store(signed, 0)) for signed in rest]
    await asyncio.sleep(0)  # each of them has queued its IOU
    go.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_ious_queued_during_a_commit_are_stored_together(tmp_path: Path) -> None:
    book = book_with_channels(tmp_path / "channels.sqlite")
    store = IouStore(book)
    forged = SignedIou(CHANNEL, 9_000, iou(8_000).signature)
    outcomes = await stored_together(store, iou(1_000),
                                     [iou(3_000), iou(500), forged, iou(2_000)])  # fmt: skip
    assert outcomes[0] is None and outcomes[1] is None and outcomes[4] is None
    assert isinstance(outcomes[2], StaleIou) and isinstance(outcomes[3], BadIouSignature)
    assert store.commits == 2  # the first alone, then 3,000 for itself and 2,000
    assert book.get(CHANNEL).iou.amount == 3_000  # type: ignore[union-attr]
    store.close()


async def test_when_the_largest_is_refused_the_others_are_taken_one_by_one(
    tmp_path: Path,
) -> None:
    book = book_with_channels(tmp_path / "channels.sqlite")
    store = IouStore(book)
    outcomes = await stored_together(store, iou(1_000),
                                     [iou(CAPACITY + 1), iou(2_000), iou(4_000)])  # fmt: skip
    assert outcomes[0] is None and outcomes[2] is None and outcomes[3] is None
    assert isinstance(outcomes[1], IouAboveChannel)
    assert book.get(CHANNEL).iou.amount == 4_000  # type: ignore[union-attr]
    store.close()


async def test_the_channels_of_a_group_are_stored_in_one_commit(tmp_path: Path) -> None:
    book = book_with_channels(tmp_path / "channels.sqlite")
    store = IouStore(book)
    outcomes = await stored_together(store, iou(1_000), [
        iou(3_000), iou(2_000, OTHER_CHANNEL), iou(CAPACITY + 1, OTHER_CHANNEL),
        iou(5_000, OTHER_CHANNEL), SignedIou(UNKNOWN, 1, iou(1).signature),
    ])  # fmt: skip
    assert outcomes[:3] == [None, None, None] and outcomes[4] is None
    assert isinstance(outcomes[3], IouAboveChannel) and isinstance(outcomes[5], UnknownChannel)
    # the first alone; then 3,000 on CHANNEL with CAPACITY + 1 on OTHER_CHANNEL (refused:
    # 2,000 and 5,000 one by one after) and the unknown channel's in one transaction
    assert store.commits == 4
    assert book.get(CHANNEL).iou.amount == 3_000  # type: ignore[union-attr]
    assert book.get(OTHER_CHANNEL).iou.amount == 5_000  # type: ignore[union-attr]
    store.close()


async def test_an_iou_is_refused_once_the_channel_may_not_be_served_that_much(
    tmp_path: Path,
) -> None:
    book = book_with_channels(tmp_path / "channels.sqlite")
    store = IouStore(book)
    with pytest.raises(NotServed, match="may not be served"):
        await store.store(iou(1_000), CAPACITY + 1)  # served beyond what the channel can pay
    store.close()
