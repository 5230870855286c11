"""The signed payloads: fixed bytes, the devnet evaluator's serialise_data of the same Data,
and signatures that bind the domain, network, script, escrows and contents. A receipt is a
claim on its one escrow, its note the hash of its result and evidence."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    PointerAddress,
    ScriptHash,
    TransactionId,
    TransactionInput,
    VerificationKeyHash,
)
from uplc.ast import BuiltInFun, BuiltInFunEvalMap, data_from_cbor

import devnet.phase2  # noqa: F401  (it puts the ledger's serialiseData in uplc's builtins)
from offchain.protocol.ledger.addresses import from_plutus, to_plutus
from offchain.protocol.ledger.payloads import (
    IOU_DOMAIN,
    acceptance_payload,
    claim_payload,
    iou_payload,
    receipt_note,
    receipt_payload,
    sign,
    verify,
)
from offchain.protocol.ledger.types import Iou

SETTLE_HASH = ScriptHash(bytes(range(200, 228)))
ESCROW_HASH = ScriptHash(bytes(range(28)))
BOND_HASH = ScriptHash(bytes(range(100, 128)))
ESCROW = TransactionInput(TransactionId(bytes(range(32, 64))), 3)
RESULT, EVIDENCE, JOB = b"\x11" * 32, b"\x22" * 32, b"\x33" * 32
SERIALISE_DATA = BuiltInFunEvalMap[BuiltInFun.SerialiseData]


def receipt(**changes) -> bytes:
    fields = dict(
        network_id=0, settle_hash=SETTLE_HASH, escrow=ESCROW, units=3600,
        result_hash=RESULT, evidence_hash=EVIDENCE,
    )  # fmt: skip
    return receipt_payload(**{**fields, **changes})


def test_receipt_bytes_are_fixed():
    """Changing these bytes breaks every signature in flight: it needs a new domain version.
    The note is sha256(result_hash + evidence_hash); the claims an indefinite list."""
    note = receipt_note(RESULT, EVIDENCE)
    assert note.hex() == "5189c77d29fe5d546a045ec46986852785fea5c13ac7da9c115ff5fb6edf817c"
    assert receipt().hex() == (
        "d8799f52554e434841494e45442f636c61696d2f763100581c" + SETTLE_HASH.payload.hex()
        + "5820" + note.hex() + "9fd8799f5820202122232425262728292a2b2c2d2e2f303132333435"
        "363738393a3b3c3d3e3f03ff190e10ffff"
    )  # fmt: skip


def test_a_claim_lists_its_escrows_in_descending_ledger_order():
    """As the settle script builds it: each escrow's out-ref before its units, prepended as
    the walk meets them in ledger order (transaction id, then index)."""
    first = TransactionInput(TransactionId(bytes(32)), 7)
    later = TransactionInput(ESCROW.transaction_id, 0)
    claims = [(later, 5), (ESCROW, 0), (first, 9)]
    assert claim_payload(0, SETTLE_HASH, b"", claims) == claim_payload(
        0, SETTLE_HASH, b"", [claims[2], claims[0], claims[1]]
    )
    payload = claim_payload(0, SETTLE_HASH, b"", claims).hex()
    listed = [payload.index(ref.transaction_id.payload.hex()) for ref in (ESCROW, later, first)]
    assert listed == sorted(listed) and payload.index("03ff00") < payload.index("00ff05")


def test_acceptance_bytes_are_fixed():
    assert acceptance_payload(0, ESCROW_HASH, ESCROW, JOB, BOND_HASH).hex() == (
        "d87a9f53554e434841494e45442f6163636570742f763100581c000102030405060708090a0b0c0d0e0f"
        "101112131415161718191a1bd8799f5820202122232425262728292a2b2c2d2e2f303132333435363738"
        "393a3b3c3d3e3f03ff5820" + "33" * 32 + "581c" + bytes(range(100, 128)).hex() + "ff"
    )


@given(st.integers(0, 2**64), st.binary(min_size=32, max_size=32), st.integers(0, 1))
def test_payloads_are_what_serialise_data_makes_of_them(units, digest, network):
    """The devnet's evaluator's serialiseData (the ledger's encoding: uplc's own writes
    definite-length lists) re-encodes the Data to the same bytes."""
    many = [(ESCROW, units), (TransactionInput(TransactionId(digest), 1), 0)]
    for payload in (
        receipt(units=units, result_hash=digest, network_id=network),
        claim_payload(network, SETTLE_HASH, digest, many),
        acceptance_payload(network, ESCROW_HASH, ESCROW, digest, BOND_HASH),
        iou_payload(network, SETTLE_HASH, digest[:28], units % 2**64),
    ):
        assert SERIALISE_DATA(data_from_cbor(payload)).value == payload


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.binary(min_size=28, max_size=28))
def test_the_iou_written_by_hand_is_the_iou_data(amount, network, channel):
    """iou_payload writes its CBOR directly, for speed: byte for byte pycardano's Iou."""
    expected = Iou(IOU_DOMAIN, network, SETTLE_HASH.payload, channel, amount).to_cbor()
    assert iou_payload(network, SETTLE_HASH, channel, amount) == expected


def test_an_iou_past_64_bits_is_refused():
    with pytest.raises(ValueError, match="64-bit"):
        iou_payload(0, SETTLE_HASH, bytes(28), 2**64)


def test_a_signature_is_bound_to_every_field():
    key = PaymentSigningKey.generate()
    vkey = key.to_verification_key().payload
    signature = sign(key, receipt())
    assert verify(vkey, receipt(), signature)
    other_escrow = TransactionInput(ESCROW.transaction_id, 4)
    for changed in (
        receipt(network_id=1),
        receipt(settle_hash=ScriptHash(bytes(28))),
        receipt(settle_hash=ESCROW_HASH),
        receipt(escrow=other_escrow),
        receipt(units=3601),
        receipt(result_hash=EVIDENCE),
        receipt(evidence_hash=RESULT),
        acceptance_payload(0, ESCROW_HASH, ESCROW, JOB, BOND_HASH),
    ):
        assert not verify(vkey, changed, signature)
    accepted = sign(key, acceptance_payload(0, ESCROW_HASH, ESCROW, JOB, BOND_HASH))
    other_bond = acceptance_payload(0, ESCROW_HASH, ESCROW, JOB, ScriptHash(bytes(28)))
    assert not verify(vkey, other_bond, accepted)
    other = PaymentSigningKey.generate().to_verification_key().payload
    assert not verify(other, receipt(), signature)
    assert not verify(key.to_verification_key().hash().payload, receipt(), signature)
    assert not verify(vkey, receipt(), signature[:63])


hashes = st.binary(min_size=28, max_size=28)
parts = st.one_of(hashes.map(VerificationKeyHash), hashes.map(ScriptHash))
stakes = st.one_of(
    st.none(),
    parts,
    st.builds(PointerAddress, st.integers(0, 2**32), st.integers(0, 2**16), st.integers(0, 9)),
)


@given(parts, stakes, st.sampled_from([Network.TESTNET, Network.MAINNET]))
def test_addresses_convert_both_ways_without_losing_the_stake_part(payment, stake, network):
    address = Address(payment, stake, network=network)
    assert from_plutus(to_plutus(address), network) == address
