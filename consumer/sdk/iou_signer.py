"""A channel's IOU signer: the renter signs cumulative IOUs (offchain/protocol/ledger/iou.py) as a
service reports usage, never more than it received, never more than the channel holds, never
below the last one, and keeps the last beside the channel's record (`consumer.sdk.channel_store`)
so a restart cannot sign less or pay twice. Its own module: a service client (an endpoint's
SDK) signs without the transaction builders, and with a plain key (`RequestKey`) without
pycardano."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from consumer.sdk.channel_store import ChannelRecord, ChannelStore
from consumer.sdk.errors import ConsumerError
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.iou import SignedIou

if TYPE_CHECKING:
    from pycardano import ScriptHash

    from consumer.sdk.keys import ConsumerKey
    from consumer.sdk.request_key import RequestKey


class IouNotSigned(ConsumerError):
    """The IOU asked for is not signed: above what was received, above the channel's funds,
    or below the last IOU."""


class IouSigner:
    """Signs a channel's cumulative IOUs as a service reports usage, one signer per channel.

    `pay(reported_total, received_total)` signs "the provider may take `reported_total`
    lovelace in all" when that is no more than `received_total` (what the renter counted as
    received, priced by the service's price), no more than the channel's funds, and not below
    the last IOU. The last IOU is stored before it is returned, so a restart neither signs
    below it nor pays twice: amounts are totals, and the same total gets the same IOU. (Appended,
    not fsynced: a power cut that loses the last write costs the renter nothing, as every IOU
    is a total bounded by what it received.) A client paying one request ahead,
    as a gateway asks, passes what it received plus that request's price: the one increment
    either side risks. Thread-safe; one process at a time per channel (two would each know
    only their own last)."""

    def __init__(
        self,
        key: ConsumerKey | RequestKey,
        network_id: int,
        channel_hash: ScriptHash | bytes,
        record: ChannelRecord,
        store: ChannelStore,
    ) -> None:
        self.key, self.network_id, self.channel_hash = key, network_id, channel_hash
        self.channel = bytes.fromhex(record.channel_id)
        self.funded = record.funded  # a top-up made in another process: make a new signer
        self.store = store
        self.lock = threading.Lock()
        wire = store.last_iou(record.channel_id)
        self.last = None if wire is None else self.checked(wire)

    def checked(self, wire: dict[str, Any]) -> SignedIou:
        """The stored last IOU, if it is this channel's and this key's; else ConsumerError."""
        path = self.store.iou_path(self.channel.hex())
        try:
            iou = SignedIou.from_wire(wire)
        except ValueError as exc:
            message = f"{path} is not an IOU ({exc}): restore it"
            raise ConsumerError(message, path=str(path)) from exc
        if iou.channel != self.channel or not self.signed_here(iou):
            raise ConsumerError(
                f"{path} holds an IOU not signed by this key for this channel: restore it",
                path=str(path),
            )  # fmt: skip
        return iou

    def signed_here(self, iou: SignedIou) -> bool:
        return iou.signed_by(self.key.vkey, self.network_id, self.channel_hash)

    @property
    def signed(self) -> int:
        """The last IOU's amount: lovelace the provider may take in all so far."""
        return 0 if self.last is None else self.last.amount

    def pay(self, reported_total: int, received_total: int) -> SignedIou:
        """The IOU for `reported_total` lovelace in all; IouNotSigned says why not."""
        with self.lock:
            facts = {"reported": reported_total, "received": received_total,
                     "funded": self.funded, "signed": self.signed}  # fmt: skip
            if reported_total > received_total:
                raise IouNotSigned(
                    f"the service reports {ada(reported_total)} used, more than the "
                    f"{ada(received_total)} you received: not signed", **facts,
                )  # fmt: skip
            if reported_total > self.funded:
                raise IouNotSigned(
                    f"{ada(reported_total)} is more than the channel holds for its provider "
                    f"({ada(self.funded)}): top it up (`unchained channel top-up "
                    f"{self.channel.hex()} --amount ADA`)", **facts,
                )  # fmt: skip
            if reported_total < self.signed:
                raise IouNotSigned(
                    f"{ada(reported_total)} is below the last IOU ({ada(self.signed)}): IOUs "
                    "are totals and never go down", **facts,
                )  # fmt: skip
            if self.last is not None and reported_total == self.last.amount:
                return self.last
            iou = SignedIou.sign(self.key.payload_signer, self.network_id, self.channel_hash,
                                 self.channel, reported_total)  # fmt: skip
            self.store.save_iou(self.channel.hex(), iou.to_wire())
            self.last = iou
            return iou
