"""Plutus V3 over the socket: spends that pass and fail, reference scripts, inline datums,
evaluation, and the withdraw-zero pattern with a script stake credential."""

from __future__ import annotations

import pytest
from cbor2 import CBORTag
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    PlutusData,
    Redeemer,
    RedeemerMap,
    RedeemerValue,
    StakeCredential,
    StakeRegistration,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    VerificationKeyWitness,
    Withdrawals,
    plutus_script_hash,
)
from pycardano.plutus import CostModels, RawPlutusData
from pycardano.utils import script_data_hash

from devnet.genesis import ADA, wallet_address
from tests.devnet.handwritten import REDEEMER_IS_42, SIGNED_BY_DATUM_OWNER, compile_uplc
from tests.devnet.payments import confirm, lovelace_at, payment
from tests.devnet.rpc import rpc_raw
from tests.ogmios_schema import validate

REDEEMER_42 = compile_uplc(REDEEMER_IS_42)
OWNER_SIGNED = compile_uplc(SIGNED_BY_DATUM_OWNER)


def script_address(script) -> Address:
    return Address(plutus_script_hash(script), network=Network.TESTNET)


async def funded(devnet, lovelace: int = 200 * ADA) -> tuple[PaymentSigningKey, Address]:
    key = PaymentSigningKey.generate()
    address = wallet_address(key)
    await confirm(devnet, payment(devnet, "alice", address, lovelace))
    return key, address


async def lock(devnet, key, owner, address, lovelace, datum=None, script=None) -> UTxO:
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(owner)
    builder.add_output(TransactionOutput(address, lovelace, datum=datum, script=script))
    tx = builder.build_and_sign([key], change_address=owner)
    await confirm(devnet, tx)
    return UTxO(TransactionInput(tx.id, 0), tx.transaction_body.outputs[0])


def spend(devnet, key, owner, locked, redeemer, script=None, signers=()):
    builder = TransactionBuilder(devnet.context())
    builder.add_script_input(locked, script=script, redeemer=Redeemer(redeemer))
    builder.add_input_address(owner)
    builder.required_signers = list(signers)
    return builder.build_and_sign([key], change_address=owner)


async def test_v3_spend_succeeds_and_a_failing_validator_is_refused_with_its_trace(devnet):
    key, owner = await funded(devnet)
    target = script_address(REDEEMER_42)
    locked = await lock(devnet, key, owner, target, 10 * ADA, datum=PlutusData())

    # pycardano evaluates through evaluateTransaction while building; a wrong redeemer fails there.
    with pytest.raises(Exception, match="redeemer must be 42"):
        spend(devnet, key, owner, locked, 7, script=REDEEMER_42)

    good = spend(devnet, key, owner, locked, 42, script=REDEEMER_42)
    before = lovelace_at(devnet, owner)
    await confirm(devnet, good)
    assert lovelace_at(devnet, target) == 0
    assert lovelace_at(devnet, owner) == before + 10 * ADA - good.transaction_body.fee


def with_redeemer_data(tx: Transaction, key: PaymentSigningKey, data, devnet) -> Transaction:
    """The same transaction claiming other redeemer data: integrity hash redone, re-signed."""
    redeemers = RedeemerMap(
        {
            key: RedeemerValue(data, value.ex_units)
            for key, value in tx.transaction_witness_set.redeemer.items()
        }
    )
    tx.transaction_witness_set.redeemer = redeemers
    cost_models = CostModels({2: devnet.context().protocol_param.cost_models["PlutusV3"]})
    body = tx.transaction_body
    body.script_data_hash = script_data_hash(redeemers, [], cost_models)
    witnesses = tx.transaction_witness_set
    signature = key.sign(body.hash())
    witnesses.vkey_witnesses = [VerificationKeyWitness(key.to_verification_key(), signature)]
    return Transaction(body, witnesses)


async def test_submitting_a_failing_script_is_refused_with_its_traces(devnet):
    key, owner = await funded(devnet)
    target = script_address(REDEEMER_42)
    locked = await lock(devnet, key, owner, target, 10 * ADA, datum=PlutusData())
    honest = spend(devnet, key, owner, locked, 42, script=REDEEMER_42)
    tampered = with_redeemer_data(honest, key, 7, devnet)
    response = await rpc_raw(
        devnet.url, "submitTransaction", {"transaction": {"cbor": tampered.to_cbor().hex()}}
    )
    validate("submitTransaction", response)
    assert "the redeemer must be 42" in response["error"]["message"]
    assert lovelace_at(devnet, target) == 10 * ADA  # nothing moved


async def test_reference_script_and_inline_datum(devnet):
    """The owner-signed validator decodes its inline datum; the script sits in a reference UTxO."""
    key, owner = await funded(devnet)
    target = script_address(OWNER_SIGNED)
    reference = await lock(devnet, key, owner, owner, 20 * ADA, script=OWNER_SIGNED)
    datum = RawPlutusData(CBORTag(121, [key.to_verification_key().hash().payload]))
    locked = await lock(devnet, key, owner, target, 15 * ADA, datum=datum)

    builder = TransactionBuilder(devnet.context())
    builder.add_script_input(locked, script=reference, redeemer=Redeemer(PlutusData()))
    builder.add_input_address(owner)
    builder.required_signers = [key.to_verification_key().hash()]
    tx = builder.build_and_sign([key], change_address=owner)
    assert not tx.transaction_witness_set.plutus_v3_script  # the script came by reference
    assert tx.transaction_body.reference_inputs
    await confirm(devnet, tx)
    assert lovelace_at(devnet, target) == 0

    # Without the owner's signature among the signatories the validator refuses.
    locked = await lock(devnet, key, owner, target, 15 * ADA, datum=datum)
    thief_key, thief = await funded(devnet)
    builder = TransactionBuilder(devnet.context())
    builder.add_script_input(locked, script=reference, redeemer=Redeemer(PlutusData()))
    builder.add_input_address(thief)
    with pytest.raises(Exception, match="not signed by the datum's owner"):
        builder.build_and_sign([thief_key], change_address=thief)


async def test_evaluate_transaction_answers_budgets_and_validates(devnet):
    key, owner = await funded(devnet)
    locked = await lock(
        devnet, key, owner, script_address(REDEEMER_42), 5 * ADA, datum=PlutusData()
    )
    tx = spend(devnet, key, owner, locked, 42, script=REDEEMER_42)
    params = {"transaction": {"cbor": tx.to_cbor().hex()}, "additionalUtxo": None}
    response = await rpc_raw(devnet.url, "evaluateTransaction", params)
    validate("evaluateTransaction", response)
    [result] = response["result"]
    assert result["validator"] == {"purpose": "spend", "index": 0}
    assert 0 < result["budget"]["memory"] < 100_000
    failing = with_redeemer_data(tx, key, 7, devnet)
    params = {"transaction": {"cbor": failing.to_cbor().hex()}}
    response = await rpc_raw(devnet.url, "evaluateTransaction", params)
    validate("evaluateTransaction", response)
    assert response["error"]["code"] == 3010
    [failure] = response["error"]["data"]
    assert failure["error"]["code"] == 3012
    assert "the redeemer must be 42" in failure["error"]["data"]["traces"]


async def test_withdraw_zero_by_a_script_stake_credential(devnet):
    """Register a script stake credential (legacy certificate, no witness), then withdraw 0
    with the script running for the Withdrawing purpose (the batch-settlement pattern)."""
    key, owner = await funded(devnet)
    credential = StakeCredential(plutus_script_hash(REDEEMER_42))
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(owner)
    builder.certificates = [StakeRegistration(credential)]
    tx = builder.build_and_sign([key], change_address=owner)
    await confirm(devnet, tx)
    summaries = await rpc_raw(
        devnet.url,
        "queryLedgerState/rewardAccountSummaries",
        {"scripts": [plutus_script_hash(REDEEMER_42).payload.hex()]},
    )
    validate("queryLedgerState/rewardAccountSummaries", summaries)
    assert summaries["result"][0]["rewards"] == {"ada": {"lovelace": 0}}

    reward_address = Address(staking_part=plutus_script_hash(REDEEMER_42), network=Network.TESTNET)
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(owner)
    builder.withdrawals = Withdrawals({bytes(reward_address): 0})
    builder.add_withdrawal_script(REDEEMER_42, redeemer=Redeemer(42))
    withdraw = builder.build_and_sign([key], change_address=owner)
    block = await confirm(devnet, withdraw)
    assert str(withdraw.id) in [t["id"] for t in block["transactions"]]

    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(owner)
    builder.withdrawals = Withdrawals({bytes(reward_address): 0})
    builder.add_withdrawal_script(REDEEMER_42, redeemer=Redeemer(41))
    with pytest.raises(Exception, match="redeemer must be 42"):
        builder.build_and_sign([key], change_address=owner)
