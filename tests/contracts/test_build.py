"""The committed artifacts (escrow, bond, channel and the settle and claim references from
OpShin, the deployed settle and claim from pluthon) are what the pinned compilers make, and
contracts.artifacts applies parameters to them (without a compiler) exactly as opshin does."""

from __future__ import annotations

import json
import tomllib
from importlib import metadata
from pathlib import Path

import pluthon
import pytest
import uplc
import uplc.ast
from opshin import builder
from pycardano import PlutusV3Script, plutus_script_hash

from contracts import artifacts
from contracts.artifacts import (
    BLUEPRINT_FILE,
    BUILD_DIR,
    HASH_FILE,
    SCRIPT_FILE,
    bond_script,
    channel_script,
    claim_script,
    escrow_script,
    settle_script,
)
from contracts.scripts import CONTRACTS, build_artifacts

ROOT = Path(__file__).resolve().parents[2]


def committed(name: str) -> PlutusV3Script:
    return PlutusV3Script(bytes.fromhex((BUILD_DIR / name / SCRIPT_FILE).read_text()))


def apply_parameters(name: str, *parameters: int | bytes) -> PlutusV3Script:
    """What opshin's apply_parameters makes of the committed script, its Plutus Core version
    kept (opshin writes 1.0.0; the pluthon settle is 1.1.0, as pluthon compiles it)."""
    program = uplc.unflatten(committed(name))
    term = builder._apply_parameters(program, *parameters).term
    return builder._build(uplc.ast.Program(program.version, term))


@pytest.mark.slow  # the OpShin compiler, five validators, and pluthon's two: minutes
@pytest.mark.timeout(900)  # about four on a loaded machine, past the suite's 300 s default
def test_the_installed_toolchain_is_the_locked_one():
    """The compilers that made the committed scripts are the ones installed (a rebuild with
    another version would not prove the deployed hashes come from this source)."""
    lock = ROOT / "contracts" / "toolchain.txt"
    locked = dict(
        line.split("==") for line in lock.read_text().splitlines() if line and line[0] != "#"
    )
    assert set(locked) == {"opshin", "pluthon", "uplc"}
    assert {name: metadata.version(name) for name in locked} == locked
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {f"{n}=={v}" for n, v in locked.items()} & set(pinned) == {
        f"opshin=={locked['opshin']}",
        f"uplc=={locked['uplc']}",
    }


def test_a_rebuild_equals_the_committed_artifacts():
    assert build_artifacts(check=True) == []


@pytest.mark.parametrize("name", CONTRACTS)
def test_the_committed_hash_is_the_committed_script_hash(name):
    script_hash = (BUILD_DIR / name / HASH_FILE).read_text().strip()
    assert script_hash == plutus_script_hash(committed(name)).payload.hex()


@pytest.mark.parametrize("name", CONTRACTS)
def test_the_blueprint_has_datum_redeemer_and_parameter_schemas(name):
    blueprint = json.loads((BUILD_DIR / name / BLUEPRINT_FILE).read_text())
    contract = CONTRACTS[name]
    assert blueprint["preamble"]["plutusVersion"] == "v3"
    version = pluthon.__version__ if contract.compiler == "pluthon" else "0.28.0"
    assert blueprint["preamble"]["compiler"] == {"name": contract.compiler, "version": version}
    titles = [v["title"] for v in blueprint["validators"]]
    assert titles == [f"{name}.{purpose}" for purpose, _ in contract.redeemers]
    for validator in blueprint["validators"]:
        assert validator["compiledCode"] == committed(name).hex()
        assert [p["title"] for p in validator["parameters"]] == [
            title for title, _ in contract.parameters
        ]
        redeemer = validator["redeemer"]["schema"]
        assert "anyOf" in redeemer or redeemer["dataType"] == "constructor"
    if contract.datum is None:  # the settle and claim scripts withdraw: no datum
        assert "datum" not in blueprint["validators"][0]
        return
    datum = blueprint["validators"][0]["datum"]["schema"]
    assert datum["title"] == contract.datum.__name__
    assert [f["title"] for f in datum["fields"]] == list(contract.datum.__annotations__)


def test_escrow_spend_and_settle_withdraw_redeemers_are_in_the_blueprints():
    blueprint = json.loads((BUILD_DIR / "escrow" / BLUEPRINT_FILE).read_text())
    [spend] = blueprint["validators"]
    variants = spend["redeemer"]["schema"]["anyOf"]
    assert [(v["title"], v["index"], len(v["fields"])) for v in variants] == [
        ("Settle", 0, 0),
        ("Refund", 1, 2),
        ("Cancel", 2, 2),
        ("Start", 3, 2),
    ]
    for name in ("settle", "settle_reference"):
        [withdraw] = json.loads((BUILD_DIR / name / BLUEPRINT_FILE).read_text())["validators"]
        batch = withdraw["redeemer"]["schema"]
        assert batch["title"] == "BatchSettle"
        assert [f["title"] for f in batch["fields"]] == [
            "items",
            "claims",
            "receipts",
            "first_refund",
        ]


def test_parameters_are_applied_as_opshin_applies_them():
    settle_hash = bytes(range(28))
    assert escrow_script(settle_hash, 86_400_000) == apply_parameters(
        "escrow", settle_hash, 86_400_000
    )
    assert settle_script(0) == apply_parameters("settle", 0)
    assert settle_script(0, reference=True) == apply_parameters("settle_reference", 0)
    assert claim_script(0) == apply_parameters("claim", 0)
    assert claim_script(1, reference=True) == apply_parameters("claim_reference", 1)
    assert channel_script(settle_hash) == apply_parameters("channel", settle_hash)
    escrow_hash = bytes(range(28))
    assert bond_script(0, escrow_hash, 60_000, 2_500) == apply_parameters(
        "bond", 0, escrow_hash, 60_000, 2_500
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
    assert applied == apply_parameters(name, *parameters)


def test_a_long_bytes_parameter_is_refused():
    with pytest.raises(ValueError, match="64 bytes"):
        artifacts.apply_parameters("escrow", bytes(64))


def test_each_parameter_changes_the_hash():
    settles = {
        plutus_script_hash(settle_script(*args)) for args in [(0,), (1,), (0, True), (1, True)]
    }
    assert len(settles) == 4  # per network, and the reference is another script
    settle_hash = plutus_script_hash(settle_script(0)).payload
    escrows = {
        plutus_script_hash(escrow_script(*args))
        for args in [(settle_hash, 0), (bytes(28), 0), (settle_hash, 1)]
    }
    assert len(escrows) == 3
    escrow_hash = plutus_script_hash(escrow_script(settle_hash, 0)).payload
    bonds = {
        plutus_script_hash(bond_script(*args))
        for args in [
            (0, escrow_hash, 60_000, 2_500),
            (1, escrow_hash, 60_000, 2_500),
            (0, plutus_script_hash(escrow_script(settle_hash, 1)).payload, 60_000, 2_500),
            (0, escrow_hash, 60_001, 2_500),
            (0, escrow_hash, 60_000, 2_501),
        ]
    }
    assert len(bonds) == 5
    claims = {
        plutus_script_hash(claim_script(*args)) for args in [(0,), (1,), (0, True), (1, True)]
    }
    assert len(claims) == 4
    channels = {plutus_script_hash(channel_script(h.payload)) for h in claims}
    assert len(channels) == 4


def test_escrow_parameters_are_checked():
    with pytest.raises(ValueError, match="refund_window_ms"):
        escrow_script(bytes(28), -1)
    with pytest.raises(ValueError, match="28-byte"):
        escrow_script(bytes(27), 0)


def test_channel_parameters_are_checked():
    with pytest.raises(ValueError, match="28-byte"):
        channel_script(bytes(29))


def test_bond_parameters_are_checked():
    with pytest.raises(ValueError, match="28-byte"):
        bond_script(0, b"short", 60_000, 2_500)
    with pytest.raises(ValueError, match="slash_share_bps"):
        bond_script(0, bytes(28), 60_000, 10_001)
