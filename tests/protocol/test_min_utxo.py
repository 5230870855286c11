"""The min-UTxO of an output with no datum and no script, priced once per address
(`txbuild.at_least_min_utxo`'s fast path), equals pycardano's rule for every kind of address;
an output with a datum still takes pycardano's rule itself."""

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

from offchain.protocol.ledger.types import TxOutRef
from offchain.protocol.tx.txbuild import at_least_min_utxo

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


def test_a_datum_takes_pycardano_s_rule():
    address = ADDRESSES["script, staked by a key"]
    with_datum = TransactionOutput(address, 0, datum=TxOutRef(bytes(32), 1))
    plain = at_least_min_utxo(context(4310), TransactionOutput(address, 0), 0)  # type: ignore[arg-type]
    found = at_least_min_utxo(context(4310), with_datum, 0)  # type: ignore[arg-type]
    assert found == pycardano_min(with_datum, 4310) > plain
