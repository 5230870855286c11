"""Phase-1 script rules (Conway UTXOW) and the jobs they hand to phase 2.

Every rejection is checked for its Ogmios code and for an error object that validates
against the Ogmios schema (submitTransaction or evaluateTransaction); honest twins pass.
"""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from cbor2 import CBORTag
from pycardano import (
    Address,
    InvalidBefore,
    MultiAsset,
    PlutusData,
    PlutusV1Script,
    PlutusV2Script,
    PlutusV3Script,
    RawPlutusData,
    Redeemer,
    RedeemerTag,
    ScriptAll,
    ScriptPubkey,
    StakeCredential,
    StakeRegistration,
    StakeRegistrationConway,
    TransactionBody,
    TransactionBuilder,
    TransactionOutput,
    UTxO,
    Value,
    Withdrawals,
    datum_hash,
    plutus_script_hash,
)
from uplc.tools import flatten, parse

from devnet.errors import LedgerError
from devnet.phase2 import ScriptJob, run_job
from devnet.scripts import (
    check_scripts,
    evaluation_jobs,
    language_views,
    script_integrity_hash,
)
from devnet.txdecode import decode_tx
from tests.devnet.handwritten import REDEEMER_IS_42, compile_uplc
from tests.devnet.plutus_helpers import (
    DevnetChainContext,
    Wallet,
    always_succeeds,
    make_view,
    out_ref,
    redeemer,
    script_address,
    seal,
    vkey_hashes,
)
from tests.ogmios_schema import validate_error

SCRIPT = compile_uplc(REDEEMER_IS_42)
OTHER = compile_uplc(always_succeeds(9))
ALICE = Wallet.generate()
LOCKED, FUND, REFERENCE = out_ref(10), out_ref(11), out_ref(12)
DATUM = RawPlutusData(CBORTag(121, [b"owner"]))


def spend_index(ref, *others) -> int:
    refs = sorted([ref, *others], key=lambda r: (r.transaction_id.payload, r.index))
    return refs.index(ref)


def base_utxo(locked: TransactionOutput | None = None) -> dict:
    return {
        LOCKED: locked or TransactionOutput(script_address(SCRIPT), 10_000_000, datum=DATUM),
        FUND: TransactionOutput(ALICE.address, 50_000_000),
    }


def spend_body(**fields: Any) -> TransactionBody:
    return TransactionBody(
        inputs=[LOCKED, FUND],
        outputs=[TransactionOutput(ALICE.address, 59_000_000)],
        fee=1_000_000,
        collateral=[FUND],
        **fields,
    )


def spend_redeemer(data: Any = 42, **units: int) -> Redeemer:
    return redeemer(RedeemerTag.SPEND, spend_index(LOCKED, FUND), data, **units)


def submit(dtx, utxo, **view: Any):
    return check_scripts(dtx, make_view(utxo, **view), vkey_hashes=vkey_hashes(dtx))


def the_job(body: TransactionBody, script: Any, tag: RedeemerTag, data: Any) -> ScriptJob:
    """The one script job of `body` signed by ALICE, with `script` and its redeemer `data` at
    `tag` index 0, over base_utxo()."""
    dtx = seal(body, signers=[ALICE], plutus_v3_script=[script], redeemer=[redeemer(tag, 0, data)])
    [job] = submit(dtx, base_utxo())
    return job


def refused(code: int, dtx, utxo, **view: Any) -> Any:
    """The submit error's data, after checking its code and schema."""
    with pytest.raises(LedgerError) as caught:
        submit(dtx, utxo, **view)
    assert caught.value.code == code, caught.value.message
    validate_error("submitTransaction", caught.value.to_json())
    return caught.value.data


def evaluation_refused(dtx, utxo) -> list[dict]:
    with pytest.raises(LedgerError) as caught:
        evaluation_jobs(dtx, make_view(utxo))
    validate_error("evaluateTransaction", caught.value.to_json())
    assert caught.value.code == 3010
    return caught.value.data


def test_honest_spend_yields_one_job_with_the_declared_budget():
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v3_script=[SCRIPT],
        redeemer=[spend_redeemer(memory=20_000, cpu=7_000_000)],
    )
    [job] = submit(dtx, base_utxo())
    assert (job.purpose, job.index, job.language) == ("spend", spend_index(LOCKED, FUND), 3)
    assert (job.memory, job.cpu) == (20_000, 7_000_000)
    assert job.script == bytes(SCRIPT)
    outcome = run_job(job, make_view({}).params.cost_models)
    assert outcome.error is None and outcome.memory <= 20_000


def test_missing_script():
    dtx = seal(spend_body(), signers=[ALICE], redeemer=[spend_redeemer()])
    data = refused(3102, dtx, base_utxo())
    assert data == {"missingScripts": [plutus_script_hash(SCRIPT).payload.hex()]}


def test_extraneous_script():
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v3_script=[SCRIPT, OTHER],
        redeemer=[spend_redeemer()],
    )
    data = refused(3104, dtx, base_utxo())
    assert data == {"extraneousScripts": [plutus_script_hash(OTHER).payload.hex()]}


def reference_utxo() -> dict:
    return {**base_utxo(), REFERENCE: TransactionOutput(ALICE.address, 20_000_000, script=SCRIPT)}


def test_reference_script_serves_and_a_witness_copy_is_extraneous():
    body = spend_body(reference_inputs=[REFERENCE])
    dtx = seal(body, signers=[ALICE], redeemer=[spend_redeemer()])
    [job] = submit(dtx, reference_utxo())
    assert job.script == bytes(SCRIPT)

    body = spend_body(reference_inputs=[REFERENCE])
    dtx = seal(body, signers=[ALICE], plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()])
    data = refused(3104, dtx, reference_utxo())
    assert data == {"extraneousScripts": [plutus_script_hash(SCRIPT).payload.hex()]}


def hashed_utxo() -> dict:
    locked = TransactionOutput(script_address(SCRIPT), 10_000_000, datum_hash=datum_hash(DATUM))
    return base_utxo(locked)


def test_missing_datum_for_a_datum_hash_input():
    dtx = seal(
        spend_body(), signers=[ALICE], plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()]
    )
    data = refused(3111, dtx, hashed_utxo())
    assert data == {"missingDatums": [datum_hash(DATUM).payload.hex()]}
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v3_script=[SCRIPT],
        plutus_data=[DATUM],
        redeemer=[spend_redeemer()],
    )
    assert len(submit(dtx, hashed_utxo())) == 1


def test_extraneous_datum_and_allowed_supplemental_datum():
    stray = RawPlutusData(CBORTag(122, []))
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v3_script=[SCRIPT],
        plutus_data=[stray],
        redeemer=[spend_redeemer()],
    )
    data = refused(3112, dtx, base_utxo())
    assert data == {"extraneousDatums": [datum_hash(stray).payload.hex()]}
    # the same datum is fine once a new output names its hash
    body = spend_body()
    body.outputs.append(TransactionOutput(ALICE.address, 0, datum_hash=datum_hash(stray)))
    dtx = seal(
        body,
        signers=[ALICE],
        plutus_v3_script=[SCRIPT],
        plutus_data=[stray],
        redeemer=[spend_redeemer()],
    )
    assert len(submit(dtx, base_utxo())) == 1


def test_missing_redeemer_names_the_purpose():
    dtx = seal(spend_body(), signers=[ALICE], plutus_v3_script=[SCRIPT], integrity=False)
    data = refused(3109, dtx, base_utxo())
    assert data == {
        "missingRedeemers": [
            {
                "purpose": "spend",
                "outputReference": {"transaction": {"id": str(LOCKED.transaction_id)}, "index": 0},
            }
        ]
    }


def test_redeemer_pointing_at_a_key_input_is_extraneous():
    wrong = redeemer(RedeemerTag.SPEND, spend_index(FUND, LOCKED), 42)
    dtx = seal(
        spend_body(), signers=[ALICE], plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer(), wrong]
    )
    data = refused(3110, dtx, base_utxo())
    assert data == {"extraneousRedeemers": [{"purpose": "spend", "index": wrong.index}]}


def test_integrity_hash_mismatch_reports_both_hashes():
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v3_script=[SCRIPT],
        redeemer=[spend_redeemer()],
        integrity=False,
    )
    data = refused(3113, dtx, base_utxo())
    expected = script_integrity_hash(dtx, make_view({}).params.cost_models, [3])
    assert data == {"providedScriptIntegrity": None, "computedScriptIntegrity": expected.hex()}
    # a different cost model on the ledger changes the hash the transaction must carry
    params = make_view({}).params
    flat = [1] * len(params.cost_models["plutus:v3"])
    other = params.with_overrides({"cost_models": {**params.cost_models, "plutus:v3": flat}})
    dtx = seal(
        spend_body(), signers=[ALICE], plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()]
    )
    data = refused(3113, dtx, base_utxo(), params=other)
    assert data["providedScriptIntegrity"] == dtx.tx.transaction_body.script_data_hash.payload.hex()


def test_no_scripts_no_integrity_hash():
    body = TransactionBody(inputs=[FUND], outputs=[], fee=1_000_000)
    dtx = seal(body, signers=[ALICE])
    assert submit(dtx, base_utxo()) == []
    body.script_data_hash = None
    assert script_integrity_hash(dtx, {}, []) is None


def native_policy(wallet: Wallet, after: int) -> ScriptAll:
    return ScriptAll([ScriptPubkey(wallet.key_hash), InvalidBefore(after)])


def mint_body(policy, **fields: Any) -> TransactionBody:
    minted = MultiAsset.from_primitive({policy.hash().payload: {b"coin": 1}})
    return TransactionBody(
        inputs=[FUND],
        outputs=[TransactionOutput(ALICE.address, Value(49_000_000, minted))],
        fee=1_000_000,
        mint=minted,
        **fields,
    )


def test_native_script_judged_by_signatures_and_validity_interval():
    policy = native_policy(ALICE, 900)
    dtx = seal(mint_body(policy, validity_start=900), signers=[ALICE], native_scripts=[policy])
    assert submit(dtx, base_utxo()) == []
    dtx = seal(mint_body(policy, validity_start=899), signers=[ALICE], native_scripts=[policy])
    data = refused(3103, dtx, base_utxo())
    assert data == {"failingNativeScripts": [policy.hash().payload.hex()]}
    dtx = seal(mint_body(policy, validity_start=900), native_scripts=[policy])  # unsigned
    refused(3103, dtx, base_utxo())


def test_malformed_plutus_script_in_an_output():
    broken = PlutusV3Script(b"\x43\x01\x02\x03")
    body = spend_body()
    body.outputs.append(TransactionOutput(ALICE.address, 0, script=broken))
    dtx = seal(body, signers=[ALICE], plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()])
    data = refused(3116, dtx, base_utxo())
    assert data == {"malformedScripts": [plutus_script_hash(broken).payload.hex()]}


V2_SCRIPT = PlutusV2Script(flatten(parse("(program 1.0.0 (lam d (lam r (lam c (con unit ())))))")))


def test_v2_script_input_without_datum_is_an_orphan_but_v3_may_omit_it():
    locked = TransactionOutput(
        Address(plutus_script_hash(V2_SCRIPT), network=ALICE.address.network), 10_000_000
    )
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v2_script=[V2_SCRIPT],
        redeemer=[spend_redeemer()],
        integrity=False,
    )
    data = refused(3114, dtx, base_utxo(locked))
    assert data == {
        "orphanScriptInputs": [{"transaction": {"id": str(LOCKED.transaction_id)}, "index": 0}]
    }
    v3_locked = TransactionOutput(script_address(SCRIPT), 10_000_000)
    dtx = seal(
        spend_body(), signers=[ALICE], plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()]
    )
    assert len(submit(dtx, base_utxo(v3_locked))) == 1


def test_unknown_input():
    dtx = seal(
        spend_body(), signers=[ALICE], plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()]
    )
    data = refused(3117, dtx, {FUND: base_utxo()[FUND]})
    assert data == {
        "unknownOutputReferences": [{"transaction": {"id": str(LOCKED.transaction_id)}, "index": 0}]
    }


# --- staking with a script credential -----------------------------------------------------


def stake_account(script) -> bytes:
    return bytes(Address(staking_part=plutus_script_hash(script), network=ALICE.address.network))


def test_withdraw_zero_by_script_and_legacy_registration_without_witness():
    body = TransactionBody(
        inputs=[FUND],
        outputs=[TransactionOutput(ALICE.address, 47_000_000)],
        fee=1_000_000,
        collateral=[FUND],
        certificates=[StakeRegistration(StakeCredential(plutus_script_hash(SCRIPT)))],
        withdraws=Withdrawals({stake_account(SCRIPT): 0}),
    )
    job = the_job(body, SCRIPT, RedeemerTag.WITHDRAWAL, 42)
    assert (job.purpose, job.index) == ("withdraw", 0)


def test_conway_registration_by_script_needs_its_redeemer():
    body = TransactionBody(
        inputs=[FUND],
        outputs=[TransactionOutput(ALICE.address, 47_000_000)],
        fee=1_000_000,
        certificates=[
            StakeRegistrationConway(StakeCredential(plutus_script_hash(SCRIPT)), 2_000_000)
        ],
    )
    dtx = seal(body, signers=[ALICE], plutus_v3_script=[SCRIPT], integrity=False)
    data = refused(3109, dtx, base_utxo())
    assert data == {
        "missingRedeemers": [
            {
                "purpose": "publish",
                "certificate": {
                    "type": "stakeCredentialRegistration",
                    "credential": plutus_script_hash(SCRIPT).payload.hex(),
                    "from": "script",
                    "deposit": {"ada": {"lovelace": 2_000_000}},
                },
            }
        ]
    }
    job = the_job(body, SCRIPT, RedeemerTag.CERTIFICATE, 42)
    assert (job.purpose, job.index) == ("publish", 0)


def test_missing_withdraw_redeemer_names_the_reward_account():
    body = TransactionBody(
        inputs=[FUND], outputs=[], fee=1_000_000, withdraws=Withdrawals({stake_account(SCRIPT): 0})
    )
    dtx = seal(body, signers=[ALICE], plutus_v3_script=[SCRIPT], integrity=False)
    [missing] = refused(3109, dtx, base_utxo())["missingRedeemers"]
    assert missing == {
        "purpose": "withdraw",
        "rewardAccount": Address.from_primitive(stake_account(SCRIPT)).encode(),
    }


# --- evaluation ----------------------------------------------------------------------------


def test_evaluation_jobs_get_the_maximum_budget_and_ignore_signatures():
    dtx = seal(spend_body(), plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer(memory=1, cpu=1)])
    [job] = evaluation_jobs(dtx, make_view(base_utxo()))
    params = make_view({}).params
    assert (job.memory, job.cpu) == (params.max_tx_memory, params.max_tx_steps)


def test_evaluation_reports_each_unrunnable_validator():
    key_pointer = redeemer(RedeemerTag.SPEND, spend_index(FUND, LOCKED), 1)
    beyond = redeemer(RedeemerTag.MINT, 0, 1)
    dtx = seal(spend_body(), redeemer=[spend_redeemer(), key_pointer, beyond])
    failures = evaluation_refused(dtx, base_utxo())
    by_validator = {
        (f["validator"]["purpose"], f["validator"]["index"]): f["error"] for f in failures
    }
    locked_index = spend_index(LOCKED, FUND)
    assert by_validator[("spend", locked_index)]["code"] == 3011
    assert by_validator[("spend", locked_index)]["data"] == {
        "missingScripts": [{"purpose": "spend", "index": locked_index}]
    }
    assert by_validator[("spend", key_pointer.index)]["code"] == 3013
    assert by_validator[("mint", 0)]["code"] == 3110


def test_evaluation_reports_a_missing_datum():
    dtx = seal(spend_body(), plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()])
    [failure] = evaluation_refused(dtx, hashed_utxo())
    assert failure["error"]["code"] == 3111
    assert failure["error"]["data"] == {"missingDatums": [datum_hash(DATUM).payload.hex()]}


def test_evaluation_of_unknown_inputs():
    dtx = seal(spend_body(), plutus_v3_script=[SCRIPT], redeemer=[spend_redeemer()])
    [failure] = evaluation_refused(dtx, {FUND: base_utxo()[FUND]})
    assert failure["error"]["code"] == 3117


# --- the script-integrity hash against pycardano --------------------------------------------


def test_integrity_hash_equals_pycardano_for_a_builder_made_v3_transaction():
    """pycardano's TransactionBuilder (datum-hash input, witness datum, V3 script, evaluation
    through the devnet's evaluator) and the devnet agree on the integrity hash."""
    view = make_view(hashed_utxo())
    context = DevnetChainContext(view)
    builder = TransactionBuilder(context)
    builder.add_script_input(
        UTxO(LOCKED, view.utxo[LOCKED]), script=SCRIPT, datum=DATUM, redeemer=Redeemer(42)
    )
    builder.add_input_address(ALICE.address)
    tx = builder.build_and_sign([ALICE.signing_key], change_address=ALICE.address)
    dtx = decode_tx(tx.to_cbor())
    ours = script_integrity_hash(dtx, view.params.cost_models, [3])
    assert ours == tx.transaction_body.script_data_hash.payload
    [job] = check_scripts(dtx, view, vkey_hashes=vkey_hashes(dtx))
    assert run_job(job, view.params.cost_models).error is None


def test_language_views_order_v2_v3_then_double_bagged_v1():
    views = language_views({"plutus:v1": [1, 2], "plutus:v2": [3], "plutus:v3": [4]}, [1, 2, 3])
    assert views == bytes.fromhex("a30181030281044100449f0102ff")


def test_mint_policy_job_and_plutus_data_redeemer():
    policy = compile_uplc(always_succeeds(5))
    minted = MultiAsset.from_primitive({plutus_script_hash(policy).payload: {b"t": 1}})
    body = TransactionBody(
        inputs=[FUND],
        outputs=[TransactionOutput(ALICE.address, Value(49_000_000, minted))],
        fee=1_000_000,
        mint=minted,
        collateral=[FUND],
    )
    job = the_job(body, policy, RedeemerTag.MINT, PlutusData())
    assert (job.purpose, job.index) == ("mint", 0)
    assert run_job(job, make_view({}).params.cost_models).error is None


# --- Plutus V1 / V2 ------------------------------------------------------------------------

V2_REDEEMER_IS_42 = """
(program 1.0.0 (lam datum (lam redeemer (lam ctx
  (force [ (force (builtin ifThenElse))
           [ (builtin equalsInteger) (con integer 42) [ (builtin unIData) redeemer ] ]
           (delay (con integer 0))
           (delay (force [ (force (builtin trace)) (con string "v2: not 42") (delay (error)) ]))
         ])))))
"""
V2_42 = PlutusV2Script(flatten(parse(V2_REDEEMER_IS_42)))


def v2_utxo() -> dict:
    v2_address = Address(plutus_script_hash(V2_42), network=ALICE.address.network)
    return base_utxo(TransactionOutput(v2_address, 10_000_000, datum=DATUM))


def test_v2_spend_gets_datum_redeemer_and_context_and_may_return_anything():
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v2_script=[V2_42],
        redeemer=[spend_redeemer()],
        languages=[2],
    )
    [job] = submit(dtx, v2_utxo())
    assert job.language == 2
    datum, redeemer_, context = cbor2.loads(job.arguments)
    assert (datum, redeemer_) == (CBORTag(121, [b"owner"]), 42)
    wrapped_ref = CBORTag(121, [CBORTag(121, [LOCKED.transaction_id.payload]), 0])
    assert context.value[1] == CBORTag(122, [wrapped_ref])  # Spending, TxId wrapped
    assert run_job(job, make_view({}).params.cost_models).error is None  # returned an integer
    bad = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v2_script=[V2_42],
        redeemer=[spend_redeemer(7)],
        languages=[2],
    )
    [job] = submit(bad, v2_utxo())
    outcome = run_job(job, make_view({}).params.cost_models)
    assert outcome.error is not None and outcome.traces == ("v2: not 42",)


def test_integrity_hash_covers_the_v2_language_view():
    dtx = seal(spend_body(), signers=[ALICE], plutus_v2_script=[V2_42], redeemer=[spend_redeemer()])
    data = refused(3113, dtx, v2_utxo())  # sealed with the V3 view instead of V2's
    expected = script_integrity_hash(dtx, make_view({}).params.cost_models, [2])
    assert data["computedScriptIntegrity"] == expected.hex()


def test_a_v1_script_cannot_see_an_inline_datum():
    v1 = PlutusV1Script(flatten(parse("(program 1.0.0 (lam d (lam r (lam c (con unit ())))))")))
    v1_address = Address(plutus_script_hash(v1), network=ALICE.address.network)
    utxo = base_utxo(TransactionOutput(v1_address, 10_000_000, datum=DATUM))
    dtx = seal(
        spend_body(),
        signers=[ALICE],
        plutus_v1_script=[v1],
        redeemer=[spend_redeemer()],
        languages=[1],
    )
    data = refused(3136, dtx, utxo)
    assert "inline datums" in data["mismatchReason"]
    with pytest.raises(LedgerError) as caught:
        evaluation_jobs(dtx, make_view(utxo))
    validate_error("evaluateTransaction", caught.value.to_json())
    assert caught.value.code == 3004
