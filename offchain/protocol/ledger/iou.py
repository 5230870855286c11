"""A renter's IOU on a payment channel (PROTOCOL.md, channels): "this channel may pay its
provider `amount` lovelace in all", cumulative, signed with the renter's key. The provider
keeps the latest it acknowledged and claims it on chain; each new one must not be below it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from offchain.protocol.ledger.payloads import PayloadSigner, iou_payload, sign, verify

if TYPE_CHECKING:  # a renter signing IOUs imports no pycardano (`payloads`)
    from pycardano import ScriptHash

CHANNEL_ID_BYTES = 28  # blake2b_224 of the channel's terms
IOU_HEADER = "Unchained-Iou"  # a request's IOU: `channel hex:amount:signature hex`
# The longest header value `from_header` reads: 56 + 128 hex characters, two colons and an
# amount of at most 20 digits (a 64-bit lovelace count). Longer text is refused unread.
MAX_HEADER_CHARS = 2 * CHANNEL_ID_BYTES + 2 * 64 + 2 + 20


@dataclasses.dataclass(frozen=True)
class SignedIou:
    channel: bytes  # the channel's id: blake2b_224 of its ChannelTerms' CBOR
    amount: int  # lovelace, cumulative
    signature: bytes

    @classmethod
    def sign(
        cls,
        key: PayloadSigner,
        network_id: int,
        channel_hash: ScriptHash | bytes,
        channel: bytes,
        amount: int,
    ) -> SignedIou:
        """The IOU `key` signs for `amount` in all on `channel` of this deployment."""
        if amount < 0:
            raise ValueError("an IOU's amount is never negative")
        payload = iou_payload(network_id, channel_hash, channel, amount)
        return cls(channel, amount, sign(key, payload))

    def signed_by(self, vkey: bytes, network_id: int, channel_hash: ScriptHash | bytes) -> bool:
        """Whether `vkey` signed this IOU for this deployment's channel script."""
        payload = iou_payload(network_id, channel_hash, self.channel, self.amount)
        return verify(vkey, payload, self.signature)

    def to_wire(self) -> dict[str, str | int]:
        """The IOU as JSON: hex bytes, integer lovelace."""
        return {
            "channel": self.channel.hex(),
            "amount": self.amount,
            "signature": self.signature.hex(),
        }

    @classmethod
    def from_wire(cls, wire: object) -> SignedIou:
        """Read `to_wire`'s form back; raises ValueError naming what is wrong."""
        if not isinstance(wire, dict):
            raise ValueError("an IOU is a JSON object")
        channel, amount, signature = (wire.get(k) for k in ("channel", "amount", "signature"))
        if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
            raise ValueError("amount must be a non-negative integer (lovelace)")
        try:
            channel_bytes = bytes.fromhex(channel) if isinstance(channel, str) else b""
            signature_bytes = bytes.fromhex(signature) if isinstance(signature, str) else b""
        except ValueError as error:
            raise ValueError("channel and signature must be hex") from error
        if len(channel_bytes) != CHANNEL_ID_BYTES:
            raise ValueError(f"channel must be {CHANNEL_ID_BYTES} bytes of hex")
        if len(signature_bytes) != 64:
            raise ValueError("signature must be 64 bytes of hex")
        return cls(channel_bytes, amount, signature_bytes)

    def to_header(self) -> str:
        """The IOU as a request carries it in its `Unchained-Iou` header."""
        return f"{self.channel.hex()}:{self.amount}:{self.signature.hex()}"

    @classmethod
    def from_header(cls, text: str) -> SignedIou:
        """Read `to_header`'s form back; raises ValueError naming what is wrong."""
        if len(text) > MAX_HEADER_CHARS:
            raise ValueError(f"an {IOU_HEADER} header is at most {MAX_HEADER_CHARS} characters")
        parts = text.strip().split(":")
        if len(parts) != 3:
            raise ValueError(f"an {IOU_HEADER} header is CHANNEL_HEX:AMOUNT:SIGNATURE_HEX")
        channel, amount, signature = parts
        if not (amount.isascii() and amount.isdigit()):
            raise ValueError("amount must be a non-negative decimal integer (lovelace)")
        return cls.from_wire({"channel": channel, "amount": int(amount), "signature": signature})
