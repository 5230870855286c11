"""Ledger objects in the JSON shapes of the Ogmios v6 schema (cardano.json), and back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pycardano import (
    Address,
    InvalidBefore,
    InvalidHereAfter,
    MultiAsset,
    NativeScript,
    PlutusV1Script,
    PlutusV2Script,
    PlutusV3Script,
    RawCBOR,
    ScriptAll,
    ScriptAny,
    ScriptNofK,
    ScriptPubkey,
    TransactionInput,
    TransactionOutput,
    Value,
)
from pycardano.hash import DatumHash

from devnet.errors import INVALID_PARAMS, LedgerError
from devnet.script_context import datum_cbor
from devnet.txdecode import DecodedTx

if TYPE_CHECKING:
    from devnet.node import Block

PLUTUS_LANGUAGE = {
    PlutusV1Script: "plutus:v1",
    PlutusV2Script: "plutus:v2",
    PlutusV3Script: "plutus:v3",
}
PLUTUS_CLASS = {language: cls for cls, language in PLUTUS_LANGUAGE.items()}


def value_json(amount: int | Value) -> dict[str, Any]:
    if isinstance(amount, int):
        return {"ada": {"lovelace": amount}}
    value: dict[str, Any] = {"ada": {"lovelace": amount.coin}}
    value.update(multi_asset_json(amount.multi_asset))
    return value


def multi_asset_json(assets: MultiAsset | None) -> dict[str, dict[str, int]]:
    return {
        policy.payload.hex(): {name.payload.hex(): qty for name, qty in tokens.items()}
        for policy, tokens in (assets or {}).items()
    }


def output_reference_json(tx_in: TransactionInput) -> dict[str, Any]:
    return {"transaction": {"id": tx_in.transaction_id.payload.hex()}, "index": tx_in.index}


def script_json(script: Any) -> dict[str, Any]:
    if isinstance(script, NativeScript):
        json_form = native_script_json(script)
        return {"language": "native", "json": json_form, "cbor": script.to_cbor_hex()}
    return {"language": PLUTUS_LANGUAGE[type(script)], "cbor": bytes(script).hex()}


def native_script_json(script: NativeScript) -> dict[str, Any]:
    if isinstance(script, ScriptPubkey):
        return {"clause": "signature", "from": script.key_hash.payload.hex()}
    if isinstance(script, ScriptAll | ScriptAny):
        clause = "all" if isinstance(script, ScriptAll) else "any"
        return {"clause": clause, "from": [native_script_json(s) for s in script.native_scripts]}
    if isinstance(script, ScriptNofK):
        return {
            "clause": "some",
            "atLeast": script.n,
            "from": [native_script_json(s) for s in script.native_scripts],
        }
    if isinstance(script, InvalidBefore):
        return {"clause": "after", "slot": script.before}
    if isinstance(script, InvalidHereAfter):
        return {"clause": "before", "slot": script.after}
    raise ValueError(f"unknown native script {script!r}")


def output_json(output: TransactionOutput) -> dict[str, Any]:
    result: dict[str, Any] = {"address": str(output.address), "value": value_json(output.amount)}
    if output.datum is not None:
        datum = output.datum
        raw = datum.cbor if isinstance(datum, RawCBOR) else datum_cbor(datum)
        result["datum"] = raw.hex()
    elif output.datum_hash is not None:
        result["datumHash"] = output.datum_hash.payload.hex()
    if output.script is not None:
        result["script"] = script_json(output.script)
    return result


def utxo_json(tx_in: TransactionInput, output: TransactionOutput) -> dict[str, Any]:
    return {**output_reference_json(tx_in), **output_json(output)}


def point_json(block: Block | None) -> dict[str, Any] | str:
    return "origin" if block is None else {"slot": block.slot, "id": block.id.hex()}


def tip_json(block: Block) -> dict[str, Any]:
    return {"slot": block.slot, "id": block.id.hex(), "height": block.height}


def transaction_json(dtx: DecodedTx) -> dict[str, Any]:
    """A transaction as chain-sync and the mempool monitor show it (with its CBOR)."""
    body = dtx.tx.transaction_body
    witnesses = dtx.tx.transaction_witness_set
    result: dict[str, Any] = {
        "id": dtx.id_hex,
        "spends": "inputs",
        "inputs": [output_reference_json(i) for i in body.inputs],
        "outputs": [output_json(o) for o in body.outputs],
        "fee": {"ada": {"lovelace": body.fee}},
        "validityInterval": {
            key: slot
            for key, slot in (("invalidBefore", body.validity_start), ("invalidAfter", body.ttl))
            if slot is not None
        },
        "signatories": [
            {"key": w.vkey.payload.hex(), "signature": w.signature.hex()}
            for w in witnesses.vkey_witnesses or []
        ],
        "cbor": dtx.cbor.hex(),
    }
    if body.reference_inputs:
        result["references"] = [output_reference_json(i) for i in body.reference_inputs]
    if body.collateral:
        result["collaterals"] = [output_reference_json(i) for i in body.collateral]
    if body.mint:
        result["mint"] = multi_asset_json(body.mint)
    if body.withdraws:
        result["withdrawals"] = {
            Address.from_primitive(bytes(addr)).encode(): {"ada": {"lovelace": qty}}
            for addr, qty in body.withdraws.items()
        }
    if body.required_signers:
        result["requiredExtraSignatories"] = [h.payload.hex() for h in body.required_signers]
    if body.script_data_hash:
        result["scriptIntegrityHash"] = body.script_data_hash.payload.hex()
    if body.network_id is not None:
        result["network"] = "testnet" if body.network_id.value == 0 else "mainnet"
    return result


def block_json(block: Block) -> dict[str, Any]:
    return {
        "type": "praos",
        "era": "conway",
        "id": block.id.hex(),
        "ancestor": block.stored.ancestor.hex() if block.stored.ancestor else "genesis",
        "height": block.height,
        "slot": block.slot,
        "size": {"bytes": block.stored.size},
        "protocol": {"version": {"major": 10, "minor": 0}},
        "issuer": {
            "verificationKey": "00" * 32,
            "vrfVerificationKey": "00" * 32,
            "operationalCertificate": {
                "count": 0,
                "kes": {"period": 0, "verificationKey": "00" * 32},
            },
            "leaderValue": {},
        },
        "transactions": [transaction_json(dtx) for dtx in block.txs],
    }


# --- parsing request parameters ----------------------------------------------------------------


def parse_output_reference(ref: Any) -> TransactionInput:
    try:
        tx_id = bytes.fromhex(ref["transaction"]["id"])
        index = ref["index"]
        if len(tx_id) != 32 or not isinstance(index, int) or index < 0:
            raise ValueError
        return TransactionInput.from_primitive([tx_id, index])
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerError(
            INVALID_PARAMS,
            "Invalid output reference: expected {'transaction': {'id': <64 hex>}, 'index': <uint>}"
            f", got {ref!r}",
        ) from exc


def parse_address(text: Any) -> Address:
    try:
        return Address.from_primitive(text)
    except Exception as exc:
        raise LedgerError(INVALID_PARAMS, f"Invalid address {text!r}: expected bech32") from exc


def parse_value(value: Mapping[str, Any]) -> int | Value:
    coin = value["ada"]["lovelace"]
    assets = {k: v for k, v in value.items() if k != "ada"}
    if not assets:
        return coin
    multi = MultiAsset.from_primitive(
        {bytes.fromhex(p): {bytes.fromhex(n): q for n, q in t.items()} for p, t in assets.items()}
    )
    return Value(coin, multi)


def parse_utxo(entries: Any) -> dict[TransactionInput, TransactionOutput]:
    """`additionalUtxo` of evaluateTransaction: Ogmios UTxO objects (null means none)."""
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise LedgerError(INVALID_PARAMS, "additionalUtxo must be a list of UTxO objects or null")
    utxo = {}
    for entry in entries:
        try:
            output = TransactionOutput(
                parse_address(entry["address"]),
                parse_value(entry["value"]),
                datum_hash=DatumHash(bytes.fromhex(entry["datumHash"]))
                if "datumHash" in entry
                else None,
                datum=RawCBOR(bytes.fromhex(entry["datum"])) if "datum" in entry else None,
                script=_parse_script(entry["script"]) if "script" in entry else None,
            )
        except LedgerError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerError(INVALID_PARAMS, f"Invalid UTxO in additionalUtxo: {exc}") from exc
        utxo[parse_output_reference(entry)] = output
    return utxo


def _parse_script(script: Mapping[str, Any]) -> Any:
    cbor = bytes.fromhex(script["cbor"])
    if script["language"] == "native":
        return NativeScript.from_cbor(cbor)
    return PLUTUS_CLASS[script["language"]](cbor)
