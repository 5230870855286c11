"""The receipt codec: what the provider writes is what the market and the consumer read back,
signature included, and JSON that is not a receipt is refused naming its field."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from pycardano import PaymentSigningKey, ScriptHash, TransactionId, TransactionInput

from offchain.core.errors import UnchainedError
from offchain.protocol.job.receipt import Receipt, ReceiptFormatError

ESCROW = TransactionInput(TransactionId(bytes(range(32))), 3)
ESCROW_HASH = ScriptHash(bytes(28))
NETWORK_ID = 0
KEY = PaymentSigningKey.generate()
VKEY = KEY.to_verification_key().payload


def signed(units: int = 120) -> Receipt:
    result, evidence = hashlib.sha256(b"result").digest(), hashlib.sha256(b"evidence").digest()
    return Receipt.sign(KEY, NETWORK_ID, ESCROW_HASH, ESCROW, units, result, evidence)


def test_a_body_reads_back_as_the_receipt_signed():
    receipt = signed()
    body = receipt.body()
    assert sorted(body) == ["evidence_hash", "result_hash", "signature", "units"]
    back = Receipt.from_body(ESCROW, body)
    assert back == receipt and back.signed_by(VKEY, NETWORK_ID, ESCROW_HASH)


def test_the_markets_prefixed_fields_read_back_too():
    receipt = signed()
    served = {"escrow": "x", **{f"receipt_{k}": v for k, v in receipt.body().items()}}
    assert Receipt.from_body(ESCROW, served, prefix="receipt_") == receipt


def test_the_signature_covers_the_escrow_and_the_units():
    receipt = signed()
    other = TransactionInput(ESCROW.transaction_id, 4)
    elsewhere = dataclasses.replace(receipt, escrow=other)
    assert not elsewhere.signed_by(VKEY, NETWORK_ID, ESCROW_HASH)
    more = Receipt.from_body(ESCROW, {**receipt.body(), "units": receipt.units + 1})
    assert not more.signed_by(VKEY, NETWORK_ID, ESCROW_HASH)
    assert not receipt.signed_by(VKEY, 1, ESCROW_HASH)  # another network


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"units": -1}, "units"),
        ({"units": True}, "units"),
        ({"units": "7"}, "units"),
        ({"result_hash": "ab"}, "result_hash"),
        ({"evidence_hash": "zz" * 32}, "evidence_hash"),
        ({"signature": None}, "signature"),
    ],
)
def test_a_bad_field_is_refused_by_name(change, named):
    with pytest.raises(ReceiptFormatError, match=f"^{named}: "):
        Receipt.from_body(ESCROW, {**signed().body(), **change})


def test_a_missing_field_or_escrow_is_refused_by_name():
    body = signed().body()
    del body["signature"]
    with pytest.raises(ReceiptFormatError, match="signature: required field is missing"):
        Receipt.from_body(ESCROW, body)
    with pytest.raises(ReceiptFormatError, match=r"^escrow: expected an output reference"):
        Receipt.from_record({**signed().body(), "escrow": "nope"})
    assert issubclass(ReceiptFormatError, UnchainedError)
