"""The chain index the explorer reads: every block's header, and the transactions that touch
the market's scripts (an output at the escrow, bond or channel script, or a spend of one) with
all their inputs, outputs, datums and redeemers decoded once, when the block arrives (by the
protocol's `tx_reader`), and stored as the JSON every page reads back.

A batch settle's payouts carry no tag and are merged (one output per claim, one per run of a
consumer's escrows), so what it gave each party of each escrow is read from the units its
redeemer names and the escrow's datum (`settled_view`), not from its outputs.

Each escrow or bond ending a transaction records (`reputation`) counts for its provider.

The chain follower calls `index_block` inside the database transaction that applies a block,
and `roll_back` inside the one that undoes blocks, so the index never disagrees with the job
states it explains. Nothing here talks to the chain: a page reads one row, not Ogmios.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from pycardano import (
    Address,
    Network,
    PlutusData,
    RedeemerTag,
    Transaction,
    TransactionInput,
    TransactionOutput,
)
from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from offchain.chain.utxo import format_out_ref, ogmios_out_ref, out_ref_of, parse_out_ref
from offchain.market.models import ChainBlock, ChainTx, ChainTxOut
from offchain.market.services import reputation
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.ledger.types import (
    Just,
    Nothing,
    Payout,
    PayoutKind,
    PlutusAddress,
    TxOutRef,
)
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.tx_reader import Script, ScriptHashes, TxReader, datum_as, inline_datum

PURPOSES = {
    RedeemerTag.SPEND: "spend", RedeemerTag.MINT: "mint", RedeemerTag.CERTIFICATE: "publish",
    RedeemerTag.WITHDRAWAL: "withdraw", RedeemerTag.VOTING: "vote",
    RedeemerTag.PROPOSING: "propose",
}  # fmt: skip


def spent_refs(block: dict[str, Any]) -> list[str]:
    """Every output an Ogmios v6 block spends, as the tables' out-ref columns write it."""
    return [format_out_ref(ogmios_out_ref(i)) for tx in block["transactions"] for i in tx["inputs"]]


def index_block(session: Session, deployment: Deployment, block: dict[str, Any]) -> None:
    """Record `block` (an Ogmios v6 block, transactions with CBOR) in the caller's transaction."""
    scripts = ScriptHashes.of(deployment)
    spent = spent_refs(block)
    known = {
        parse_out_ref(out.ref): out
        for out in session.exec(select(ChainTxOut).where(col(ChainTxOut.ref).in_(spent)))
    }
    indexed = 0
    for json_tx in block["transactions"]:
        inputs = [ogmios_out_ref(i) for i in json_tx["inputs"]]
        at_script = any(
            scripts.at(Address.from_primitive(o["address"])) for o in json_tx["outputs"]
        )
        if not at_script and not any(known[r].script for r in inputs if r in known):
            continue
        tx = Transaction.from_cbor(bytes.fromhex(json_tx["cbor"]))
        if tx.valid is False:  # phase 2 failed: only its collateral moved
            continue
        indexed += 1
        _index_tx(session, scripts, deployment.network, block, tx, known)
    session.add(ChainBlock(
        slot=block["slot"], height=block["height"], block_id=block["id"],
        tx_count=len(block["transactions"]), indexed_txs=indexed,
    ))  # fmt: skip


def _index_tx(
    session: Session,
    scripts: ScriptHashes,
    network: Network,
    block: dict[str, Any],
    tx: Transaction,
    known: dict[TransactionInput, ChainTxOut],
) -> None:
    tx_id = tx.id.payload.hex()
    read = TxReader(tx)
    for ref in read.inputs:
        if ref in known:
            known[ref].spent_by, known[ref].spent_slot = tx_id, block["slot"]
            session.add(known[ref])
    view = tx_view(read, scripts, network, known)
    spent = {format_out_ref(ref): known[ref] for ref in read.inputs if ref in known}
    reputation.record(session, reputation.endings(view, spent), tx_id, block["slot"])
    session.add(ChainTx(tx_id=tx_id, slot=block["slot"], height=block["height"],
                        view=json.dumps(view)))  # fmt: skip
    for index, output in enumerate(tx.transaction_body.outputs):
        shown = output_view(output, scripts, network)
        ref = out_ref_of(tx_id, index)
        out = ChainTxOut(
            ref=format_out_ref(ref), slot=block["slot"], address=shown["address"],
            lovelace=shown["lovelace"], script=shown["script"],
            datum=json.dumps(shown["datum"]) if shown["datum"] else None,
        )  # fmt: skip
        known[ref] = out
        session.add(out)


def tx_view(
    read: TxReader,
    scripts: ScriptHashes,
    network: Network,
    spent: dict[TransactionInput, ChainTxOut],
) -> dict[str, Any]:
    """The whole transaction: inputs (ledger order, each with its spend redeemer read as the
    script's of the output it spends, as the index knows them in `spent`), outputs,
    withdrawals with their redeemers, what a settle gave each party of each escrow, fee and
    validity interval."""
    body = read.tx.transaction_body
    input_scripts = {ref: Script(out.script) for ref, out in spent.items() if out.script}
    inputs: list[dict[str, Any]] = [
        {"ref": format_out_ref(ref), "redeemer": None} for ref in read.inputs
    ]
    withdrawals: list[dict[str, Any]] = [
        {"address": str(Address.from_primitive(key)), "lovelace": amount, "redeemer": None,
         "script": scripts.rewarding(key)}
        for key, amount in read.withdrawals
    ]  # fmt: skip
    others = []
    script: Script | None
    for redeemer in read.redeemers:
        if redeemer.purpose == RedeemerTag.SPEND and redeemer.index < len(inputs):
            target = inputs[redeemer.index]
            script = input_scripts.get(read.inputs[redeemer.index])
        elif redeemer.purpose == RedeemerTag.WITHDRAWAL and redeemer.index < len(withdrawals):
            target = withdrawals[redeemer.index]
            script = target["script"]
        else:
            others.append({"purpose": PURPOSES[redeemer.purpose], "index": redeemer.index,
                           "redeemer": _shown(None, redeemer.cbor, network)})  # fmt: skip
            continue
        target["redeemer"] = _shown(redeemer.read(script), redeemer.cbor, network)
    return {
        "inputs": inputs,
        "outputs": [output_view(output, scripts, network) for output in body.outputs],
        "withdrawals": withdrawals,
        "other_redeemers": others,
        "settled": settled_view(read, spent),
        "fee": body.fee,
        "valid_from_slot": body.validity_start,
        "valid_until_slot": body.ttl,
        "signers": [h.payload.hex() for h in body.required_signers or []],
        "valid": read.tx.valid is not False,
    }


def settled_view(read: TxReader, spent: dict[TransactionInput, ChainTxOut]) -> list[dict[str, Any]]:
    """Each escrow a batch settle spends, with the units its claim named and what each party
    got out of it: the provider price x units, the consumer the rest less the fee allowance,
    the submitter the allowance (the settle script checked the merged outputs hold them). An
    escrow whose datum the index lacks or cannot split (anyone can lock anything) is left
    out."""
    rows = []
    for ref, units in read.settled.items():
        out = spent.get(ref)
        datum = json.loads(out.datum) if out is not None and out.datum else {}
        if out is None or datum.get("type") != "EscrowDatum":
            continue
        try:
            split = settle_split(
                out.lovelace, datum["price_per_unit"], units, datum["max_units"],
                datum["fee_allowance"],
            )  # fmt: skip
        except ValueError:
            continue
        rows.append({
            "escrow": format_out_ref(ref), "units": units, "provider": datum["provider"],
            "provider_lovelace": split.provider, "consumer": datum["consumer"],
            "consumer_lovelace": split.consumer, "fee_lovelace": split.fee,
        })  # fmt: skip
    return rows


def output_view(
    output: TransactionOutput, scripts: ScriptHashes, network: Network
) -> dict[str, Any]:
    """One output: address, lovelace, the script it sits at (if ours), its datum decoded."""
    script = scripts.at(output.address)
    raw = inline_datum(output)
    datum = _shown(datum_as(raw, script), raw, network) if raw is not None else None
    if datum is None and output.datum_hash is not None:
        datum = {"type": "hash", "hash": output.datum_hash.payload.hex()}
    return {
        "address": str(output.address), "lovelace": output.lovelace, "script": script,
        "datum": datum, "tokens": bool(output.amount.multi_asset),
    }  # fmt: skip


def _shown(data: PlutusData | None, raw: bytes, network: Network) -> dict[str, Any]:
    """Protocol data as JSON (a payout's kind by name); its bytes when it is none of ours or
    cannot be shown."""
    if data is not None:
        # anyone can lock a datum naming an address or a payout kind that is none
        with contextlib.suppress(Exception):
            shown = plain(data, network)
            if isinstance(data, Payout):
                shown["kind"] = PayoutKind(data.kind).name.lower()
            return shown
    return {"type": "unknown", "cbor": raw.hex()}


def plain(value: Any, network: Network) -> Any:
    """Protocol data as JSON: addresses in bech32, out-refs as TXID#IX, bytes in hex, Maybe as
    the value or null; every constructor keeps its type's name."""
    if isinstance(value, PlutusAddress):
        return str(from_plutus(value, network))
    if isinstance(value, TxOutRef):
        return format_out_ref(value.to_input())
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


def roll_back(session: Session, slot: int) -> None:
    """Forget everything after `slot` (in the caller's transaction): the blocks, their
    transactions and outputs, and their spends of older outputs."""
    session.execute(delete(ChainTxOut).where(col(ChainTxOut.slot) > slot))
    session.execute(
        update(ChainTxOut).where(col(ChainTxOut.spent_slot) > slot)
        .values(spent_by=None, spent_slot=None)
    )  # fmt: skip
    session.execute(delete(ChainTx).where(col(ChainTx.slot) > slot))
    session.execute(delete(ChainBlock).where(col(ChainBlock.slot) > slot))
    reputation.roll_back(session, slot)
