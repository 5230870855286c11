"""The min-UTxO of an output with no datum and no script, priced once per address, and of one
with an inline datum, priced once per address and datum length (`txbuild.at_least_min_utxo`'s
fast paths, no output encoded per call), equals pycardano's rule for every kind of address and
datum; a datum's bytes given (`datum_min_utxo`, as a quote has them) price the same."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    PaymentVerificationKey,
    PlutusV3Script,
    TransactionOutput,
    min_lovelace_post_alonzo,
    plutus_script_hash,
)

from offchain.protocol.ledger.types import EscrowDatum, TxOutRef
from offchain.protocol.tx.escrow import new_escrow
from offchain.protocol.tx.txbuild import at_least_min_utxo, datum_cbor, datum_min_utxo

KEY = PaymentVerificationKey.from_signing_key(PaymentSigningKey.generate()).hash()
SCRIPT = plutus_script_hash(PlutusV3Script(b"\x01\x02\x03"))
ADDRESSES = {
    "enterprise": Address(KEY, network=Network.TESTNET),
    "base": Address(KEY, KEY, network=Network.MAINNET),
    "script, staked by a key": Address(SCRIPT, KEY, network=Network.TESTNET),
    "script, staked by a script": Address(SCRIPT, SCRIPT, network=Network.MAINNET),
}


def context(per_byte: int) -> SimpleNamespace:
    return SimpleNamespace(protocol_param=SimpleNamespace(coins_per_utxo_byte=per_byte))


def pycardano_min(output: TransactionOutput, per_byte: int) -> int:
    probe = TransactionOutput(output.address, 2**40, datum=output.datum, script=output.script)
    return min_lovelace_post_alonzo(probe, context(per_byte))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ADDRESSES)
@pytest.mark.parametrize("per_byte", [4310, 1])
def test_an_ada_only_output_costs_what_pycardano_says(kind: str, per_byte: int):
    output = TransactionOutput(ADDRESSES[kind], 0)
    expected = pycardano_min(output, per_byte)
    assert at_least_min_utxo(context(per_byte), output, 0) == expected  # type: ignore[arg-type]
    assert at_least_min_utxo(context(per_byte), output, expected + 7) == expected + 7  # type: ignore[arg-type]


def escrow(price: int, deadline: int, vkey_bytes: int = 32) -> EscrowDatum:
    consumer, provider = ADDRESSES["base"], ADDRESSES["enterprise"]
    return new_escrow(consumer, provider, bytes(vkey_bytes), price, 600, deadline, 3_600_000,
                      bytes(32), 2_000_000)  # fmt: skip


DATUMS = {
    "an output reference": TxOutRef(bytes(32), 1),
    "a cheap escrow": escrow(1, 0),
    "an escrow of large numbers": escrow(2**62, 1_800_000_000_000),
    "an escrow of another length": escrow(40_000, 1_800_000_000_000, vkey_bytes=60),
    "a bare integer": 7,
}


@pytest.mark.parametrize("kind", ADDRESSES)
@pytest.mark.parametrize("datum", DATUMS)
def test_an_inline_datum_costs_what_pycardano_says(kind: str, datum: str):
    address = ADDRESSES[kind]
    with_datum = TransactionOutput(address, 0, datum=DATUMS[datum])
    plain = at_least_min_utxo(context(4310), TransactionOutput(address, 0), 0)  # type: ignore[arg-type]
    found = at_least_min_utxo(context(4310), with_datum, 0)  # type: ignore[arg-type]
    assert found == pycardano_min(with_datum, 4310) > plain
    given = datum_min_utxo(context(4310), address, datum_cbor(DATUMS[datum]))  # type: ignore[arg-type]
    assert given == found


def test_a_datum_is_carried_as_to_cbor_encodes_it():
    datum = DATUMS["an escrow of large numbers"]
    assert isinstance(datum, EscrowDatum)
    assert datum_cbor(datum) == datum.to_cbor()
    output = TransactionOutput(ADDRESSES["base"], 5, datum=datum)
    assert datum_cbor(datum) in output.to_cbor()  # its bytes, tagged, in the output
