"""Build the OpShin validators into the committed artifacts (`unchained contracts build`).

One code path: `build_artifacts` compiles with the pinned opshin library (the CLI would embed
its version in the script), runs `contracts.simplify` over the result, and writes
`contracts/build/<name>/`; `contracts.artifacts` loads them and applies Data parameters to the
committed unparameterised program, so every user gets the same bytes without a compiler run
(and no command but this one imports the compiler).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import typing
from pathlib import Path

import opshin
from opshin import builder
from opshin.compiler_config import DEFAULT_CONFIG, OPT_O3_CONFIG
from opshin.util import OPSHIN_LOGGER
from pycardano import PlutusV3Script, plutus_script_hash
from uplc.tools import flatten

from contracts import onchain
from contracts.artifacts import BLUEPRINT_FILE, BUILD_DIR, HASH_FILE, SCRIPT_FILE
from contracts.simplify import simplify

CONTRACTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = CONTRACTS_DIR.parent

# `opshin build -O3`, keeping the failure traces (they name the check that failed; they cost
# bytes, not execution units).
COMPILER_CONFIG = DEFAULT_CONFIG.update(OPT_O3_CONFIG).update(
    remove_trace=False, constant_folding_keep_traces=True
)


@dataclasses.dataclass(frozen=True)
class Contract:
    """What the blueprint says about one validator source file."""

    name: str
    description: str
    parameters: tuple[tuple[str, type], ...]
    datum: type | None
    redeemers: tuple[tuple[str, typing.Any], ...]  # (purpose, redeemer type)
    module: str = ""  # the source file's name (default: `name`)
    compiler: str = "opshin"  # or "pluthon": the module's `build()` makes the program

    @property
    def source(self) -> Path:
        return CONTRACTS_DIR / f"{self.module or self.name}.py"

    @property
    def directory(self) -> Path:
        return BUILD_DIR / self.name


CONTRACTS = {
    "escrow": Contract(
        name="escrow",
        description="Escrow UTxOs per job: settle (in a batch), refund, cancel (PROTOCOL.md)",
        parameters=(("settle_hash", bytes), ("refund_window_ms", int)),
        datum=onchain.EscrowDatum,
        redeemers=(("spend", onchain.EscrowRedeemer),),
    ),
    "settle": Contract(
        name="settle",
        description="Withdraw-zero that settles a batch of escrows (PROTOCOL.md)",
        parameters=(("network_id", int),),
        datum=None,
        redeemers=(("withdraw", onchain.BatchSettle),),
        module="settle_uplc",
        compiler="pluthon",
    ),
    "settle_reference": Contract(
        name="settle_reference",
        description="The batch settle's readable reference (OpShin); tests run both",
        parameters=(("network_id", int),),
        datum=None,
        redeemers=(("withdraw", onchain.BatchSettle),),
        module="settle",
    ),
    "channel": Contract(
        name="channel",
        description="A renter's payment channel to one provider: claim (in a batch), top "
        "up, close, drain, end, mutual close (PROTOCOL.md)",
        parameters=(("claim_hash", bytes),),
        datum=onchain.ChannelDatum,
        redeemers=(("spend", onchain.ChannelRedeemer),),
    ),
    "claim": Contract(
        name="claim",
        description="Withdraw-zero that claims a batch of channels by their IOUs (PROTOCOL.md)",
        parameters=(("network_id", int),),
        datum=None,
        redeemers=(("withdraw", onchain.BatchClaim),),
        module="channel_claim_uplc",
        compiler="pluthon",
    ),
    "claim_reference": Contract(
        name="claim_reference",
        description="The batch channel claim's readable reference (OpShin); tests run both",
        parameters=(("network_id", int),),
        datum=None,
        redeemers=(("withdraw", onchain.BatchClaim),),
        module="channel_claim",
    ),
    "bond": Contract(
        name="bond",
        description="A provider's bond: top up, unbond with notice, withdraw, slash",
        parameters=(
            ("network_id", int),
            ("escrow_hash", bytes),
            ("notice_ms", int),
            ("slash_share_bps", int),
        ),
        datum=onchain.BondDatum,
        redeemers=(("spend", onchain.BondRedeemer),),
    ),
}


def compile_contract(contract: Contract) -> bytes:
    """The unparameterised script (flat, CBOR-wrapped once, as PlutusV3Script holds it)."""
    if contract.compiler == "pluthon":
        module = importlib.import_module(f"contracts.{contract.module}")
        return flatten(module.build())
    if str(REPO_ROOT) not in sys.path:  # OpShin resolves `from contracts.onchain import *`
        sys.path.insert(0, str(REPO_ROOT))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))  # as the opshin CLI does
    level = OPSHIN_LOGGER.level
    # Its integrity warnings flag every comparison of ledger-built data, which is well formed.
    OPSHIN_LOGGER.setLevel("ERROR")
    try:
        program = builder._static_compile(
            contract.source.read_text(), contract_file=str(contract.source), config=COMPILER_CONFIG
        )
    finally:
        OPSHIN_LOGGER.setLevel(level)
    return flatten(simplify(program))


def blueprint(contract: Contract, script: bytes) -> dict[str, typing.Any]:
    """A CIP-57 blueprint with the datum, redeemer and parameter schemas opshin leaves out."""
    code = script.hex()
    script_hash = plutus_script_hash(PlutusV3Script(script)).payload.hex()
    parameters = [
        {"title": title, "schema": builder.to_plutus_schema(typ)}
        for title, typ in contract.parameters
    ]
    validators = []
    for purpose, redeemer in contract.redeemers:
        entry: dict[str, typing.Any] = {"title": f"{contract.name}.{purpose}"}
        if purpose == "spend" and contract.datum is not None:
            entry["datum"] = {
                "title": contract.datum.__name__,
                "schema": builder.to_plutus_schema(contract.datum),
            }
        entry["redeemer"] = {"title": "redeemer", "schema": builder.to_plutus_schema(redeemer)}
        entry["parameters"] = parameters
        entry["compiledCode"] = code
        entry["hash"] = script_hash
        validators.append(entry)
    return {
        "preamble": {
            "title": f"unchained/{contract.name}",
            "description": contract.description,
            "version": "1.0.0",
            "plutusVersion": "v3",
            "compiler": _compiler(contract),
        },
        "validators": validators,
    }


def _compiler(contract: Contract) -> dict[str, str]:
    if contract.compiler == "pluthon":
        import pluthon

        return {"name": "pluthon", "version": pluthon.__version__}
    return {"name": "opshin", "version": opshin.__version__}


def render(contract: Contract) -> dict[str, str]:
    """The artifact files of one contract, by file name."""
    script = compile_contract(contract)
    return {
        SCRIPT_FILE: script.hex() + "\n",
        HASH_FILE: plutus_script_hash(PlutusV3Script(script)).payload.hex() + "\n",
        BLUEPRINT_FILE: json.dumps(blueprint(contract, script), indent=2) + "\n",
    }


def build_artifacts(check: bool = False) -> list[Path]:
    """Rebuild every contract; returns the artifact files that differ from the committed ones.

    With `check`, nothing is written.
    """
    differing = []
    for contract in CONTRACTS.values():
        for file_name, text in render(contract).items():
            path = contract.directory / file_name
            if not path.exists() or path.read_text() != text:
                differing.append(path)
                if not check:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
    return differing
