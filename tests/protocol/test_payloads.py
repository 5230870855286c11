"""The signed payloads: fixed bytes, the devnet evaluator's serialise_data of the same Data,
and signatures that bind the domain, network, script, escrow and contents."""

from __future__ import annotations

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
from uplc.ast import data_from_cbor, plutus_cbor_dumps

from offchain.protocol.addresses import from_plutus, to_plutus
from offchain.protocol.payloads import acceptance_payload, receipt_payload, sign, verify

ESCROW_HASH = ScriptHash(bytes(range(28)))
BOND_HASH = ScriptHash(bytes(range(100, 128)))
ESCROW = TransactionInput(TransactionId(bytes(range(32, 64))), 3)
RESULT, EVIDENCE, JOB = b"\x11" * 32, b"\x22" * 32, b"\x33" * 32


def receipt(**changes) -> bytes:
    fields = dict(
        network_id=0, escrow_hash=ESCROW_HASH, escrow=ESCROW, units=3600,
        result_hash=RESULT, evidence_hash=EVIDENCE,
    )  # fmt: skip
    return receipt_payload(**{**fields, **changes})


def test_receipt_bytes_are_fixed():
    """Changing these bytes breaks every signature in flight: it needs a new domain version."""
    assert receipt().hex() == (
        "d8799f54554e434841494e45442f726563656970742f763100581c000102030405060708090a0b0c0d0e0f"
        "101112131415161718191a1bd8799f5820202122232425262728292a2b2c2d2e2f303132333435363738"
        "393a3b3c3d3e3f03ff190e105820" + "11" * 32 + "5820" + "22" * 32 + "ff"
    )


def test_acceptance_bytes_are_fixed():
    assert acceptance_payload(0, ESCROW_HASH, ESCROW, JOB, BOND_HASH).hex() == (
        "d87a9f53554e434841494e45442f6163636570742f763100581c000102030405060708090a0b0c0d0e0f"
        "101112131415161718191a1bd8799f5820202122232425262728292a2b2c2d2e2f303132333435363738"
        "393a3b3c3d3e3f03ff5820" + "33" * 32 + "581c" + bytes(range(100, 128)).hex() + "ff"
    )


# uplc (the devnet's evaluator) encodes 2**64 - 1 as a bignum where the ledger does not; no
# receipt comes near it (units <= max_units), so the property stays below 2**63.
@given(st.integers(0, 2**63), st.binary(min_size=32, max_size=32), st.integers(0, 1))
def test_payloads_are_what_serialise_data_makes_of_them(units, digest, network):
    """The devnet's evaluator (uplc) re-encodes the Data to the same bytes."""
    for payload in (
        receipt(units=units, result_hash=digest, network_id=network),
        acceptance_payload(network, ESCROW_HASH, ESCROW, digest, BOND_HASH),
    ):
        assert plutus_cbor_dumps(data_from_cbor(payload)) == payload


def test_a_signature_is_bound_to_every_field():
    key = PaymentSigningKey.generate()
    vkey = key.to_verification_key().payload
    signature = sign(key, receipt())
    assert verify(vkey, receipt(), signature)
    other_escrow = TransactionInput(ESCROW.transaction_id, 4)
    for changed in (
        receipt(network_id=1),
        receipt(escrow_hash=ScriptHash(bytes(28))),
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
