"""A deployment published as a CIP-57 blueprint (`plutus.json`): its five scripts as the chain
holds them (parameters applied), each with the datum and redeemer schemas of its committed
blueprint (`contracts/build/<name>/plutus.json`) and the parameter values it was made with. A
wallet, an explorer or an auditor reads the deployed scripts' interfaces from it, and checks
each hash against the source: `unchained contracts build --check` rebuilds the committed
scripts with the toolchain `contracts/toolchain.txt` pins, and applying these values to them
gives these hashes (tests/test_deploy.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pycardano import PlutusV3Script, plutus_script_hash

from contracts.artifacts import BLUEPRINT_FILE, BUILD_DIR, claim_script, settle_script
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import out_ref

Parameters = dict[str, int | str]


def deployment_blueprint(deployment: Deployment) -> dict[str, Any]:
    """The deployment's blueprint; ValueError when its settle or claim script is neither this
    version's hand-written one nor its OpShin reference."""
    network = deployment.network_id
    deployed: list[tuple[str, PlutusV3Script, Parameters]] = [
        ("escrow", deployment.escrow_script, {
            "settle_hash": deployment.settle_hash.payload.hex(),
            "refund_window_ms": deployment.refund_window_ms,
        }),
        ("bond", deployment.bond_script, {
            "network_id": network, "escrow_hash": deployment.escrow_hash.payload.hex(),
            "notice_ms": deployment.notice_ms, "slash_share_bps": deployment.slash_share_bps,
        }),
        (_which(deployment.settle_script, settle_script, network, "settle"),
         deployment.settle_script, {"network_id": network}),
        ("channel", deployment.channel_script, {"claim_hash": deployment.claim_hash.payload.hex()}),
        (_which(deployment.claim_script, claim_script, network, "claim"),
         deployment.claim_script, {"network_id": network}),
    ]  # fmt: skip
    validators = []
    for name, script, values in deployed:
        committed = json.loads((BUILD_DIR / name / BLUEPRINT_FILE).read_text())
        for entry in committed["validators"]:
            applied = {key: value for key, value in entry.items() if key != "parameters"}
            applied["description"] = "parameters applied: " + ", ".join(
                f"{key} = {value}" for key, value in values.items()
            )
            applied["compiledCode"] = bytes(script).hex()
            applied["hash"] = plutus_script_hash(script).payload.hex()
            validators.append(applied)
    return {
        "preamble": {
            "title": "unchained/deployment",
            "description": f"The Unchained protocol's scripts as deployed on network {network} "
            f"(escrow {out_ref(deployment.escrow_ref)}): escrow, bond, settle, channel, claim",
            "version": "1.0.0",
            "plutusVersion": "v3",
        },
        "validators": validators,
    }


def _which(
    script: PlutusV3Script, make: Callable[[int, bool], PlutusV3Script], network_id: int, name: str
) -> str:
    """Which committed artifact `script` is: `name` or its OpShin reference."""
    for reference, artifact in ((False, name), (True, f"{name}_reference")):
        if make(network_id, reference) == script:
            return artifact
    raise ValueError(f"the deployed {name} script is not this version's")
