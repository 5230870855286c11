"""Phase-1 rules about scripts (Conway UTXOW), and the script runs a transaction asks for.

`check_scripts` serves submitTransaction: it raises the ledger's first script failure with
its Ogmios code, in the ledger's order, and returns one job per redeemer with the budget the
redeemer declares. `evaluation_jobs` serves evaluateTransaction: no signatures, no integrity
hash, every job gets the transaction's maximum budget, and problems are reported per
validator (3010) as Ogmios does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import cbor2
from pycardano import (
    InvalidBefore,
    InvalidHereAfter,
    NativeScript,
    PlutusScript,
    ScriptAll,
    ScriptAny,
    ScriptNofK,
    ScriptPubkey,
    TransactionInput,
    TransactionOutput,
    script_hash,
)
from pycardano.crypto.bech32 import encode as bech32_encode
from uplc.tools import unflatten

from devnet.errors import LedgerError
from devnet.ogmios_json import output_reference_json
from devnet.params import lovelace
from devnet.phase2 import SCRIPT_EXECUTION_FAILURE, SPENDS_MISMATCH, ScriptJob
from devnet.script_context import (
    MINT,
    PROPOSE,
    PUBLISH,
    SPEND,
    VOTE,
    WITHDRAW,
    ContextError,
    Purpose,
    Redeemer,
    TxContext,
    cbor_head,
    parse_redeemers,
    set_items,
)
from devnet.txdecode import DecodedTx
from devnet.view import LedgerView

Script = NativeScript | PlutusScript

# Ogmios error codes
CANNOT_CREATE_EVALUATION_CONTEXT = 3004
MISSING_SCRIPT_FOR_REDEEMER = 3011
UNSUITABLE_OUTPUT_REFERENCE = 3013
MISSING_SCRIPTS = 3102
FAILING_NATIVE_SCRIPT = 3103
EXTRANEOUS_SCRIPTS = 3104
MISSING_REDEEMERS = 3109
EXTRANEOUS_REDEEMERS = 3110
MISSING_DATUMS = 3111
EXTRANEOUS_DATUMS = 3112
INTEGRITY_HASH_MISMATCH = 3113
ORPHAN_SCRIPT_INPUTS = 3114
MISSING_COST_MODELS = 3115
MALFORMED_SCRIPTS = 3116
UNKNOWN_OUTPUT_REFERENCES = 3117


def check_scripts(
    dtx: DecodedTx, view: LedgerView, *, vkey_hashes: frozenset[bytes]
) -> list[ScriptJob]:
    """The ledger's script rules for a submitted transaction, then its phase-2 jobs.

    `vkey_hashes` are the key hashes of the transaction's (verified) vkey witnesses: native
    scripts are judged against them and the validity interval.
    """
    ctx = TxContext(dtx, view)
    _require_known_inputs(ctx)
    scripts = _Scripts.of(ctx)
    _check_native_scripts(ctx, scripts, vkey_hashes)
    _check_script_witnesses(ctx, scripts)
    _check_datums(ctx, scripts)
    _check_redeemers(ctx, scripts)
    _check_well_formed(ctx, scripts)
    _check_cost_models(ctx, scripts)
    _check_integrity_hash(ctx, scripts)
    try:
        return [_job(ctx, scripts, r, r.memory, r.cpu) for r in ctx.redeemers]
    except ContextError as exc:
        reason = f"the ledger cannot build a script context: {exc}"
        raise LedgerError(
            SPENDS_MISMATCH, reason, {"declaredSpending": "inputs", "mismatchReason": reason}
        ) from exc


def evaluation_jobs(dtx: DecodedTx, view: LedgerView) -> list[ScriptJob]:
    """One job per redeemer, each with the maximum budget, to measure what scripts use.

    Pass additional UTxO (evaluateTransaction's `additionalUtxo`) inside `view.utxo`.
    """
    ctx = TxContext(dtx, view)
    scripts = _Scripts.of(ctx)
    failures = [
        {"validator": redeemer.pointer, "error": problem}
        for redeemer in ctx.redeemers
        if (problem := _evaluation_problem(ctx, scripts, redeemer)) is not None
    ]
    if failures:
        raise LedgerError(
            SCRIPT_EXECUTION_FAILURE, "Some scripts of the transaction cannot run.", failures
        )
    params = view.params
    try:
        return [
            _job(ctx, scripts, r, params.max_tx_memory, params.max_tx_steps) for r in ctx.redeemers
        ]
    except ContextError as exc:
        raise LedgerError(
            CANNOT_CREATE_EVALUATION_CONTEXT,
            f"Unable to create the evaluation context: {exc}",
            {"reason": str(exc)},
        ) from exc


def script_integrity_hash(
    dtx: DecodedTx, cost_models: Mapping[str, Sequence[int]], languages: Iterable[int]
) -> bytes | None:
    """The ledger's script-integrity hash: original redeemer and datum bytes + language views.

    `languages` are those of the Plutus scripts the transaction runs (1, 2, 3). None when the
    transaction has no redeemers, no datums and no such language.
    """
    languages = set(languages)
    redeemers = dtx.witness_fields.get(5)
    datums = dtx.witness_fields.get(4)
    has_datums = bool(set_items(datums))
    if not parse_redeemers(redeemers) and not has_datums and not languages:
        return None
    payload = (
        (redeemers if redeemers is not None else b"\xa0")  # Conway encodes no redeemers as {}
        + (datums if has_datums and datums is not None else b"")
        + language_views(cost_models, languages)
    )
    return hashlib.blake2b(payload, digest_size=32).digest()


def language_views(cost_models: Mapping[str, Sequence[int]], languages: Iterable[int]) -> bytes:
    """The ledger's encodeLangViews: a CBOR map sorted by key length, then key bytes.

    Plutus V1 keeps a past bug: its key and its (indefinite-length) cost list are each
    wrapped in an extra CBOR bytestring.
    """
    views = sorted((_language_view(cost_models, lang) for lang in languages), key=_short_lex)
    return cbor_head(5, len(views)) + b"".join(key + value for key, value in views)


def _language_view(cost_models: Mapping[str, Sequence[int]], language: int) -> tuple[bytes, bytes]:
    array = cost_models.get(f"plutus:v{language}")
    if language == 1:
        encoded = b"\xf6" if array is None else _indefinite_int_list(array)
        return cbor2.dumps(b"\x00"), cbor2.dumps(encoded)
    encoded = b"\xf6" if array is None else cbor2.dumps(list(array))
    return cbor2.dumps(language - 1), encoded


def _short_lex(view: tuple[bytes, bytes]) -> tuple[int, bytes]:
    return (len(view[0]), view[0])


def _indefinite_int_list(values: Sequence[int]) -> bytes:
    return b"\x9f" + b"".join(cbor2.dumps(v) for v in values) + b"\xff"


# --- Scripts the transaction provides ---------------------------------------------------------


def language(script: Script) -> int:
    """0 for a native (timelock) script, else the Plutus version."""
    return 0 if isinstance(script, NativeScript) else script.version


@dataclasses.dataclass(frozen=True)
class _Scripts:
    witness: dict[bytes, Script]  # in the witness set
    reference: dict[bytes, Script]  # carried by spent or referenced outputs

    @classmethod
    def of(cls, ctx: TxContext) -> _Scripts:
        ws = ctx.dtx.tx.transaction_witness_set
        groups = (ws.native_scripts, ws.plutus_v1_script, ws.plutus_v2_script, ws.plutus_v3_script)
        witness = {script_hash(s).payload: s for group in groups for s in group or ()}
        outputs = [ctx.view.utxo.get(ref) for ref in ctx.inputs + ctx.reference_inputs]
        reference = {
            script_hash(o.script).payload: o.script
            for o in outputs
            if o is not None and o.script is not None
        }
        return cls(witness, reference)

    @functools.cached_property
    def provided(self) -> dict[bytes, Script]:
        return {**self.reference, **self.witness}

    def plutus(self, hash_: bytes | None) -> PlutusScript | None:
        script = self.provided.get(hash_) if hash_ is not None else None
        return script if isinstance(script, PlutusScript) else None


def _used_languages(ctx: TxContext, scripts: _Scripts) -> set[int]:
    return {script.version for p in ctx.needed() if (script := scripts.plutus(p.script_hash))}


# --- Phase-1 checks, in the ledger's order ----------------------------------------------------


def _require_known_inputs(ctx: TxContext) -> None:
    unknown = ctx.unknown_inputs
    if unknown:
        raise LedgerError(
            UNKNOWN_OUTPUT_REFERENCES,
            "Unknown transaction input (missing from UTxO set).",
            {"unknownOutputReferences": [output_reference_json(ref) for ref in unknown]},
        )


def _check_native_scripts(ctx: TxContext, scripts: _Scripts, signers: frozenset[bytes]) -> None:
    start, end = ctx.field(8), ctx.field(3)
    failing = sorted(
        {
            p.script_hash
            for p in ctx.needed()
            if isinstance(script := scripts.provided.get(p.script_hash), NativeScript)
            and not _native_ok(script, signers, start, end)
        }
    )
    if failing:
        raise LedgerError(
            FAILING_NATIVE_SCRIPT,
            "Some native scripts of the transaction do not validate.",
            {"failingNativeScripts": [h.hex() for h in failing]},
        )


def _native_ok(script: NativeScript, signers: frozenset[bytes], start: Any, end: Any) -> bool:
    """Timelock evaluation: signatures, and bounds the validity interval must lie within."""
    if isinstance(script, ScriptPubkey):
        return script.key_hash.payload in signers
    if isinstance(script, ScriptAll | ScriptAny | ScriptNofK):
        results = [_native_ok(s, signers, start, end) for s in script.native_scripts]
        if isinstance(script, ScriptAll):
            return all(results)
        return any(results) if isinstance(script, ScriptAny) else sum(results) >= script.n
    if isinstance(script, InvalidBefore):
        return start is not None and script.before <= start
    if isinstance(script, InvalidHereAfter):
        return end is not None and end <= script.after
    raise TypeError(f"unknown native script {script!r}")


def _check_script_witnesses(ctx: TxContext, scripts: _Scripts) -> None:
    """A needed script comes from the witness set or a reference script, never both."""
    needed_non_refs = {p.script_hash for p in ctx.needed()} - scripts.reference.keys()
    extraneous = sorted(scripts.witness.keys() - needed_non_refs)
    if extraneous:
        raise LedgerError(
            EXTRANEOUS_SCRIPTS,
            "Extraneous (non-required) scripts found in the transaction.",
            {"extraneousScripts": [h.hex() for h in extraneous]},
        )
    missing = sorted(needed_non_refs - scripts.witness.keys())
    if missing:
        raise LedgerError(
            MISSING_SCRIPTS,
            "Some scripts the transaction needs are neither in its witnesses nor referenced.",
            {"missingScripts": [h.hex() for h in missing]},
        )


def _check_datums(ctx: TxContext, scripts: _Scripts) -> None:
    input_hashes: set[bytes] = set()
    orphans: list[TransactionInput] = []
    for purpose in ctx.purposes[SPEND]:
        script = scripts.plutus(purpose.script_hash)
        if script is None:
            continue
        output = ctx.view.utxo[purpose.target]
        if output.datum_hash is not None:
            input_hashes.add(output.datum_hash.payload)
        elif output.datum is None and script.version < 3:  # V3 makes the datum optional
            orphans.append(purpose.target)
    if orphans:
        raise LedgerError(
            ORPHAN_SCRIPT_INPUTS,
            "Inputs locked by Plutus V1/V2 scripts carry no datum and cannot be spent.",
            {"orphanScriptInputs": [output_reference_json(ref) for ref in orphans]},
        )
    missing = sorted(input_hashes - ctx.datums.keys())
    if missing:
        raise LedgerError(
            MISSING_DATUMS,
            "Some datums of spent script inputs are missing from the witnesses.",
            {"missingDatums": [h.hex() for h in missing]},
        )
    extraneous = sorted(ctx.datums.keys() - input_hashes - _supplemental_datum_hashes(ctx))
    if extraneous:
        raise LedgerError(
            EXTRANEOUS_DATUMS,
            "Some datums in the witnesses belong to no input or output.",
            {"extraneousDatums": [h.hex() for h in extraneous]},
        )


def _supplemental_datum_hashes(ctx: TxContext) -> set[bytes]:
    """Datum hashes of the new outputs (collateral return too) and of referenced outputs."""
    body = ctx.dtx.tx.transaction_body
    outputs: list[TransactionOutput] = [*body.outputs, *filter(None, [body.collateral_return])]
    outputs += [ctx.view.utxo[ref] for ref in ctx.reference_inputs]
    return {o.datum_hash.payload for o in outputs if o.datum_hash is not None}


def _check_redeemers(ctx: TxContext, scripts: _Scripts) -> None:
    """Exactly one redeemer per purpose whose provided script is a Plutus script."""
    needed = {(p.tag, p.index): p for p in ctx.needed() if scripts.plutus(p.script_hash)}
    present = {(r.tag, r.index): r for r in ctx.redeemers}
    extraneous = [present[key].pointer for key in sorted(present.keys() - needed.keys())]
    if extraneous:
        raise LedgerError(
            EXTRANEOUS_REDEEMERS,
            "Some redeemers point at nothing a Plutus script controls.",
            {"extraneousRedeemers": extraneous},
        )
    missing = [purpose_json(needed[key]) for key in sorted(needed.keys() - present.keys())]
    if missing:
        raise LedgerError(
            MISSING_REDEEMERS,
            "Some Plutus scripts of the transaction have no redeemer.",
            {"missingRedeemers": missing},
        )


def _check_well_formed(ctx: TxContext, scripts: _Scripts) -> None:
    """Plutus scripts in the witnesses and in new outputs must decode."""
    body = ctx.dtx.tx.transaction_body
    outputs = [*body.outputs, *filter(None, [body.collateral_return])]
    candidates = [*scripts.witness.values(), *(o.script for o in outputs if o.script is not None)]
    malformed = sorted(
        {
            script_hash(s).payload
            for s in candidates
            if isinstance(s, PlutusScript) and not _well_formed(bytes(s))
        }
    )
    if malformed:
        raise LedgerError(
            MALFORMED_SCRIPTS,
            "Some Plutus scripts are not well-formed flat programs.",
            {"malformedScripts": [h.hex() for h in malformed]},
        )


@functools.lru_cache(maxsize=256)
def _well_formed(script: bytes) -> bool:
    try:
        unflatten(script)
    except Exception:
        return False
    return True


def _check_cost_models(ctx: TxContext, scripts: _Scripts) -> None:
    missing = sorted(
        f"plutus:v{lang}"
        for lang in _used_languages(ctx, scripts)
        if f"plutus:v{lang}" not in ctx.view.params.cost_models
    )
    if missing:
        raise LedgerError(
            MISSING_COST_MODELS,
            "The protocol parameters have no cost model for some languages.",
            {"missingCostModels": missing},
        )


def _check_integrity_hash(ctx: TxContext, scripts: _Scripts) -> None:
    provided = ctx.field(11)
    computed = script_integrity_hash(
        ctx.dtx, ctx.view.params.cost_models, _used_languages(ctx, scripts)
    )
    if provided != computed:
        raise LedgerError(
            INTEGRITY_HASH_MISMATCH,
            "The script integrity hash does not match the redeemers, datums and cost models.",
            {
                "providedScriptIntegrity": None if provided is None else provided.hex(),
                "computedScriptIntegrity": None if computed is None else computed.hex(),
            },
        )


# --- Jobs ---------------------------------------------------------------------------------


def _job(ctx: TxContext, scripts: _Scripts, redeemer: Redeemer, memory: int, cpu: int) -> ScriptJob:
    purpose = ctx.purpose(redeemer.tag, redeemer.index)
    script = None if purpose is None else scripts.plutus(purpose.script_hash)
    if purpose is None or script is None:  # the checks before make this unreachable
        raise ContextError(f"redeemer {redeemer.pointer} has no Plutus script to run")
    return ScriptJob(
        purpose=purpose.name,
        index=redeemer.index,
        language=script.version,
        script=bytes(script),
        arguments=ctx.arguments(script.version, purpose, redeemer),
        memory=memory,
        cpu=cpu,
    )


def _evaluation_problem(
    ctx: TxContext, scripts: _Scripts, redeemer: Redeemer
) -> dict[str, Any] | None:
    """Why a redeemer's script cannot run, as an Ogmios ScriptExecutionFailure; None if it can."""
    if ctx.unknown_inputs:
        refs = [output_reference_json(ref) for ref in ctx.unknown_inputs]
        return _failure(UNKNOWN_OUTPUT_REFERENCES, "Unknown inputs.", unknownOutputReferences=refs)
    purpose = ctx.purpose(redeemer.tag, redeemer.index)
    if purpose is not None and purpose.script_hash is None and purpose.tag == SPEND:
        return _failure(
            UNSUITABLE_OUTPUT_REFERENCE,
            "The redeemer points at an input no script locks.",
            unsuitableOutputReference=output_reference_json(purpose.target),
        )
    if purpose is None or purpose.script_hash is None:
        return _failure(
            EXTRANEOUS_REDEEMERS,
            "The redeemer points at nothing a script controls.",
            extraneousRedeemers=[redeemer.pointer],
        )
    script = scripts.provided.get(purpose.script_hash)
    if script is None:
        return _failure(
            MISSING_SCRIPT_FOR_REDEEMER,
            "The script for this redeemer is not provided.",
            missingScripts=[redeemer.pointer],
        )
    if not isinstance(script, PlutusScript):
        return _failure(
            EXTRANEOUS_REDEEMERS,
            "A native script takes no redeemer.",
            extraneousRedeemers=[redeemer.pointer],
        )
    if f"plutus:v{script.version}" not in ctx.view.params.cost_models:
        return _failure(
            MISSING_COST_MODELS, "No cost model.", missingCostModels=[f"plutus:v{script.version}"]
        )
    return _missing_datum(ctx, purpose)


def _missing_datum(ctx: TxContext, purpose: Purpose) -> dict[str, Any] | None:
    if purpose.tag != SPEND:
        return None
    output = ctx.view.utxo[purpose.target]
    if output.datum_hash is None or output.datum_hash.payload in ctx.datums:
        return None
    return _failure(
        MISSING_DATUMS,
        "The datum of the spent input is missing.",
        missingDatums=[output.datum_hash.payload.hex()],
    )


def _failure(code: int, message: str, **data: Any) -> dict[str, Any]:
    return {"code": code, "message": message, "data": data}


# --- Ogmios JSON for the purposes a missing redeemer names ------------------------------------


def purpose_json(purpose: Purpose) -> dict[str, Any]:
    """The Ogmios ScriptPurpose. Proposals carry their action's type and guardrails only."""
    target = purpose.target
    if purpose.tag == SPEND:
        return {"purpose": "spend", "outputReference": output_reference_json(target)}
    if purpose.tag == MINT:
        return {"purpose": "mint", "policy": target.hex()}
    if purpose.tag == WITHDRAW:
        return {"purpose": "withdraw", "rewardAccount": _reward_account_json(target)}
    if purpose.tag == PUBLISH:
        return {"purpose": "publish", "certificate": _certificate_json(target)}
    if purpose.tag == VOTE:
        return {"purpose": "vote", "issuer": _voter_json(target)}
    assert purpose.tag == PROPOSE
    return {"purpose": "propose", "proposal": _proposal_json(target)}


def _reward_account_json(account: bytes) -> str:
    return bech32_encode("stake_test" if account[0] & 0x0F == 0 else "stake", account)


def _origin(kind: int) -> str:
    return "script" if kind % 2 else "verificationKey"


def _credential_json(cred: Any) -> dict[str, str]:
    return {"credential": cred[1].hex(), "from": _origin(cred[0])}


def _member_json(cred: Any) -> dict[str, str]:
    return {"id": cred[1].hex(), "from": _origin(cred[0])}


def _drep_json(drep: Any) -> dict[str, str]:
    if drep[0] == 2:
        return {"type": "abstain"}
    if drep[0] == 3:
        return {"type": "noConfidence"}
    return {"type": "registered", **_member_json(drep)}


def _pool_json(pool: bytes) -> dict[str, str]:
    return {"id": bech32_encode("pool", pool)}


# delegation certificate kind -> what follows the credential
_DELEGATION_FIELDS = {
    2: ("pool",),
    9: ("drep",),
    10: ("pool", "drep"),
    11: ("pool",),
    12: ("drep",),
    13: ("pool", "drep"),
}


def _certificate_json(cert: Any) -> dict[str, Any]:
    """Certificates that can need a script witness (stake, DRep and committee credentials)."""
    kind = cert[0]
    if kind in (1, 8):
        deposit = {"deposit": lovelace(cert[2])} if kind == 8 else {}
        return {"type": "stakeCredentialDeregistration", **_credential_json(cert[1]), **deposit}
    if kind == 7:
        deposit = {"deposit": lovelace(cert[2])}
        return {"type": "stakeCredentialRegistration", **_credential_json(cert[1]), **deposit}
    if kind in _DELEGATION_FIELDS:
        fields = dict(zip(_DELEGATION_FIELDS[kind], cert[2:], strict=False))
        delegation: dict[str, Any] = {"type": "stakeDelegation", **_credential_json(cert[1])}
        if "pool" in fields:
            delegation["stakePool"] = _pool_json(fields["pool"])
        if "drep" in fields:
            delegation["delegateRepresentative"] = _drep_json(fields["drep"])
        return delegation
    if kind in (14, 15):
        return _committee_json(cert)
    return _drep_certificate_json(cert)


def _committee_json(cert: Any) -> dict[str, Any]:
    if cert[0] == 14:
        return {
            "type": "constitutionalCommitteeDelegation",
            "member": _member_json(cert[1]),
            "delegate": {"status": "authorized", **_member_json(cert[2])},
        }
    return {"type": "constitutionalCommitteeRetirement", "member": _member_json(cert[1])}


def _drep_certificate_json(cert: Any) -> dict[str, Any]:
    kind, drep = cert[0], {"type": "registered", **_member_json(cert[1])}
    if kind == 16:
        return {
            "type": "delegateRepresentativeRegistration",
            "delegateRepresentative": drep,
            "deposit": lovelace(cert[2]),
        }
    if kind == 17:
        return {
            "type": "delegateRepresentativeRetirement",
            "delegateRepresentative": drep,
            "deposit": lovelace(cert[2]),
        }
    anchor = cert[2]
    metadata = None if anchor is None else {"url": anchor[0], "hash": anchor[1].hex()}
    return {
        "type": "delegateRepresentativeUpdate",
        "delegateRepresentative": drep,
        "metadata": metadata,
    }


def _voter_json(who: Any) -> dict[str, Any]:
    kind, hash_ = who
    if kind == 4:
        return {"role": "stakePoolOperator", "id": bech32_encode("pool", hash_)}
    role = "constitutionalCommittee" if kind < 2 else "delegateRepresentative"
    return {"role": role, "id": hash_.hex(), "from": _origin(kind)}


def _proposal_json(proposal: Any) -> dict[str, Any]:
    deposit, account, action, _anchor = proposal
    guardrails = {"hash": action[-1].hex()}
    if action[0] == 2:
        withdrawals = {acct[1:29].hex(): lovelace(amount) for acct, amount in action[1].items()}
        body = {"type": "treasuryWithdrawals", "withdrawals": withdrawals}
    else:
        body = {"type": "protocolParametersUpdate", "parameters": {}}
    return {
        "deposit": lovelace(deposit),
        "returnAccount": _reward_account_json(account),
        "action": {**body, "guardrails": guardrails},
    }
