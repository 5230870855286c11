"""The committed artifacts are what the pinned compiler makes, and contracts.artifacts applies
parameters to them (without the compiler) exactly as opshin does."""

from __future__ import annotations

import json

import pytest
from opshin.builder import apply_parameters
from pycardano import PlutusV3Script, plutus_script_hash

from contracts import artifacts
from contracts.artifacts import (
    BLUEPRINT_FILE,
    BUILD_DIR,
    HASH_FILE,
    SCRIPT_FILE,
    bond_script,
    escrow_script,
)
from contracts.scripts import CONTRACTS, build_artifacts


def committed(name: str) -> PlutusV3Script:
    return PlutusV3Script(bytes.fromhex((BUILD_DIR / name / SCRIPT_FILE).read_text()))


@pytest.mark.slow  # the OpShin compiler, both validators: tens of seconds
def test_a_rebuild_equals_the_committed_artifacts():
    assert build_artifacts(check=True) == []


@pytest.mark.parametrize("name", CONTRACTS)
def test_the_committed_hash_is_the_committed_script_hash(name):
    script_hash = (BUILD_DIR / name / HASH_FILE).read_text().strip()
    assert script_hash == plutus_script_hash(committed(name)).payload.hex()


@pytest.mark.parametrize("name", CONTRACTS)
def test_the_blueprint_has_datum_redeemer_and_parameter_schemas(name):
    blueprint = json.loads((BUILD_DIR / name / BLUEPRINT_FILE).read_text())
    assert blueprint["preamble"]["plutusVersion"] == "v3"
    assert blueprint["preamble"]["compiler"] == {"name": "opshin", "version": "0.28.0"}
    titles = [v["title"] for v in blueprint["validators"]]
    assert titles == [f"{name}.{purpose}" for purpose, _ in CONTRACTS[name].redeemers]
    for validator in blueprint["validators"]:
        assert validator["compiledCode"] == committed(name).hex()
        assert [p["title"] for p in validator["parameters"]] == [
            title for title, _ in CONTRACTS[name].parameters
        ]
        redeemer = validator["redeemer"]["schema"]
        assert "anyOf" in redeemer or redeemer["dataType"] == "constructor"
    datum = blueprint["validators"][0]["datum"]["schema"]
    assert datum["title"] == CONTRACTS[name].datum.__name__
    assert [f["title"] for f in datum["fields"]] == list(CONTRACTS[name].datum.__annotations__)


def test_escrow_spend_redeemers_are_in_the_blueprint():
    blueprint = json.loads((BUILD_DIR / "escrow" / BLUEPRINT_FILE).read_text())
    spend, withdraw = blueprint["validators"]
    variants = spend["redeemer"]["schema"]["anyOf"]
    assert [(v["title"], v["index"]) for v in variants] == [
        ("Settle", 0),
        ("Refund", 1),
        ("Cancel", 2),
    ]
    assert withdraw["redeemer"]["schema"]["title"] == "BatchSettle"


def test_parameters_are_applied_as_opshin_applies_them():
    assert escrow_script(0, 86_400_000) == apply_parameters(committed("escrow"), 0, 86_400_000)
    escrow_hash = bytes(range(28))
    assert bond_script(0, escrow_hash, 60_000, 2_500) == apply_parameters(
        committed("bond"), 0, escrow_hash, 60_000, 2_500
    )


@pytest.mark.parametrize("name", CONTRACTS)
@pytest.mark.parametrize(
    "parameters",
    [(), (7,), (bytes(28),), (0, b"a", -(2**70)), (1, 2**70, b"", bytes(63))],
    ids=["none", "one int", "one bytes", "three", "four"],
)
def test_any_parameters_are_applied_as_opshin_applies_them(name, parameters):
    """An odd count moves the term by 4 bits: the fillers of its bytestrings move with it."""
    applied = artifacts.apply_parameters(name, *parameters)
    assert applied == apply_parameters(committed(name), *parameters)


def test_a_long_bytes_parameter_is_refused():
    with pytest.raises(ValueError, match="64 bytes"):
        artifacts.apply_parameters("escrow", bytes(64))


def test_each_parameter_changes_the_hash():
    escrows = {plutus_script_hash(escrow_script(*args)) for args in [(0, 0), (1, 0), (0, 1)]}
    assert len(escrows) == 3
    escrow_hash = plutus_script_hash(escrow_script(0, 0)).payload
    bonds = {
        plutus_script_hash(bond_script(*args))
        for args in [
            (0, escrow_hash, 60_000, 2_500),
            (1, escrow_hash, 60_000, 2_500),
            (0, plutus_script_hash(escrow_script(1, 0)).payload, 60_000, 2_500),
            (0, escrow_hash, 60_001, 2_500),
            (0, escrow_hash, 60_000, 2_501),
        ]
    }
    assert len(bonds) == 5


def test_a_negative_refund_window_is_refused():
    with pytest.raises(ValueError, match="refund_window_ms"):
        escrow_script(0, -1)


def test_bond_parameters_are_checked():
    with pytest.raises(ValueError, match="28-byte"):
        bond_script(0, b"short", 60_000, 2_500)
    with pytest.raises(ValueError, match="slash_share_bps"):
        bond_script(0, bytes(28), 60_000, 10_001)
