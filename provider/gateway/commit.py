"""The gateway's IOU store: every IOU a request carries is checked and durably stored by
`ChannelBook.accept` before that request is proxied, on one thread of its own so the event loop
never waits on a disk flush or on the book's lock.

Group commit: the IOUs that arrive while a flush is under way are taken together. IOUs are
cumulative, so on each channel the largest of a group stands for all of them, and the largest
of every channel in the group are stored in one transaction (`ChannelBook.accept_many`, one
fsync); each request is released only once an IOU at least its own is on disk. Each IOU of
the group is still checked as `accept` would check it alone (the renter's signature, not below
the latest acknowledged before the group); if a channel's largest is refused (above what the
channel can pay), its others are accepted one by one, smallest first, exactly as if they had
come in that order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
from collections import defaultdict

from offchain.protocol.ledger.iou import SignedIou
from provider.money.channel_book import (
    BadIouSignature,
    ChannelBook,
    IouRefused,
    StaleIou,
    UnknownChannel,
)


class NotServed(IouRefused):
    """The channel may not be served that much: closing, or beyond its capacity or credit."""


@dataclasses.dataclass
class _Pending:
    iou: SignedIou
    served: int  # lovelace served on the channel once this request is, for `may_serve`
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[None]

    def settle(self, refusal: IouRefused | None) -> None:
        if refusal is None:
            self.loop.call_soon_threadsafe(_resolve, self.done)
        else:
            self.loop.call_soon_threadsafe(_refuse, self.done, refusal)


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():  # the request may have gone (client disconnected)
        done.set_result(None)


def _refuse(done: asyncio.Future[None], refusal: IouRefused) -> None:
    if not done.done():
        done.set_exception(refusal)


class IouStore:
    """`store(iou, served)` returns once `iou` is durably acknowledged and the channel may be
    served `served` lovelace in all; raises IouRefused (saying why) otherwise."""

    def __init__(self, book: ChannelBook) -> None:
        self.book = book
        self.commits = 0  # accept calls made: the group commit's effect, for the benchmark
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="iou-store", daemon=True)
        self._thread.start()

    async def store(self, iou: SignedIou, served: int) -> None:
        loop = asyncio.get_running_loop()
        pending = _Pending(iou, served, loop, loop.create_future())
        self._queue.put(pending)
        await pending.done

    def close(self) -> None:
        """Finish the IOUs queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (first := self._queue.get()) is not None:
            group = [first]
            while True:  # everything queued during the last flush joins this one
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)  # stop after this group
                    break
                group.append(more)
            by_channel: dict[bytes, list[_Pending]] = defaultdict(list)
            for pending in group:
                by_channel[pending.iou.channel].append(pending)
            self._commit(by_channel)

    def _commit(self, by_channel: dict[bytes, list[_Pending]]) -> None:
        try:
            taken = self._accept(by_channel)
        except Exception as error:  # the database failed: no request of the group is served
            failed = IouRefused(f"the provider could not store the IOU: {error}")
            for pendings in by_channel.values():
                for pending in pendings:
                    pending.settle(failed)
            return
        for channel, pendings in by_channel.items():
            for pending in pendings:
                refusal: IouRefused | None = taken.get(id(pending))
                if refusal is None and not self.book.may_serve(channel, pending.served):
                    refusal = NotServed(f"channel {channel.hex()} may not be served "
                                        f"{pending.served} lovelace: closing, or beyond what "
                                        "it can pay or the provider's credit")  # fmt: skip
                pending.settle(refusal)

    def _accept(self, by_channel: dict[bytes, list[_Pending]]) -> dict[int, IouRefused | None]:
        """Each pending's refusal (None: acknowledged), by its id(): the largest IOU of each
        channel taken together (one transaction), then, on a channel whose largest was
        refused, the others one by one."""
        verdict: dict[int, IouRefused | None] = {}
        candidates = {channel: self._candidates(channel, group, verdict)
                      for channel, group in by_channel.items()}  # fmt: skip
        candidates = {channel: pendings for channel, pendings in candidates.items() if pendings}
        largest = self._take_all([pendings[-1].iou for pendings in candidates.values()])
        for pendings, refusal in zip(candidates.values(), largest, strict=True):
            if refusal is None:
                verdict.update((id(p), None) for p in pendings)
                continue
            for pending in pendings:  # as if they had come one by one, smallest first
                try:
                    self._take(pending.iou)
                    verdict[id(pending)] = None
                except IouRefused as refused:
                    verdict[id(pending)] = refused
        return verdict

    def _candidates(
        self, channel: bytes, group: list[_Pending], verdict: dict[int, IouRefused | None]
    ) -> list[_Pending]:
        """The IOUs of `group` (all on `channel`) that may be taken, smallest first; the others'
        refusals go in `verdict`. Alone, an IOU is for `accept` to check whole."""
        if len(group) == 1:
            return group
        book = self.book
        entry = book.get(channel)
        if entry is None or entry.ended:
            gone = UnknownChannel(f"channel {channel.hex()} is not served here")
            verdict.update((id(p), gone) for p in group)
            return []
        latest = entry.iou.amount if entry.iou else 0
        candidates = []
        for pending in group:
            iou = pending.iou
            if not iou.signed_by(entry.view.renter_vkey, book.network_id, book.channel_hash):
                verdict[id(pending)] = BadIouSignature(
                    f"IOU on channel {channel.hex()} not signed by its renter for network "
                    f"{book.network_id} and channel script {book.channel_hash.payload.hex()}"
                )
            elif iou.amount < latest:
                verdict[id(pending)] = StaleIou(
                    f"IOU of {iou.amount} lovelace is below the {latest} already acknowledged "
                    f"on channel {channel.hex()}"
                )
            else:
                candidates.append(pending)
        candidates.sort(key=lambda p: p.iou.amount)
        return candidates

    def _take_all(self, ious: list[SignedIou]) -> list[IouRefused | None]:
        """Each of `ious` accepted (one commit), its refusal or None."""
        if not ious:
            return []
        if len(ious) == 1:  # alone: `_take`
            try:
                self._take(ious[0])
                return [None]
            except IouRefused as refusal:
                return [refusal]
        self.commits += 1
        return self.book.accept_many(ious)

    def _take(self, iou: SignedIou) -> None:
        self.book.accept(iou)
        self.commits += 1
