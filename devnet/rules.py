"""Phase-1 transaction rules: what the Conway ledger checks before any script runs.

Each check raises LedgerError with the Ogmios v6 code and `data` of its failure, so clients
see the answers a real node would give. Scripts, datums, redeemer pointers and the
script-integrity hash are checked in scripts.py; stake credential state in staking.py.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from pycardano import (
    MultiAsset,
    NativeScript,
    ScriptHash,
    TransactionBody,
    TransactionInput,
    TransactionOutput,
    Value,
    VerificationKeyHash,
    Voter,
    VoterType,
)
from pycardano.crypto.bech32 import encode as bech32_encode

from devnet import ogmios_json as oj
from devnet import staking
from devnet.errors import LedgerError
from devnet.params import ProtocolParameters, lovelace
from devnet.txdecode import DecodedTx, array_item_spans, map_value_spans
from devnet.view import LedgerView
from offchain.chain.utxo import format_out_ref

INVALID_SIGNATORIES = 3100
MISSING_SIGNATORIES = 3101
UNKNOWN_OUTPUT_REFERENCES = 3117
OUTSIDE_VALIDITY_INTERVAL = 3118
TRANSACTION_TOO_LARGE = 3119
VALUE_TOO_LARGE = 3120
EMPTY_INPUT_SET = 3121
FEE_TOO_SMALL = 3122
VALUE_NOT_CONSERVED = 3123
NETWORK_MISMATCH = 3124
INSUFFICIENTLY_FUNDED_OUTPUTS = 3125
INSUFFICIENT_COLLATERAL = 3128
COLLATERAL_LOCKED_BY_SCRIPT = 3129
TOO_MANY_COLLATERAL_INPUTS = 3131
MISSING_COLLATERAL_INPUTS = 3132
NON_ADA_COLLATERAL = 3133
EXECUTION_UNITS_TOO_LARGE = 3134
TOTAL_COLLATERAL_MISMATCH = 3135
CONFLICTING_INPUTS_AND_REFERENCES = 3164
UNAUTHORIZED_GOVERNANCE_ACTION = 3165
REFERENCE_SCRIPTS_TOO_LARGE = 3166
UNKNOWN_VOTERS = 3167

UTXO_ENTRY_OVERHEAD = 160  # bytes the Babbage min-UTxO rule adds to an output's size
# Protocol versions whose UTXO rule refuses an input that is also a reference input.
DISJOINT_REFERENCE_INPUTS_VERSIONS = range(9, 11)

AssetId = tuple[bytes, bytes]  # (policy id, asset name)


@dataclasses.dataclass(frozen=True)
class Balance:
    """A value in integers: lovelace and non-zero asset quantities (negative when netting)."""

    coin: int = 0
    assets: Mapping[AssetId, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, value: Value | int) -> Balance:
        if isinstance(value, int):
            return cls(value)
        return cls(value.coin, _quantities(value.multi_asset, lambda quantity: quantity))

    def __add__(self, other: Balance) -> Balance:
        assets = dict(self.assets)
        for asset, quantity in other.assets.items():
            assets[asset] = assets.get(asset, 0) + quantity
        return Balance(self.coin + other.coin, {k: q for k, q in assets.items() if q})

    def __neg__(self) -> Balance:
        return Balance(-self.coin, {asset: -quantity for asset, quantity in self.assets.items()})

    def __sub__(self, other: Balance) -> Balance:
        return self + -other

    def to_ogmios(self) -> dict[str, Any]:
        value: dict[str, Any] = lovelace(self.coin)
        for (policy, name), quantity in sorted(self.assets.items()):
            value.setdefault(policy.hex(), {})[name.hex()] = quantity
        return value


def total(balances: Iterable[Balance]) -> Balance:
    return sum(balances, Balance())


def _quantities(multi_asset: MultiAsset | None, keep: Callable[[int], int]) -> dict[AssetId, int]:
    """Asset quantities mapped through `keep` (which returns 0 to drop one)."""
    kept = {
        (policy.payload, name.payload): keep(quantity)
        for policy, assets in (multi_asset or {}).items()
        for name, quantity in assets.items()
    }
    return {asset: quantity for asset, quantity in kept.items() if quantity}


def _min_ada(output_size: int, params: ProtocolParameters) -> int:
    return (UTXO_ENTRY_OVERHEAD + output_size) * params.coins_per_utxo_byte


def verified_vkey_hashes(dtx: DecodedTx) -> frozenset[bytes]:
    """Key hashes of the vkey witnesses, after checking every signature over the tx id."""
    witnesses = dtx.tx.transaction_witness_set.vkey_witnesses or []
    invalid = [
        w.vkey.payload
        for w in witnesses
        if not _signature_valid(w.vkey.payload, w.signature, dtx.id)
    ]
    if invalid:
        keys = ", ".join(key.hex() for key in invalid)
        raise LedgerError(
            INVALID_SIGNATORIES,
            f"Invalid signatures from verification keys {keys}: each vkey witness must sign "
            f"the transaction id {dtx.id_hex} (the hash of the body as sent).",
            {"invalidSignatories": [key.hex() for key in invalid]},
        )
    return frozenset(w.vkey.hash().payload for w in witnesses)


def _signature_valid(vkey: bytes, signature: bytes, message: bytes) -> bool:
    try:
        VerifyKey(vkey).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def check_phase1(dtx: DecodedTx, view: LedgerView, *, vkey_hashes: frozenset[bytes]) -> None:
    """Raise LedgerError for the first phase-1 rule `dtx` breaks in `view`."""
    tx = _Tx(dtx, view, vkey_hashes)
    for check in _CHECKS:
        check(tx)


@dataclasses.dataclass(frozen=True)
class _Tx:
    """A transaction under check, with what several checks derive from it."""

    dtx: DecodedTx
    view: LedgerView
    vkey_hashes: frozenset[bytes]

    @property
    def body(self) -> TransactionBody:
        return self.dtx.tx.transaction_body

    @property
    def params(self) -> ProtocolParameters:
        return self.view.params

    @property
    def collateral(self) -> list[TransactionInput]:
        return list(self.body.collateral or ())

    @functools.cached_property
    def staking(self) -> staking.StakingChanges:
        return staking.staking_changes(self.body, self.params.key_deposit)

    @functools.cached_property
    def produced_outputs(self) -> list[tuple[TransactionOutput, int]]:
        """Outputs and the collateral return, each with its size as sent.

        The min-UTxO rule prices the bytes the client sent; pycardano's re-encoding can be
        smaller (a map-form output without datum comes back in the legacy array form).
        """
        body_cbor = self.dtx.body_cbor
        fields = map_value_spans(body_cbor, 0)
        spans = array_item_spans(body_cbor, fields[1][0])
        outputs = list(self.body.outputs)
        if self.body.collateral_return is not None:
            outputs.append(self.body.collateral_return)
            spans.append(fields[16])
        return [(out, end - start) for out, (start, end) in zip(outputs, spans, strict=True)]

    @property
    def ex_units(self) -> tuple[int, int]:
        return self.dtx.declared_ex_units

    @property
    def has_redeemers(self) -> bool:
        return bool(self.dtx.tx.transaction_witness_set.redeemer)

    def spent(self, inputs: Iterable[TransactionInput]) -> list[TransactionOutput]:
        return [self.view.utxo[i] for i in inputs]


# --- the checks, in the order they run ------------------------------------------------------


def _check_size(tx: _Tx) -> None:
    if tx.dtx.size > tx.params.max_tx_size:
        raise LedgerError(
            TRANSACTION_TOO_LARGE,
            f"The transaction is {tx.dtx.size} bytes; the maximum is {tx.params.max_tx_size}. "
            "Split it into smaller transactions or move scripts into reference inputs.",
            {
                "measuredTransactionSize": {"bytes": tx.dtx.size},
                "maximumTransactionSize": {"bytes": tx.params.max_tx_size},
            },
        )


def _check_inputs_present(tx: _Tx) -> None:
    if not tx.body.inputs:
        raise LedgerError(EMPTY_INPUT_SET, "The transaction spends no inputs; add at least one.")


def _check_known_inputs(tx: _Tx) -> None:
    references = [*tx.body.inputs, *tx.collateral, *(tx.body.reference_inputs or ())]
    unknown = list(dict.fromkeys(ref for ref in references if ref not in tx.view.utxo))
    if unknown:
        raise _refs_error(
            UNKNOWN_OUTPUT_REFERENCES,
            "unknownOutputReferences",
            unknown,
            "Unknown or already spent outputs: {refs}. Query the UTxO set again and rebuild "
            "the transaction (inputs, collateral and reference inputs).",
        )


def _check_disjoint_references(tx: _Tx) -> None:
    if tx.params.protocol_version[0] not in DISJOINT_REFERENCE_INPUTS_VERSIONS:
        return
    spent = set(tx.body.inputs)
    common = [ref for ref in tx.body.reference_inputs or () if ref in spent]
    if common:
        raise _refs_error(
            CONFLICTING_INPUTS_AND_REFERENCES,
            "conflictingReferences",
            common,
            "Outputs {refs} are both spent and referenced; a spent input is already visible "
            "to scripts, so drop it from the reference inputs.",
        )


def _check_validity_interval(tx: _Tx) -> None:
    start, end, slot = tx.body.validity_start, tx.body.ttl, tx.view.slot
    if (start is None or start <= slot) and (end is None or slot < end):
        return
    interval = {
        key: bound
        for key, bound in (("invalidBefore", start), ("invalidAfter", end))
        if bound is not None
    }
    raise LedgerError(
        OUTSIDE_VALIDITY_INTERVAL,
        f"The transaction would land in slot {slot}, outside its validity interval "
        f"[{_bound_text(start)}, {_bound_text(end)}); rebuild it with bounds around the "
        "current slot.",
        {"validityInterval": interval, "currentSlot": slot},
    )


def _check_network(tx: _Tx) -> None:
    network = tx.view.network_id
    wrong = [
        str(out.address) for out, _ in tx.produced_outputs if out.address.network.value != network
    ]
    if wrong:
        raise _network_error(network, "address", wrong, f"outputs pay to {', '.join(wrong)}")
    accounts = [staking.reward_account_credential(raw) for raw in tx.body.withdraws or {}]
    wrong = [
        str(staking.reward_address(credential, account_network))
        for credential, account_network in accounts
        if account_network != network
    ]
    if wrong:
        raise _network_error(
            network, "rewardAccount", wrong, f"withdrawals from {', '.join(wrong)}"
        )
    declared = tx.body.network_id
    if declared is not None and declared.value != network:
        raise _network_error(
            network, "transaction", None, f"the body declares network id {declared.value}"
        )


def _network_error(expected: int, kind: str, entities: list[str] | None, what: str) -> LedgerError:
    name = _network_name(expected)
    data: dict[str, Any] = {"expectedNetwork": name, "discriminatedType": kind}
    if entities is not None:
        data["invalidEntities"] = entities
    return LedgerError(
        NETWORK_MISMATCH,
        f"This devnet is a {name} (network id {expected}) but {what}; use network id {expected}.",
        data,
    )


def _check_outputs(tx: _Tx) -> None:
    minimums = [(out, _min_ada(size, tx.params)) for out, size in tx.produced_outputs]
    short = [(out, minimum) for out, minimum in minimums if out.amount.coin < minimum]
    if short:
        details = "; ".join(f"{out.amount.coin} < {minimum}" for out, minimum in short)
        raise LedgerError(
            INSUFFICIENTLY_FUNDED_OUTPUTS,
            f"Outputs hold less lovelace than the minimum for their size ({details}); add "
            "lovelace to them.",
            {
                "insufficientlyFundedOutputs": [
                    {"output": oj.output_json(out), "minimumRequiredValue": lovelace(minimum)}
                    for out, minimum in short
                ]
            },
        )
    large = [out for out, _ in tx.produced_outputs if _value_size(out) > tx.params.max_value_size]
    if large:
        raise LedgerError(
            VALUE_TOO_LARGE,
            f"Output values exceed {tx.params.max_value_size} serialized bytes; spread the "
            "assets over several outputs.",
            {"excessivelyLargeOutputs": [oj.output_json(out) for out in large]},
        )


def _value_size(output: TransactionOutput) -> int:
    return len(output.amount.to_cbor())


def _check_governance(tx: _Tx) -> None:
    if tx.body.voting_procedures:
        voters = list(tx.body.voting_procedures)
        raise LedgerError(
            UNKNOWN_VOTERS,
            "The devnet has no DReps, pools or committee members, so no one can vote; "
            "remove the voting procedures.",
            {"unknownVoters": [_voter_json(voter) for voter in voters]},
        )
    if tx.body.proposal_procedures:
        raise LedgerError(
            UNAUTHORIZED_GOVERNANCE_ACTION,
            "The devnet does not run governance; remove the proposal procedures.",
        )


def _check_ex_units(tx: _Tx) -> None:
    memory, steps = tx.ex_units
    if memory > tx.params.max_tx_memory or steps > tx.params.max_tx_steps:
        raise LedgerError(
            EXECUTION_UNITS_TOO_LARGE,
            f"The redeemers declare {memory} memory and {steps} cpu in total; a transaction "
            f"may use at most {tx.params.max_tx_memory} memory and {tx.params.max_tx_steps} "
            "cpu. Split the work over several transactions.",
            {
                "providedExecutionUnits": {"memory": memory, "cpu": steps},
                "maximumExecutionUnits": {
                    "memory": tx.params.max_tx_memory,
                    "cpu": tx.params.max_tx_steps,
                },
            },
        )


def _reference_scripts_size(tx: _Tx) -> int:
    """Size of the scripts in spent and referenced outputs: what the tiered fee prices."""
    outputs = tx.spent(set(tx.body.inputs) | set(tx.body.reference_inputs or ()))
    return sum(_script_size(out.script) for out in outputs if out.script is not None)


def _script_size(script: NativeScript | bytes) -> int:
    if isinstance(script, NativeScript):
        return len(script.to_cbor())
    return len(script)


def _check_reference_scripts_size(tx: _Tx) -> None:
    size, maximum = _reference_scripts_size(tx), tx.params.max_reference_scripts_size
    if size > maximum:
        raise LedgerError(
            REFERENCE_SCRIPTS_TOO_LARGE,
            f"The spent and referenced outputs carry {size} bytes of scripts; at most "
            f"{maximum} are allowed per transaction.",
            {
                "measuredReferenceScriptsSize": {"bytes": size},
                "maximumReferenceScriptsSize": {"bytes": maximum},
            },
        )


def _check_fee(tx: _Tx) -> None:
    memory, steps = tx.ex_units
    minimum = tx.params.min_fee(tx.dtx.size, memory, steps, _reference_scripts_size(tx))
    if tx.body.fee < minimum:
        raise LedgerError(
            FEE_TOO_SMALL,
            f"The fee is {tx.body.fee} lovelace but this {tx.dtx.size}-byte transaction needs "
            f"at least {minimum} (size, {memory} memory / {steps} cpu of redeemers and the "
            "reference scripts it uses). Raise the fee and rebalance the change output.",
            {"minimumRequiredFee": lovelace(minimum), "providedFee": lovelace(tx.body.fee)},
        )


def _check_collateral(tx: _Tx) -> None:
    count, maximum = len(tx.collateral), tx.params.max_collateral_inputs
    if count > maximum:
        raise LedgerError(
            TOO_MANY_COLLATERAL_INPUTS,
            f"The transaction has {count} collateral inputs; at most {maximum} are allowed.",
            {"maximumCollateralInputs": maximum, "countedCollateralInputs": count},
        )
    if tx.has_redeemers:
        for check in _COLLATERAL_CHECKS:
            check(tx)


def _check_collateral_present(tx: _Tx) -> None:
    if not tx.collateral:
        raise LedgerError(
            MISSING_COLLATERAL_INPUTS,
            "The transaction runs Plutus scripts but has no collateral inputs; add an "
            "ADA-only input locked by a key.",
        )


def _check_collateral_key_locked(tx: _Tx) -> None:
    locked = [ref for ref in tx.collateral if isinstance(_payment_part(tx, ref), ScriptHash)]
    if locked:
        raise _refs_error(
            COLLATERAL_LOCKED_BY_SCRIPT,
            "unsuitableCollateralInputs",
            locked,
            "Collateral inputs {refs} are locked by scripts; collateral must come from key "
            "addresses.",
        )


def _net_collateral(tx: _Tx) -> Balance:
    returned = tx.body.collateral_return
    provided = total(Balance.of(out.amount) for out in tx.spent(tx.collateral))
    return provided - (Balance.of(returned.amount) if returned is not None else Balance())


def _check_collateral_ada_only(tx: _Tx) -> None:
    net = _net_collateral(tx)
    if net.assets:
        raise LedgerError(
            NON_ADA_COLLATERAL,
            "The collateral inputs hold native assets that the collateral return does not "
            "give back; return them or use ADA-only collateral.",
            {"unsuitableCollateralValue": net.to_ogmios()},
        )


def _check_collateral_amount(tx: _Tx) -> None:
    provided, percentage = _net_collateral(tx).coin, tx.params.collateral_percentage
    if provided * 100 < tx.body.fee * percentage:
        required = -(-tx.body.fee * percentage // 100)
        raise LedgerError(
            INSUFFICIENT_COLLATERAL,
            f"The collateral (inputs minus collateral return) is {provided} lovelace; it must "
            f"be at least {percentage}% of the fee, {required} lovelace.",
            {
                "providedCollateral": lovelace(provided),
                "minimumRequiredCollateral": lovelace(required),
            },
        )


def _check_total_collateral(tx: _Tx) -> None:
    declared, computed = tx.body.total_collateral, _net_collateral(tx).coin
    if declared is not None and declared != computed:
        raise LedgerError(
            TOTAL_COLLATERAL_MISMATCH,
            f"The body declares a total collateral of {declared} lovelace but the collateral "
            f"inputs minus the collateral return come to {computed}.",
            {
                "declaredTotalCollateral": lovelace(declared),
                "computedTotalCollateral": lovelace(computed),
            },
        )


_COLLATERAL_CHECKS: tuple[Callable[[_Tx], None], ...] = (
    _check_collateral_present,
    _check_collateral_key_locked,
    _check_collateral_ada_only,
    _check_collateral_amount,
    _check_total_collateral,
)


def _check_staking(tx: _Tx) -> None:
    staking.check_staking(tx.staking, tx.view)


def _check_value_conserved(tx: _Tx) -> None:
    body, changes = tx.body, tx.staking
    consumed = (
        total(Balance.of(out.amount) for out in tx.spent(body.inputs))
        + Balance(changes.withdrawn + changes.refunds)
        + Balance(0, _quantities(body.mint, lambda q: max(q, 0)))
    )
    produced = (
        total(Balance.of(out.amount) for out in body.outputs)
        + Balance(body.fee + changes.deposits + (body.donation or 0))
        + Balance(0, _quantities(body.mint, lambda q: max(-q, 0)))
    )
    if consumed != produced:
        difference = consumed - produced
        raise LedgerError(
            VALUE_NOT_CONSERVED,
            "Inputs + withdrawals + refunds + minted must equal outputs + fee + deposits + "
            f"burned; consumed minus produced is {_balance_text(difference)}. Rebalance the "
            "change output.",
            {"valueConsumed": consumed.to_ogmios(), "valueProduced": produced.to_ogmios()},
        )


def _check_signatories(tx: _Tx) -> None:
    missing = sorted(_required_key_hashes(tx) - tx.vkey_hashes)
    if missing:
        hashes = ", ".join(digest.hex() for digest in missing)
        raise LedgerError(
            MISSING_SIGNATORIES,
            f"Missing signatures from key hashes {hashes} (spent or collateral inputs at "
            "their addresses, withdrawals, certificates or required signers); sign with "
            "those keys.",
            {"missingSignatories": [digest.hex() for digest in missing]},
        )


def _required_key_hashes(tx: _Tx) -> set[bytes]:
    spent = [_payment_part(tx, ref) for ref in (*tx.body.inputs, *tx.collateral)]
    needed = {part.payload for part in spent if isinstance(part, VerificationKeyHash)}
    needed |= {digest for is_script, digest in tx.staking.witness_credentials if not is_script}
    needed |= {signer.payload for signer in tx.body.required_signers or ()}
    return needed


_CHECKS: tuple[Callable[[_Tx], None], ...] = (
    _check_size,
    _check_inputs_present,
    _check_known_inputs,
    _check_disjoint_references,
    _check_validity_interval,
    _check_network,
    _check_outputs,
    _check_governance,
    _check_ex_units,
    _check_reference_scripts_size,
    _check_fee,
    _check_collateral,
    _check_staking,
    _check_value_conserved,
    _check_signatories,
)


# --- JSON and text for error reports --------------------------------------------------------


_VOTER_ROLES = {
    VoterType.COMMITTEE_HOT: "constitutionalCommittee",
    VoterType.DREP: "delegateRepresentative",
}


def _voter_json(voter: Voter) -> dict[str, Any]:
    digest = voter.credential.payload
    if voter.voter_type is VoterType.STAKING_POOL:
        return {"role": "stakePoolOperator", "id": bech32_encode("pool", digest)}
    origin = "script" if isinstance(voter.credential, ScriptHash) else "verificationKey"
    return {"role": _VOTER_ROLES[voter.voter_type], "id": digest.hex(), "from": origin}


def _payment_part(tx: _Tx, ref: TransactionInput) -> Any:
    return tx.view.utxo[ref].address.payment_part


def _refs_error(code: int, key: str, refs: list[TransactionInput], message: str) -> LedgerError:
    """A refusal naming outputs: `message` with its `{refs}` filled in, and Ogmios's list of
    them under `key`."""
    return LedgerError(
        code,
        message.format(refs=_refs_text(refs)),
        {key: [oj.output_reference_json(ref) for ref in refs]},
    )


def _refs_text(refs: list[TransactionInput]) -> str:
    return ", ".join(map(format_out_ref, refs))


def _bound_text(bound: int | None) -> str:
    return "unbounded" if bound is None else f"slot {bound}"


def _network_name(network_id: int) -> str:
    return "mainnet" if network_id == 1 else "testnet"


def _balance_text(balance: Balance) -> str:
    assets = ", ".join(
        f"{quantity} of {policy.hex()}.{name.hex()}"
        for (policy, name), quantity in balance.assets.items()
    )
    return f"{balance.coin} lovelace" + (f" and {assets}" if assets else "")
