"""Phase-1 rules and staking, on real signed transactions and a hand-built ledger view.

Every rejection is checked for its Ogmios code and for `data` that validates against the
Ogmios schema; most come with an honest twin that the rules accept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycardano import (
    Address,
    Anchor,
    AnchorDataHash,
    AssetName,
    ExecutionUnits,
    GovActionId,
    GovActionIdToVotingProcedure,
    InfoAction,
    InvalidBefore,
    InvalidHereAfter,
    MultiAsset,
    Network,
    PaymentSigningKey,
    PlutusData,
    PlutusV3Script,
    PoolKeyHash,
    PoolRetirement,
    ProposalProcedure,
    Redeemer,
    RedeemerTag,
    ScriptAll,
    ScriptAny,
    ScriptHash,
    ScriptNofK,
    ScriptPubkey,
    StakeCredential,
    StakeDelegation,
    StakeDeregistration,
    StakeDeregistrationConway,
    StakeRegistration,
    StakeRegistrationConway,
    Transaction,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
    Value,
    VerificationKeyHash,
    VerificationKeyWitness,
    Vote,
    Voter,
    VoterType,
    VotingProcedure,
    VotingProcedures,
    Withdrawals,
)

from devnet import rules, staking
from devnet.errors import LedgerError
from devnet.params import ProtocolParameters
from devnet.txdecode import DecodedTx, decode_tx
from devnet.view import LedgerView, SlotConfig
from tests.ogmios_schema import validate_error

ADA = 1_000_000
PARAMS = ProtocolParameters()
SLOT = 1_000
SCRIPT_HASH = ScriptHash(bytes([0x5C]) * 28)
POLICY = ScriptHash(bytes([0xA5]) * 28)
TOKEN = AssetName(b"token")


@dataclasses.dataclass(frozen=True)
class Wallet:
    key: PaymentSigningKey

    @property
    def key_hash(self) -> VerificationKeyHash:
        return self.key.to_verification_key().hash()

    @property
    def address(self) -> Address:
        return Address(self.key_hash, network=Network.TESTNET)

    @property
    def credential(self) -> staking.Credential:
        return False, self.key_hash.payload

    def witness(self, body: TransactionBody) -> VerificationKeyWitness:
        return VerificationKeyWitness(self.key.to_verification_key(), self.key.sign(body.hash()))


ALICE = Wallet(PaymentSigningKey.generate())
BOB = Wallet(PaymentSigningKey.generate())
SCRIPT_ADDRESS = Address(SCRIPT_HASH, network=Network.TESTNET)
SCRIPT_CREDENTIAL: staking.Credential = (True, SCRIPT_HASH.payload)


def ref(index: int, tx: int = 1) -> TransactionInput:
    return TransactionInput(TransactionId(bytes([tx]) * 32), index)


def tokens(quantity: int) -> MultiAsset:
    return MultiAsset.from_primitive({POLICY.payload: {TOKEN.payload: quantity}})


def make_view(
    utxo: dict[TransactionInput, TransactionOutput] | None = None,
    *,
    accounts: dict[staking.Credential, int] | None = None,
    slot: int = SLOT,
    params: ProtocolParameters = PARAMS,
) -> LedgerView:
    default = {ref(i): TransactionOutput(ALICE.address, 100 * ADA) for i in range(3)}
    return LedgerView(
        utxo=default if utxo is None else utxo,
        params=params,
        slot=slot,
        slots=SlotConfig(zero_time_ms=0, slot_length_ms=1_000),
        reward_accounts=accounts or {},
    )


def sign(
    body: TransactionBody, signers: tuple[Wallet, ...], witnesses: dict[str, Any]
) -> DecodedTx:
    vkeys = [wallet.witness(body) for wallet in signers] or None
    witness_set = TransactionWitnessSet(vkey_witnesses=vkeys, **witnesses)
    return decode_tx(Transaction(body, witness_set).to_cbor())


def build(
    view: LedgerView,
    inputs: list[TransactionInput],
    outputs: list[TransactionOutput] = (),  # type: ignore[assignment]
    *,
    signers: tuple[Wallet, ...] = (ALICE,),
    extra: int = 0,
    fee: int | None = None,
    ex_units: tuple[int, int] = (0, 0),
    ref_scripts: int = 0,
    witnesses: dict[str, Any] | None = None,
    **fields: Any,
) -> DecodedTx:
    """A signed tx whose last output is ADA change to Alice, balanced for the fee.

    `extra` is lovelace the body brings in beyond its inputs (withdrawals + refunds -
    deposits). With `fee=None` the fee is the exact minimum for the final size.
    """
    available = sum(view.utxo[i].amount.coin for i in inputs) + extra
    available -= sum(out.amount.coin for out in outputs)
    paid = fee if fee is not None else 0
    while True:
        change = TransactionOutput(ALICE.address, available - paid)
        body = TransactionBody(inputs=inputs, outputs=[*outputs, change], fee=paid, **fields)
        dtx = sign(body, signers, witnesses or {})
        minimum = PARAMS.min_fee(dtx.size, *ex_units, ref_scripts)
        if fee is not None or paid >= minimum:
            return dtx
        paid = minimum


def accept(dtx: DecodedTx, view: LedgerView) -> None:
    rules.check_phase1(dtx, view, vkey_hashes=rules.verified_vkey_hashes(dtx))


def reject(code: int, dtx: DecodedTx, view: LedgerView) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        accept(dtx, view)
    error = caught.value
    assert error.code == code, error.message
    validate_error("submitTransaction", error.to_json())
    return error


# --- plain payments -----------------------------------------------------------------------


def test_honest_payment_is_accepted() -> None:
    view = make_view()
    accept(build(view, [ref(0)], [TransactionOutput(BOB.address, 10 * ADA)]), view)


def test_empty_inputs() -> None:
    view = make_view()
    body = TransactionBody(inputs=[], outputs=[], fee=0)
    reject(rules.EMPTY_INPUT_SET, sign(body, (), {}), view)


def test_unknown_inputs_collateral_and_references_are_all_reported() -> None:
    view = make_view()
    dtx = build(view, [ref(0)], collateral=[ref(8)], reference_inputs=[ref(9)])
    with_unknown_input = dtx.tx.transaction_body
    with_unknown_input.inputs = [ref(0), ref(7)]
    error = reject(rules.UNKNOWN_OUTPUT_REFERENCES, sign(with_unknown_input, (ALICE,), {}), view)
    assert [r["index"] for r in error.data["unknownOutputReferences"]] == [7, 8, 9]


def test_spent_input_is_unknown() -> None:
    view = make_view()
    dtx = build(view, [ref(0)])
    spent = make_view({ref(1): view.utxo[ref(1)]})
    reject(rules.UNKNOWN_OUTPUT_REFERENCES, dtx, spent)


def test_input_that_is_also_a_reference_input_is_refused_at_protocol_10() -> None:
    view = make_view()
    accept(build(view, [ref(0)], reference_inputs=[ref(1)]), view)
    dtx = build(view, [ref(0)], reference_inputs=[ref(0)])
    error = reject(rules.CONFLICTING_INPUTS_AND_REFERENCES, dtx, view)
    assert error.data["conflictingReferences"][0]["index"] == 0
    accept(dtx, make_view(params=dataclasses.replace(PARAMS, protocol_version=(11, 0))))


def test_transaction_too_large() -> None:
    view = make_view()
    dtx = build(view, [ref(0)])
    accept(dtx, view)
    small = make_view(params=dataclasses.replace(PARAMS, max_tx_size=dtx.size - 1))
    error = reject(rules.TRANSACTION_TOO_LARGE, dtx, small)
    assert error.data["measuredTransactionSize"] == {"bytes": dtx.size}


# --- value conservation and fees -----------------------------------------------------------


def test_value_not_conserved_reports_both_sides() -> None:
    view = make_view()
    dtx = build(view, [ref(0)], extra=1)
    error = reject(rules.VALUE_NOT_CONSERVED, dtx, view)
    assert error.data["valueConsumed"] == {"ada": {"lovelace": 100 * ADA}}
    assert error.data["valueProduced"] == {"ada": {"lovelace": 100 * ADA + 1}}


@settings(max_examples=40, deadline=None)
@given(
    amounts=st.lists(st.integers(20 * ADA, 1_000 * ADA), min_size=1, max_size=3),
    payment=st.integers(2 * ADA, 9 * ADA),
    ada_delta=st.integers(-ADA, ADA),
    token_delta=st.integers(-5, 5),
)
def test_value_conservation_holds_exactly(
    amounts: list[int], payment: int, ada_delta: int, token_delta: int
) -> None:
    """Any lovelace or token surplus or deficit is refused, and reported as the difference."""
    utxo = {
        ref(i): TransactionOutput(ALICE.address, Value(a, tokens(10)))
        for i, a in enumerate(amounts)
    }
    view = make_view(utxo)
    moved = 10 * len(amounts) + token_delta
    outputs = [TransactionOutput(BOB.address, Value(payment, tokens(moved)))]
    dtx = build(view, list(utxo), outputs, extra=ada_delta, fee=ADA)
    if ada_delta == 0 and token_delta == 0:
        accept(dtx, view)
        return
    error = reject(rules.VALUE_NOT_CONSERVED, dtx, view)
    consumed, produced = error.data["valueConsumed"], error.data["valueProduced"]
    assert produced["ada"]["lovelace"] - consumed["ada"]["lovelace"] == ada_delta
    asset = (POLICY.payload.hex(), TOKEN.payload.hex())
    assert produced[asset[0]][asset[1]] - consumed[asset[0]][asset[1]] == token_delta


def test_minting_and_burning_count_on_their_own_sides() -> None:
    view = make_view({ref(0): TransactionOutput(ALICE.address, Value(100 * ADA, tokens(5)))})
    minted = [TransactionOutput(BOB.address, Value(2 * ADA, tokens(8)))]
    accept(build(view, [ref(0)], minted, mint=tokens(3)), view)
    burned = [TransactionOutput(BOB.address, Value(2 * ADA, tokens(2)))]
    accept(build(view, [ref(0)], burned, mint=tokens(-3)), view)
    error = reject(rules.VALUE_NOT_CONSERVED, build(view, [ref(0)], burned, mint=tokens(-4)), view)
    policy = POLICY.payload.hex()
    assert error.data["valueProduced"][policy] == {TOKEN.payload.hex(): 6}


def test_fee_below_minimum() -> None:
    view = make_view()
    honest = build(view, [ref(0)])
    accept(honest, view)
    minimum = honest.tx.transaction_body.fee
    error = reject(rules.FEE_TOO_SMALL, build(view, [ref(0)], fee=minimum - 1), view)
    assert error.data["minimumRequiredFee"] == {"ada": {"lovelace": minimum}}


def test_fee_covers_reference_scripts_at_the_tiered_price() -> None:
    script = PlutusV3Script(bytes(30_000))
    utxo = {
        ref(0): TransactionOutput(ALICE.address, 100 * ADA),
        ref(1): TransactionOutput(BOB.address, 200 * ADA, script=script),
    }
    view = make_view(utxo)
    honest = build(view, [ref(0)], reference_inputs=[ref(1)], ref_scripts=30_000)
    accept(honest, view)
    ignoring_scripts = build(view, [ref(0)], reference_inputs=[ref(1)])
    error = reject(rules.FEE_TOO_SMALL, ignoring_scripts, view)
    expected = PARAMS.min_fee(ignoring_scripts.size, 0, 0, 30_000)
    assert error.data["minimumRequiredFee"]["ada"]["lovelace"] == expected
    assert PARAMS.reference_script_fee.fee(30_000) == 25_600 * 15 + 4_400 * 18


def test_reference_scripts_too_large() -> None:
    utxo = {
        ref(0): TransactionOutput(ALICE.address, 100 * ADA),
        ref(1): TransactionOutput(BOB.address, 200 * ADA, script=PlutusV3Script(bytes(2_000))),
    }
    params = dataclasses.replace(PARAMS, max_reference_scripts_size=1_999)
    dtx = build(make_view(utxo), [ref(0)], reference_inputs=[ref(1)], ref_scripts=2_000)
    reject(rules.REFERENCE_SCRIPTS_TOO_LARGE, dtx, make_view(utxo, params=params))


# --- signatures ---------------------------------------------------------------------------


def test_unsigned_input_is_missing_a_signatory() -> None:
    view = make_view()
    error = reject(rules.MISSING_SIGNATORIES, build(view, [ref(0)], signers=(BOB,)), view)
    assert error.data == {"missingSignatories": [ALICE.key_hash.payload.hex()]}


def test_required_signer_must_sign() -> None:
    view = make_view()
    accept(build(view, [ref(0)], signers=(ALICE, BOB), required_signers=[BOB.key_hash]), view)
    dtx = build(view, [ref(0)], required_signers=[BOB.key_hash])
    error = reject(rules.MISSING_SIGNATORIES, dtx, view)
    assert error.data == {"missingSignatories": [BOB.key_hash.payload.hex()]}


def test_signature_over_another_body_is_invalid() -> None:
    dtx = build(make_view(), [ref(0)])
    other = build(make_view(), [ref(1)]).tx.transaction_witness_set
    forged = decode_tx(Transaction(dtx.tx.transaction_body, other).to_cbor())
    with pytest.raises(LedgerError) as caught:
        rules.verified_vkey_hashes(forged)
    assert caught.value.code == rules.INVALID_SIGNATORIES
    assert caught.value.data == {
        "invalidSignatories": [ALICE.key.to_verification_key().payload.hex()]
    }
    validate_error("submitTransaction", caught.value.to_json())


def test_verified_vkey_hashes_are_the_signers_key_hashes() -> None:
    dtx = build(make_view(), [ref(0)], signers=(ALICE, BOB))
    assert rules.verified_vkey_hashes(dtx) == {ALICE.key_hash.payload, BOB.key_hash.payload}


# --- validity interval and network --------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "ttl", "ok"),
    [
        (SLOT, None, True),
        (SLOT + 1, None, False),
        (None, SLOT + 1, True),
        (None, SLOT, False),
        (SLOT - 10, SLOT + 10, True),
    ],
)
def test_validity_interval(start: int | None, ttl: int | None, ok: bool) -> None:
    view = make_view()
    dtx = build(view, [ref(0)], validity_start=start, ttl=ttl)
    if ok:
        accept(dtx, view)
        return
    error = reject(rules.OUTSIDE_VALIDITY_INTERVAL, dtx, view)
    assert error.data["currentSlot"] == SLOT


def test_output_to_another_network() -> None:
    view = make_view()
    mainnet = Address(BOB.key_hash, network=Network.MAINNET)
    error = reject(
        rules.NETWORK_MISMATCH, build(view, [ref(0)], [TransactionOutput(mainnet, 5 * ADA)]), view
    )
    assert error.data == {
        "expectedNetwork": "testnet",
        "discriminatedType": "address",
        "invalidEntities": [str(mainnet)],
    }


def test_body_network_id_must_match() -> None:
    view = make_view()
    accept(build(view, [ref(0)], network_id=Network.TESTNET), view)
    error = reject(rules.NETWORK_MISMATCH, build(view, [ref(0)], network_id=Network.MAINNET), view)
    assert error.data["discriminatedType"] == "transaction"


def test_withdrawal_from_another_network() -> None:
    account = Address(staking_part=SCRIPT_HASH, network=Network.MAINNET)
    view = make_view(accounts={SCRIPT_CREDENTIAL: 0})
    dtx = build(view, [ref(0)], withdraws=Withdrawals({bytes(account): 0}))
    error = reject(rules.NETWORK_MISMATCH, dtx, view)
    assert error.data["discriminatedType"] == "rewardAccount"
    assert error.data["invalidEntities"] == [str(account)]


# --- outputs ------------------------------------------------------------------------------


def min_ada(output: TransactionOutput) -> int:
    """Babbage's min-UTxO of an output as pycardano encodes it: its size plus 160 bytes, at
    the price per byte (worked out here, apart from the ledger's own code)."""
    return (160 + len(output.to_cbor())) * PARAMS.coins_per_utxo_byte


def test_output_below_min_utxo() -> None:
    view = make_view()
    minimum = min_ada(TransactionOutput(BOB.address, ADA))
    accept(build(view, [ref(0)], [TransactionOutput(BOB.address, minimum)]), view)
    short = build(view, [ref(0)], [TransactionOutput(BOB.address, minimum - 1)])
    error = reject(rules.INSUFFICIENTLY_FUNDED_OUTPUTS, short, view)
    [entry] = error.data["insufficientlyFundedOutputs"]
    assert entry["minimumRequiredValue"] == {"ada": {"lovelace": minimum}}
    assert entry["output"]["address"] == str(BOB.address)


def test_min_utxo_uses_the_output_bytes_as_sent() -> None:
    """A map-form output is two bytes larger than pycardano's legacy re-encoding of it."""
    view = make_view()
    needed = min_ada(TransactionOutput(BOB.address, ADA, post_alonzo=True))
    legacy = min_ada(TransactionOutput(BOB.address, ADA))
    assert needed == legacy + 2 * PARAMS.coins_per_utxo_byte
    enough = TransactionOutput(BOB.address, needed, post_alonzo=True)
    accept(build(view, [ref(0)], [enough]), view)
    short = TransactionOutput(BOB.address, legacy, post_alonzo=True)
    error = reject(rules.INSUFFICIENTLY_FUNDED_OUTPUTS, build(view, [ref(0)], [short]), view)
    [entry] = error.data["insufficientlyFundedOutputs"]
    assert entry["minimumRequiredValue"] == {"ada": {"lovelace": needed}}


def test_insufficiently_funded_output_reports_inline_datum_and_script() -> None:
    view = make_view()
    script = PlutusV3Script(bytes(100))
    output = TransactionOutput(BOB.address, ADA, datum=PlutusData(), script=script)
    error = reject(rules.INSUFFICIENTLY_FUNDED_OUTPUTS, build(view, [ref(0)], [output]), view)
    [entry] = error.data["insufficientlyFundedOutputs"]
    assert entry["output"]["datum"] == PlutusData().to_cbor_hex()
    assert entry["output"]["script"] == {"language": "plutus:v3", "cbor": bytes(script).hex()}


def test_native_script_in_an_output_is_reported_in_ogmios_clauses() -> None:
    view = make_view()
    script = ScriptAll(
        [
            ScriptPubkey(ALICE.key_hash),
            ScriptNofK(1, [InvalidBefore(5), InvalidHereAfter(9)]),
            ScriptAny([ScriptPubkey(BOB.key_hash)]),
        ]
    )
    output = TransactionOutput(BOB.address, 500_000, script=script)
    error = reject(rules.INSUFFICIENTLY_FUNDED_OUTPUTS, build(view, [ref(0)], [output]), view)
    reported = error.data["insufficientlyFundedOutputs"][0]["output"]["script"]
    assert reported["json"]["from"][1] == {
        "clause": "some",
        "atLeast": 1,
        "from": [{"clause": "after", "slot": 5}, {"clause": "before", "slot": 9}],
    }


def test_output_value_too_large() -> None:
    many = MultiAsset.from_primitive(
        {POLICY.payload: {i.to_bytes(2, "big") * 16: 1 for i in range(100)}}
    )
    view = make_view({ref(0): TransactionOutput(ALICE.address, Value(100 * ADA, many))})
    dtx = build(view, [ref(0)], [TransactionOutput(BOB.address, Value(50 * ADA, many))])
    accept(dtx, view)
    small = make_view(view.utxo, params=dataclasses.replace(PARAMS, max_value_size=3_000))
    error = reject(rules.VALUE_TOO_LARGE, dtx, small)
    assert len(error.data["excessivelyLargeOutputs"]) == 1


# --- collateral (when the transaction carries redeemers) ----------------------------------

REDEEMER_UNITS = (1_000_000, 500_000_000)


def with_redeemer(
    view: LedgerView,
    *,
    collateral: list[TransactionInput],
    units: tuple[int, int] = REDEEMER_UNITS,
    **fields: Any,
) -> DecodedTx:
    redeemer = Redeemer(PlutusData(), ExecutionUnits(*units))
    redeemer.tag = RedeemerTag.SPEND
    return build(
        view,
        [ref(0)],
        ex_units=units,
        collateral=collateral,
        witnesses={"redeemer": [redeemer]},
        **fields,
    )


def collateral_view(extra: dict[TransactionInput, TransactionOutput] | None = None) -> LedgerView:
    utxo = {ref(i): TransactionOutput(ALICE.address, 100 * ADA) for i in range(5)}
    return make_view({**utxo, **(extra or {})})


def test_honest_collateral_with_return_and_total() -> None:
    view = collateral_view()
    returned = TransactionOutput(ALICE.address, 95 * ADA)
    dtx = with_redeemer(
        view, collateral=[ref(1)], collateral_return=returned, total_collateral=5 * ADA
    )
    accept(dtx, view)


def test_missing_collateral() -> None:
    view = collateral_view()
    reject(rules.MISSING_COLLATERAL_INPUTS, with_redeemer(view, collateral=[]), view)


def test_too_many_collateral_inputs() -> None:
    view = collateral_view()
    dtx = with_redeemer(view, collateral=[ref(1), ref(2), ref(3), ref(4)])
    error = reject(rules.TOO_MANY_COLLATERAL_INPUTS, dtx, view)
    assert error.data == {"maximumCollateralInputs": 3, "countedCollateralInputs": 4}


def test_collateral_locked_by_script() -> None:
    view = collateral_view({ref(9): TransactionOutput(SCRIPT_ADDRESS, 10 * ADA)})
    error = reject(
        rules.COLLATERAL_LOCKED_BY_SCRIPT, with_redeemer(view, collateral=[ref(9)]), view
    )
    assert error.data["unsuitableCollateralInputs"][0]["index"] == 9


def test_insufficient_collateral() -> None:
    view = collateral_view({ref(9): TransactionOutput(ALICE.address, 200_000)})
    dtx = with_redeemer(view, collateral=[ref(9)])
    error = reject(rules.INSUFFICIENT_COLLATERAL, dtx, view)
    fee = dtx.tx.transaction_body.fee
    assert error.data["minimumRequiredCollateral"]["ada"]["lovelace"] == -(-fee * 150 // 100)
    assert error.data["providedCollateral"] == {"ada": {"lovelace": 200_000}}


def test_non_ada_collateral_unless_returned() -> None:
    view = collateral_view({ref(9): TransactionOutput(ALICE.address, Value(10 * ADA, tokens(3)))})
    reject(rules.NON_ADA_COLLATERAL, with_redeemer(view, collateral=[ref(9)]), view)
    returned = TransactionOutput(ALICE.address, Value(5 * ADA, tokens(3)))
    accept(with_redeemer(view, collateral=[ref(9)], collateral_return=returned), view)


def test_total_collateral_must_match() -> None:
    view = collateral_view()
    dtx = with_redeemer(view, collateral=[ref(1)], total_collateral=99 * ADA)
    error = reject(rules.TOTAL_COLLATERAL_MISMATCH, dtx, view)
    assert error.data["computedTotalCollateral"] == {"ada": {"lovelace": 100 * ADA}}


def test_collateral_return_below_min_utxo() -> None:
    view = collateral_view()
    dtx = with_redeemer(
        view, collateral=[ref(1)], collateral_return=TransactionOutput(ALICE.address, 1)
    )
    reject(rules.INSUFFICIENTLY_FUNDED_OUTPUTS, dtx, view)


def test_execution_units_above_the_transaction_maximum() -> None:
    view = collateral_view()
    units = (PARAMS.max_tx_memory + 1, 1)
    error = reject(
        rules.EXECUTION_UNITS_TOO_LARGE, with_redeemer(view, collateral=[ref(1)], units=units), view
    )
    assert error.data["providedExecutionUnits"] == {"memory": units[0], "cpu": 1}


# --- staking ------------------------------------------------------------------------------

DEPOSIT = PARAMS.key_deposit


def script_account() -> bytes:
    return bytes(Address(staking_part=SCRIPT_HASH, network=Network.TESTNET))


def test_legacy_registration_needs_no_witness_and_pays_the_deposit() -> None:
    view = make_view()
    cert = StakeRegistration(StakeCredential(SCRIPT_HASH))
    dtx = build(view, [ref(0)], extra=-DEPOSIT, certificates=[cert])
    accept(dtx, view)
    reject(rules.VALUE_NOT_CONSERVED, build(view, [ref(0)], certificates=[cert]), view)
    changes = staking.staking_changes(dtx.tx.transaction_body, DEPOSIT)
    registered = [c.credential for c in changes.certificates if c.action is staking.Action.REGISTER]
    assert registered == [SCRIPT_CREDENTIAL]
    assert changes.deposits == DEPOSIT
    accounts: dict[staking.Credential, int] = {}
    staking.apply_staking(changes, accounts)
    assert accounts == {SCRIPT_CREDENTIAL: 0}


def test_registering_twice() -> None:
    view = make_view(accounts={SCRIPT_CREDENTIAL: 0})
    cert = StakeRegistration(StakeCredential(SCRIPT_HASH))
    error = reject(
        staking.CREDENTIAL_ALREADY_REGISTERED,
        build(view, [ref(0)], extra=-DEPOSIT, certificates=[cert]),
        view,
    )
    assert error.data == {"knownCredential": SCRIPT_HASH.payload.hex(), "from": "script"}


def test_conway_registration_deposit_must_match() -> None:
    view = make_view()
    honest = StakeRegistrationConway(StakeCredential(ALICE.key_hash), DEPOSIT)
    accept(build(view, [ref(0)], extra=-DEPOSIT, certificates=[honest]), view)
    wrong = StakeRegistrationConway(StakeCredential(ALICE.key_hash), DEPOSIT - 1)
    dtx = build(view, [ref(0)], extra=-(DEPOSIT - 1), certificates=[wrong])
    error = reject(staking.CREDENTIAL_DEPOSIT_MISMATCH, dtx, view)
    assert error.data["expectedDeposit"] == {"ada": {"lovelace": DEPOSIT}}


def test_conway_registration_of_a_key_credential_needs_its_signature() -> None:
    view = make_view()
    cert = StakeRegistrationConway(StakeCredential(BOB.key_hash), DEPOSIT)
    dtx = build(view, [ref(0)], extra=-DEPOSIT, certificates=[cert])
    error = reject(rules.MISSING_SIGNATORIES, dtx, view)
    assert error.data == {"missingSignatories": [BOB.key_hash.payload.hex()]}


def test_deregistration_refunds_and_needs_a_witness() -> None:
    view = make_view(accounts={ALICE.credential: 0, BOB.credential: 0})
    accept(
        build(
            view,
            [ref(0)],
            extra=DEPOSIT,
            certificates=[StakeDeregistration(StakeCredential(ALICE.key_hash))],
        ),
        view,
    )
    conway = StakeDeregistrationConway(StakeCredential(ALICE.key_hash), DEPOSIT)
    accept(build(view, [ref(0)], extra=DEPOSIT, certificates=[conway]), view)
    unsigned = StakeDeregistration(StakeCredential(BOB.key_hash))
    reject(
        rules.MISSING_SIGNATORIES,
        build(view, [ref(0)], extra=DEPOSIT, certificates=[unsigned]),
        view,
    )


def test_deregistering_an_unknown_credential() -> None:
    view = make_view()
    cert = StakeDeregistration(StakeCredential(ALICE.key_hash))
    error = reject(
        staking.UNKNOWN_CREDENTIAL, build(view, [ref(0)], extra=DEPOSIT, certificates=[cert]), view
    )
    assert error.data == {
        "unknownCredential": ALICE.key_hash.payload.hex(),
        "from": "verificationKey",
    }


def test_delegating_an_unregistered_credential() -> None:
    view = make_view()
    cert = StakeDelegation(StakeCredential(ALICE.key_hash), PoolKeyHash(bytes(28)))
    reject(staking.UNKNOWN_CREDENTIAL, build(view, [ref(0)], certificates=[cert]), view)
    registered = make_view(accounts={ALICE.credential: 0})
    accept(build(registered, [ref(0)], certificates=[cert]), registered)


def test_deregistering_with_rewards_left() -> None:
    view = make_view(accounts={ALICE.credential: 7})
    cert = StakeDeregistration(StakeCredential(ALICE.key_hash))
    error = reject(
        staking.NON_EMPTY_REWARD_ACCOUNT,
        build(view, [ref(0)], extra=DEPOSIT, certificates=[cert]),
        view,
    )
    assert error.data == {"nonEmptyRewardAccountBalance": {"ada": {"lovelace": 7}}}
    account = bytes(Address(staking_part=ALICE.key_hash, network=Network.TESTNET))
    drained = build(
        view, [ref(0)], extra=DEPOSIT + 7, certificates=[cert], withdraws=Withdrawals({account: 7})
    )
    accept(drained, view)


def test_zero_withdrawal_by_a_script_credential() -> None:
    """The withdraw-zero pattern: no vkey witness (the script helper checks the script)."""
    view = make_view(accounts={SCRIPT_CREDENTIAL: 0})
    dtx = build(view, [ref(0)], withdraws=Withdrawals({script_account(): 0}))
    accept(dtx, view)
    changes = staking.staking_changes(dtx.tx.transaction_body, DEPOSIT)
    assert changes.withdrawals == {SCRIPT_CREDENTIAL: 0}
    assert changes.witness_credentials == {SCRIPT_CREDENTIAL}
    accounts = {SCRIPT_CREDENTIAL: 0}
    staking.apply_staking(changes, accounts)
    assert accounts == {SCRIPT_CREDENTIAL: 0}


def test_withdrawal_from_an_unregistered_account() -> None:
    view = make_view()
    dtx = build(view, [ref(0)], withdraws=Withdrawals({script_account(): 0}))
    error = reject(staking.INCOMPLETE_WITHDRAWALS, dtx, view)
    stake_address = str(Address(staking_part=SCRIPT_HASH, network=Network.TESTNET))
    assert error.data == {"incompleteWithdrawals": {stake_address: {"ada": {"lovelace": 0}}}}


def test_withdrawal_must_drain_the_balance() -> None:
    view = make_view(accounts={SCRIPT_CREDENTIAL: 5 * ADA})
    partial = build(view, [ref(0)], extra=ADA, withdraws=Withdrawals({script_account(): ADA}))
    reject(staking.INCOMPLETE_WITHDRAWALS, partial, view)
    full = build(view, [ref(0)], extra=5 * ADA, withdraws=Withdrawals({script_account(): 5 * ADA}))
    accept(full, view)
    accounts = dict(view.reward_accounts)
    staking.apply_staking(staking.staking_changes(full.tx.transaction_body, DEPOSIT), accounts)
    assert accounts == {SCRIPT_CREDENTIAL: 0}


def test_key_credential_withdrawal_needs_its_signature() -> None:
    view = make_view(accounts={BOB.credential: 0})
    account = bytes(Address(staking_part=BOB.key_hash, network=Network.TESTNET))
    dtx = build(view, [ref(0)], withdraws=Withdrawals({account: 0}))
    reject(rules.MISSING_SIGNATORIES, dtx, view)
    accept(build(view, [ref(0)], signers=(ALICE, BOB), withdraws=Withdrawals({account: 0})), view)


def test_register_use_and_deregister_in_order() -> None:
    """Certificates see the ones before them: register then deregister in one transaction."""
    view = make_view()
    credential = StakeCredential(SCRIPT_HASH)
    certs = [StakeRegistration(credential), StakeDeregistrationConway(credential, DEPOSIT)]
    # The Conway deregistration of a script credential needs the script, not a vkey.
    accept(build(view, [ref(0)], certificates=certs), view)


def test_unsupported_certificate() -> None:
    view = make_view()
    cert = PoolRetirement(PoolKeyHash(bytes(28)), 5)
    reject(staking.UNRECOGNIZED_CERTIFICATE, build(view, [ref(0)], certificates=[cert]), view)


# --- governance ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("voter_type", "role"),
    [
        (VoterType.DREP, "delegateRepresentative"),
        (VoterType.STAKING_POOL, "stakePoolOperator"),
        (VoterType.COMMITTEE_HOT, "constitutionalCommittee"),
    ],
)
def test_votes_have_no_known_voter(voter_type: VoterType, role: str) -> None:
    view = make_view()
    action = GovActionId(TransactionId(bytes(32)), 0)
    ballot = GovActionIdToVotingProcedure({action: VotingProcedure(Vote.YES, None)})
    votes = VotingProcedures({Voter(ALICE.key_hash, voter_type): ballot})
    error = reject(rules.UNKNOWN_VOTERS, build(view, [ref(0)], voting_procedures=votes), view)
    assert error.data["unknownVoters"][0]["role"] == role


def test_proposals_are_refused() -> None:
    view = make_view()
    account = bytes(Address(staking_part=ALICE.key_hash, network=Network.TESTNET))
    anchor = Anchor("https://example.com/a", AnchorDataHash(bytes(32)))
    proposal = ProposalProcedure(PARAMS.governance_action_deposit, account, InfoAction(), anchor)
    dtx = build(view, [ref(0)], proposal_procedures=[proposal])
    reject(rules.UNAUTHORIZED_GOVERNANCE_ACTION, dtx, view)
