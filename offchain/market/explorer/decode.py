"""A transaction's CBOR as the explorer shows it: outputs with their scripts named and their
datums decoded into the protocol's types (escrow, bond, payout tags), redeemers decoded by the
script they unlock. Pure functions of the bytes and the deployment's script hashes, so the
chain index can store the result once and every page read it back as JSON.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import cbor2
from pycardano import (
    Address,
    Network,
    PlutusData,
    RawPlutusData,
    RedeemerMap,
    Transaction,
    TransactionOutput,
)
from pycardano.serialization import RawCBOR

from offchain.protocol.addresses import from_plutus
from offchain.protocol.bond_check import covers_before
from offchain.protocol.deployment import Deployment
from offchain.protocol.types import (
    BatchSettle,
    BeginUnbond,
    BondDatum,
    Cancel,
    EscrowDatum,
    Just,
    Nothing,
    Payout,
    PayoutKind,
    PlutusAddress,
    Refund,
    Settle,
    Slash,
    SlashPayout,
    TopUp,
    TxOutRef,
    Withdraw,
)

# Redeemer classes per (script, purpose), indexed by constructor id.
SPEND = {"escrow": (Settle, Refund, Cancel), "bond": (TopUp, BeginUnbond, Withdraw, Slash)}
WITHDRAW = {"escrow": (BatchSettle,)}
PURPOSES = {0: "spend", 1: "mint", 2: "publish", 3: "withdraw", 4: "vote", 5: "propose"}
# What a datum at a script's address is; elsewhere an inline datum may be a payout tag.
DATUMS: dict[str | None, tuple[type[PlutusData], ...]] = {
    "escrow": (EscrowDatum,),
    "bond": (BondDatum,),
    None: (SlashPayout, Payout),
}


@dataclasses.dataclass(frozen=True)
class Scripts:
    """The deployment as the explorer names it: which payment credentials are ours, and the
    bond terms that say which jobs a bond covers."""

    network_id: int
    escrow_hash: bytes
    bond_hash: bytes
    notice_ms: int
    refund_window_ms: int

    @classmethod
    def of(cls, deployment: Deployment) -> Scripts:
        return cls(
            deployment.network_id, deployment.escrow_hash.payload, deployment.bond_hash.payload,
            deployment.notice_ms, deployment.refund_window_ms,
        )  # fmt: skip

    def covers_before(self, unbonding_since: int | None, now_ms: int) -> int:
        """Jobs closing before this time are covered by a bond (`bond_check.covers_before`)."""
        return covers_before(self.notice_ms, self.refund_window_ms, unbonding_since, now_ms)

    def name(self, address: Address) -> str | None:
        payment = address.payment_part
        named = {self.escrow_hash: "escrow", self.bond_hash: "bond"}
        return named.get(payment.payload) if payment is not None else None

    def reward_script(self, reward_address: bytes) -> str | None:
        """The script whose stake credential a withdrawal key names (the batch settle's)."""
        staking = Address.from_primitive(reward_address).staking_part
        return "escrow" if staking is not None and staking.payload == self.escrow_hash else None


def plain(value: Any, network: Network) -> Any:
    """Protocol data as JSON: addresses in bech32, out-refs as TXID#IX, bytes in hex, Maybe as
    the value or null; every constructor keeps its type's name."""
    if isinstance(value, PlutusAddress):
        return str(from_plutus(value, network))
    if isinstance(value, TxOutRef):
        return f"{value.tx_id.hex()}#{value.index}"
    if isinstance(value, Just):
        return value.value
    if isinstance(value, Nothing):
        return None
    if isinstance(value, PlutusData):
        fields = {f.name: plain(getattr(value, f.name), network) for f in dataclasses.fields(value)}
        return {"type": type(value).__name__, **fields}
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return [plain(item, network) for item in value]
    return value


def _decode(raw: bytes, kinds: tuple[type[PlutusData], ...], network: Network) -> dict[str, Any]:
    for kind in kinds:
        try:
            decoded = plain(kind.from_cbor(raw), network)
        except Exception:  # not this type: try the next, else show the bytes
            continue
        if kind is Payout:
            decoded["kind"] = PayoutKind(decoded["kind"]).name.lower()
        return decoded
    return {"type": "unknown", "cbor": raw.hex()}


def datum_cbor(output: TransactionOutput) -> bytes | None:
    datum = output.datum
    if datum is None:
        return None
    return datum.cbor if isinstance(datum, RawCBOR) else datum.to_cbor()


def output_view(output: TransactionOutput, scripts: Scripts) -> dict[str, Any]:
    """One output: address, lovelace, the script it sits at (if ours), its datum decoded."""
    script = scripts.name(output.address)
    raw = datum_cbor(output)
    datum = _decode(raw, DATUMS[script], Network(scripts.network_id)) if raw else None
    if datum is None and output.datum_hash is not None:
        datum = {"type": "hash", "hash": output.datum_hash.payload.hex()}
    return {
        "address": str(output.address), "lovelace": output.lovelace, "script": script,
        "datum": datum, "tokens": bool(output.amount.multi_asset),
    }  # fmt: skip


def _redeemers(tx: Transaction) -> list[tuple[int, int, Any]]:
    found = tx.transaction_witness_set.redeemer or []
    if isinstance(found, RedeemerMap):
        return [(key.tag.value, key.index, value.data) for key, value in found.items()]
    return [(r.tag.value, r.index, r.data) for r in found]


def _data_cbor(data: Any) -> bytes:
    """Redeemer data as bytes: pycardano hands back Plutus data or a bare CBOR primitive."""
    return data.to_cbor() if isinstance(data, RawPlutusData | PlutusData) else cbor2.dumps(data)


def _redeemer(data: Any, kinds: tuple[type[PlutusData], ...], network: Network) -> dict[str, Any]:
    raw = _data_cbor(data)
    tag = getattr(getattr(data, "data", None), "tag", None)
    index = tag - 121 if tag is not None and 121 <= tag < 128 else None  # Constr 0..6
    chosen = kinds[index : index + 1] if index is not None and index < len(kinds) else ()
    return _decode(raw, chosen, network)


def ledger_inputs(tx: Transaction) -> list[str]:
    """Inputs as TXID#IX in ledger order (what spend redeemers index)."""
    refs = sorted(tx.transaction_body.inputs, key=lambda i: (i.transaction_id.payload, i.index))
    return [f"{i.transaction_id.payload.hex()}#{i.index}" for i in refs]


def tx_view(
    tx: Transaction, scripts: Scripts, input_scripts: dict[str, str | None]
) -> dict[str, Any]:
    """The whole transaction: inputs (ledger order, each with its spend redeemer decoded by
    the script in `input_scripts`, the inputs' own scripts as the index knows them), outputs,
    withdrawals with their redeemers, fee and validity interval."""
    network = Network(scripts.network_id)
    body = tx.transaction_body
    inputs = [{"ref": ref, "redeemer": None} for ref in ledger_inputs(tx)]
    withdrawals = [
        {"address": str(Address.from_primitive(key)), "lovelace": amount, "redeemer": None,
         "script": scripts.reward_script(key)}
        for key, amount in sorted((body.withdraws or {}).items())
    ]  # fmt: skip
    others = []
    for purpose, index, data in _redeemers(tx):
        if purpose == 0 and index < len(inputs):
            script = input_scripts.get(inputs[index]["ref"])
            inputs[index]["redeemer"] = _redeemer(data, SPEND.get(script or "", ()), network)
        elif purpose == 3 and index < len(withdrawals):
            script = withdrawals[index]["script"]
            withdrawals[index]["redeemer"] = _redeemer(
                data, WITHDRAW.get(script or "", ()), network
            )
        else:
            others.append({"purpose": PURPOSES.get(purpose, str(purpose)), "index": index,
                           "redeemer": _redeemer(data, (), network)})  # fmt: skip
    return {
        "inputs": inputs,
        "outputs": [output_view(output, scripts) for output in body.outputs],
        "withdrawals": withdrawals,
        "other_redeemers": others,
        "fee": body.fee,
        "valid_from_slot": body.validity_start,
        "valid_until_slot": body.ttl,
        "signers": [h.payload.hex() for h in body.required_signers or []],
        "valid": tx.valid is not False,
    }
