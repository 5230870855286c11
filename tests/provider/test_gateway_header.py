"""The IOU's wire form on a request (`Unchained-Iou: CHANNEL_HEX:AMOUNT:SIGNATURE_HEX`): read
back as it was written, its signature still checking; anything else refused, naming what is
wrong."""

from __future__ import annotations

import pytest

from offchain.protocol.ledger.iou import MAX_HEADER_CHARS, SignedIou
from tests.provider.test_gateway_support import CHANNEL, NETWORK, RENTER, SCRIPT, iou


@pytest.mark.parametrize("amount", [0, 1, 45_000_000_000_000_000, 2**64 - 1])
def test_a_header_reads_back_as_the_iou_it_was(amount: int) -> None:
    signed = iou(amount)
    text = signed.to_header()
    assert text == f"{CHANNEL.hex()}:{amount}:{signed.signature.hex()}"
    read = SignedIou.from_header(text)
    assert read == signed
    assert read.signed_by(RENTER.to_verification_key().payload, NETWORK, SCRIPT)
    assert len(text) <= MAX_HEADER_CHARS


SIGNATURE = "ab" * 64


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "CHANNEL_HEX:AMOUNT:SIGNATURE_HEX"),
        (f"{CHANNEL.hex()}:5", "CHANNEL_HEX:AMOUNT:SIGNATURE_HEX"),
        (f"{CHANNEL.hex()}:5:{SIGNATURE}:7", "CHANNEL_HEX:AMOUNT:SIGNATURE_HEX"),
        (f"{CHANNEL.hex()}:-5:{SIGNATURE}", "non-negative decimal"),
        (f"{CHANNEL.hex()}:+5:{SIGNATURE}", "non-negative decimal"),
        (f"{CHANNEL.hex()}:5.0:{SIGNATURE}", "non-negative decimal"),
        (f"{CHANNEL.hex()}:\u0665:{SIGNATURE}", "non-negative decimal"),  # an Arabic-Indic 5
        (f"{CHANNEL.hex()}::{SIGNATURE}", "non-negative decimal"),
        (f"{CHANNEL.hex()[:-2]}:5:{SIGNATURE}", "channel must be 28 bytes"),
        (f"{CHANNEL.hex()}:5:{SIGNATURE[:-2]}", "signature must be 64 bytes"),
        (f"{'zz' * 28}:5:{SIGNATURE}", "must be hex"),
        (f"{CHANNEL.hex()}:{'9' * 25}:{SIGNATURE}", "at most"),
    ],
)
def test_a_malformed_header_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        SignedIou.from_header(text)
