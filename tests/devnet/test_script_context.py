"""The Plutus V3 ScriptContext, field by field, against the ledger's encoding
(plutus-ledger-api V3, as the team's context notes lay it out): orderings, closures, bare
TxId, no ADA in mint, Credential-keyed withdrawals, TxCert constructors and ScriptInfo with
its optional datum."""

from __future__ import annotations

import hashlib

import cbor2
import pytest
from cbor2 import CBORTag
from pycardano import (
    Address,
    Asset,
    AssetName,
    DatumHash,
    MultiAsset,
    PoolKeyHash,
    RawPlutusData,
    RedeemerTag,
    StakeCredential,
    StakeDelegation,
    StakeRegistration,
    StakeRegistrationConway,
    TransactionBody,
    TransactionOutput,
    Value,
    Withdrawals,
    datum_hash,
    plutus_script_hash,
)

from devnet.params import ProtocolParameters
from devnet.script_context import (
    FALSE,
    MINT,
    NOTHING,
    PUBLISH,
    SPEND,
    TRUE,
    WITHDRAW,
    Constr,
    ContextError,
    DataMap,
    RawData,
    TxContext,
    cert_script_hash,
    encode_data,
    governance_action,
    just,
    proposal_procedure,
    tx_cert,
    voter,
)
from devnet.txdecode import decode_tx
from tests.devnet.handwritten import compile_uplc
from tests.devnet.plutus_helpers import (
    ZERO_TIME_MS,
    Wallet,
    always_succeeds,
    data_from_cbor,
    make_view,
    out_ref,
    redeemer,
    script_address,
    seal,
)

SPEND_SCRIPT = compile_uplc(always_succeeds(1))
POLICY_A = compile_uplc(always_succeeds(2))
POLICY_B = compile_uplc(always_succeeds(3))
STAKE_SCRIPT = compile_uplc(always_succeeds(4))
ALICE, BOB = Wallet.generate(), Wallet.generate()
POOL = PoolKeyHash(bytes(range(28)))
INLINE_DATUM = RawPlutusData(CBORTag(121, [7]))
HASHED_DATUM = RawPlutusData(CBORTag(122, [b"hashed"]))
SUPPLEMENTAL_DATUM = RawPlutusData(CBORTag(123, []))

# inputs: three locked by SPEND_SCRIPT (inline datum, datum hash, no datum), one by Alice
INLINE_IN, HASHED_IN, BARE_IN, KEY_IN, REFERENCE_IN = (out_ref(n) for n in range(1, 6))


def h(script) -> bytes:
    return plutus_script_hash(script).payload


def sorted_refs(*refs):
    return sorted(refs, key=lambda r: (r.transaction_id.payload, r.index))


def utxo():
    locked = script_address(SPEND_SCRIPT)
    return {
        INLINE_IN: TransactionOutput(locked, 5_000_000, datum=INLINE_DATUM),
        HASHED_IN: TransactionOutput(locked, 6_000_000, datum_hash=datum_hash(HASHED_DATUM)),
        BARE_IN: TransactionOutput(locked, 7_000_000),
        KEY_IN: TransactionOutput(ALICE.address, 100_000_000),
        REFERENCE_IN: TransactionOutput(ALICE.address, 2_000_000, datum_hash=DatumHash(b"r" * 32)),
    }


def stake_address(credential) -> bytes:
    return bytes(Address(staking_part=credential, network=ALICE.address.network))


def rich_body() -> TransactionBody:
    minted = MultiAsset(
        {
            plutus_script_hash(POLICY_B): Asset({AssetName(b"t"): -2}),
            plutus_script_hash(POLICY_A): Asset({AssetName(b"x"): 5, AssetName(b"a"): 1}),
        }
    )
    outputs = [
        TransactionOutput(ALICE.address, Value(3_000_000, minted)),
        TransactionOutput(BOB.address, 2_000_000, datum_hash=datum_hash(SUPPLEMENTAL_DATUM)),
    ]
    return TransactionBody(
        inputs=[KEY_IN, BARE_IN, HASHED_IN, INLINE_IN],
        outputs=outputs,
        fee=1_000_000,
        ttl=2_000,
        validity_start=900,
        mint=minted,
        certificates=[
            StakeRegistration(StakeCredential(plutus_script_hash(STAKE_SCRIPT))),
            StakeRegistrationConway(StakeCredential(ALICE.key_hash), 2_000_000),
            StakeDelegation(StakeCredential(plutus_script_hash(STAKE_SCRIPT)), POOL),
        ],
        withdraws=Withdrawals(
            {
                stake_address(ALICE.key_hash): 0,
                stake_address(plutus_script_hash(STAKE_SCRIPT)): 0,
            }
        ),
        required_signers=[BOB.key_hash, ALICE.key_hash],
        reference_inputs=[REFERENCE_IN],
        collateral=[KEY_IN],
        current_treasury_value=1_000,
        donation=5,
    )


def rich_redeemers():
    spends = sorted_refs(INLINE_IN, HASHED_IN, BARE_IN, KEY_IN)
    mints = sorted([h(POLICY_A), h(POLICY_B)])
    return [
        redeemer(RedeemerTag.WITHDRAWAL, 0, 40),
        redeemer(RedeemerTag.CERTIFICATE, 2, 30),
        redeemer(RedeemerTag.MINT, mints.index(h(POLICY_B)), 21),
        redeemer(RedeemerTag.MINT, mints.index(h(POLICY_A)), 20),
        *(
            redeemer(RedeemerTag.SPEND, spends.index(ref), 10 + i)
            for i, ref in enumerate([INLINE_IN, HASHED_IN, BARE_IN])
        ),
    ]


def rich_tx(params=None):
    return seal(
        rich_body(),
        signers=[ALICE, BOB],
        params=params,
        plutus_v3_script=[SPEND_SCRIPT, POLICY_A, POLICY_B, STAKE_SCRIPT],
        plutus_data=[HASHED_DATUM, SUPPLEMENTAL_DATUM],
        redeemer=rich_redeemers(),
    )


@pytest.fixture(scope="module")
def ctx() -> TxContext:
    return TxContext(rich_tx(), make_view(utxo()))


@pytest.fixture(scope="module")
def info(ctx) -> Constr:
    decoded = data_from_cbor(ctx.tx_info)
    assert isinstance(decoded, Constr) and decoded.index == 0
    assert len(decoded.fields) == 16
    return decoded


def addr(wallet: Wallet) -> Constr:
    return Constr(0, (Constr(0, (wallet.key_hash.payload,)), NOTHING))


def script_addr(script) -> Constr:
    return Constr(0, (Constr(1, (h(script),)), NOTHING))


def ada(lovelace: int) -> tuple:
    return (b"", DataMap(((b"", lovelace),)))


def test_inputs_sorted_with_bare_txid_and_resolved_outputs(info):
    inputs = info.fields[0]
    refs = sorted_refs(INLINE_IN, HASHED_IN, BARE_IN, KEY_IN)
    assert [i.fields[0] for i in inputs] == [
        Constr(0, (ref.transaction_id.payload, ref.index)) for ref in refs
    ]
    by_ref = {ref: i.fields[1] for ref, i in zip(refs, inputs, strict=True)}
    assert by_ref[INLINE_IN] == Constr(
        0,
        (
            script_addr(SPEND_SCRIPT),
            DataMap((ada(5_000_000),)),
            Constr(2, (Constr(0, (7,)),)),
            NOTHING,
        ),
    )
    assert by_ref[HASHED_IN].fields[2] == Constr(1, (datum_hash(HASHED_DATUM).payload,))
    assert by_ref[BARE_IN].fields[2] == Constr(0)  # NoOutputDatum
    assert by_ref[KEY_IN].fields[0] == addr(ALICE)


def test_reference_inputs_outputs_fee(info):
    [reference] = info.fields[1]
    assert reference.fields[0] == Constr(0, (REFERENCE_IN.transaction_id.payload, 0))
    assert reference.fields[1].fields[2] == Constr(1, (b"r" * 32,))
    first, second = info.fields[2]
    # ADA first, then policies in ascending order, asset names ascending
    policies = sorted([h(POLICY_A), h(POLICY_B)])
    expected_assets = {
        h(POLICY_A): DataMap(((b"a", 1), (b"x", 5))),
        h(POLICY_B): DataMap(((b"t", -2),)),
    }
    assert first.fields[1] == DataMap(
        (ada(3_000_000), *((p, expected_assets[p]) for p in policies))
    )
    assert second.fields[0] == addr(BOB)
    assert second.fields[2] == Constr(1, (datum_hash(SUPPLEMENTAL_DATUM).payload,))
    assert info.fields[3] == 1_000_000


def test_mint_has_no_ada_entry_and_sorted_policies(info):
    mint = info.fields[4]
    assert [policy for policy, _ in mint.pairs] == sorted([h(POLICY_A), h(POLICY_B)])
    assert b"" not in dict(mint.pairs)
    assert dict(mint.pairs)[h(POLICY_A)] == DataMap(((b"a", 1), (b"x", 5)))


def test_certificates_as_tx_certs(info):
    stake = Constr(1, (h(STAKE_SCRIPT),))
    assert info.fields[5] == [
        Constr(0, (stake, NOTHING)),  # legacy registration: RegStaking, no deposit
        Constr(0, (Constr(0, (ALICE.key_hash.payload,)), just(2_000_000))),  # Conway, PV10
        Constr(2, (stake, Constr(0, (POOL.payload,)))),  # DelegStaking (DelegStake pool)
    ]


def test_conway_registration_shows_no_deposit_in_protocol_version_9():
    params = ProtocolParameters(protocol_version=(9, 0))
    ctx = TxContext(rich_tx(params), make_view(utxo(), params=params))
    certs = data_from_cbor(ctx.tx_info).fields[5]
    assert certs[1] == Constr(0, (Constr(0, (ALICE.key_hash.payload,)), NOTHING))


def test_withdrawals_keyed_by_credential_scripts_first(info):
    assert info.fields[6] == DataMap(
        (
            (Constr(1, (h(STAKE_SCRIPT),)), 0),
            (Constr(0, (ALICE.key_hash.payload,)), 0),
        )
    )


def test_valid_range_lower_inclusive_upper_exclusive_in_posix_ms(info):
    assert info.fields[7] == Constr(
        0,
        (
            Constr(0, (Constr(1, (ZERO_TIME_MS + 900_000,)), TRUE)),
            Constr(0, (Constr(1, (ZERO_TIME_MS + 2_000_000,)), FALSE)),
        ),
    )


@pytest.mark.parametrize(
    ("start", "ttl", "lower", "upper"),
    [
        (None, None, Constr(0, (Constr(0), TRUE)), Constr(0, (Constr(2), TRUE))),
        (
            5,
            None,
            Constr(0, (Constr(1, (ZERO_TIME_MS + 5_000,)), TRUE)),
            Constr(0, (Constr(2), TRUE)),
        ),
        (
            None,
            9,
            Constr(0, (Constr(0), TRUE)),
            Constr(0, (Constr(1, (ZERO_TIME_MS + 9_000,)), FALSE)),
        ),
    ],
)
def test_valid_range_closures(start, ttl, lower, upper):
    body = TransactionBody(inputs=[KEY_IN], outputs=[], fee=0, validity_start=start, ttl=ttl)
    ctx = TxContext(seal(body), make_view(utxo()))
    assert data_from_cbor(ctx.tx_info).fields[7] == Constr(0, (lower, upper))


def test_signatories_sorted_and_id_bare(info, ctx):
    assert info.fields[8] == sorted([ALICE.key_hash.payload, BOB.key_hash.payload])
    assert info.fields[11] == ctx.dtx.id


def test_redeemers_in_ledger_tag_order_not_constructor_order(info):
    keys = [purpose for purpose, _ in info.fields[9].pairs]
    # Spending (constructor 1) x3, then Minting (0) x2, then Certifying (3), then Rewarding (2)
    assert [k.index for k in keys] == [1, 1, 1, 0, 0, 3, 2]
    spends = sorted_refs(INLINE_IN, HASHED_IN, BARE_IN, KEY_IN)
    spent = [k.fields[0] for k in keys[:3]]
    assert spent == [Constr(0, (r.transaction_id.payload, r.index)) for r in spends if r != KEY_IN]
    assert [k.fields[0] for k in keys[3:5]] == sorted([h(POLICY_A), h(POLICY_B)])
    assert keys[5].fields[0] == 2  # the certificate's index, then the certificate
    assert keys[6] == Constr(2, (Constr(1, (h(STAKE_SCRIPT),)),))
    values = dict(info.fields[9].pairs)
    assert values[keys[6]] == 40


def test_datums_by_hash_and_governance_fields(info):
    hashes = sorted([datum_hash(HASHED_DATUM).payload, datum_hash(SUPPLEMENTAL_DATUM).payload])
    assert [k for k, _ in info.fields[10].pairs] == hashes
    assert dict(info.fields[10].pairs)[datum_hash(HASHED_DATUM).payload] == Constr(1, (b"hashed",))
    assert info.fields[12] == DataMap(())  # votes
    assert info.fields[13] == []  # proposals
    assert info.fields[14] == just(1_000)  # current treasury
    assert info.fields[15] == just(5)  # donation


def context_for(ctx: TxContext, tag: int, target) -> Constr:
    purpose = next(p for p in ctx.purposes[tag] if p.target == target)
    redeemer_ = next(r for r in ctx.redeemers if (r.tag, r.index) == (tag, purpose.index))
    [context] = data_from_cbor(ctx.arguments(3, purpose, redeemer_))
    return context


def test_spending_script_info_carries_the_optional_datum(ctx):
    inline = context_for(ctx, SPEND, INLINE_IN)
    assert inline.index == 0 and len(inline.fields) == 3
    assert inline.fields[1] == 10  # the redeemer, raw
    out = Constr(0, (INLINE_IN.transaction_id.payload, 0))
    assert inline.fields[2] == Constr(1, (out, just(Constr(0, (7,)))))
    hashed = context_for(ctx, SPEND, HASHED_IN)
    assert hashed.fields[2].fields[1] == just(Constr(1, (b"hashed",)))
    bare = context_for(ctx, SPEND, BARE_IN)
    assert bare.fields[2].fields[1] == NOTHING


def test_other_script_infos(ctx):
    assert context_for(ctx, MINT, h(POLICY_A)).fields[2] == Constr(0, (h(POLICY_A),))
    [cert_purpose] = [p for p in ctx.purposes[PUBLISH] if p.script_hash]
    assert cert_purpose.index == 2
    publish = context_for(ctx, PUBLISH, cert_purpose.target)
    assert publish.fields[2] == Constr(
        3, (2, Constr(2, (Constr(1, (h(STAKE_SCRIPT),)), Constr(0, (POOL.payload,)))))
    )
    account = stake_address(plutus_script_hash(STAKE_SCRIPT))
    withdraw = context_for(ctx, WITHDRAW, account)
    assert withdraw.fields[2] == Constr(2, (Constr(1, (h(STAKE_SCRIPT),)),))


def test_script_needs(ctx):
    """Legacy registration and key credentials need no script; the rest name their script."""
    needed = {(p.tag, p.index): p.script_hash for p in ctx.needed()}
    spends = sorted_refs(INLINE_IN, HASHED_IN, BARE_IN, KEY_IN)
    assert (SPEND, spends.index(KEY_IN)) not in needed
    assert (PUBLISH, 0) not in needed and (PUBLISH, 1) not in needed
    assert needed[(PUBLISH, 2)] == h(STAKE_SCRIPT)
    assert needed[(WITHDRAW, 0)] == h(STAKE_SCRIPT)
    assert (WITHDRAW, 1) not in needed
    assert len(needed) == 7


# --- pure translations ------------------------------------------------------------------


KEY, SCRIPT = [0, b"k" * 28], [1, b"s" * 28]
PUB, SCR = Constr(0, (b"k" * 28,)), Constr(1, (b"s" * 28,))


@pytest.mark.parametrize(
    ("cert", "expected"),
    [
        ([0, KEY], Constr(0, (PUB, NOTHING))),
        ([1, SCRIPT], Constr(1, (SCR, NOTHING))),
        ([2, KEY, b"p" * 28], Constr(2, (PUB, Constr(0, (b"p" * 28,))))),
        (
            [3, b"p" * 28, b"v" * 32, 1, 2, [0, 1], b"\xe0" + b"r" * 28, [], [], None],
            Constr(7, (b"p" * 28, b"v" * 32)),
        ),
        ([4, b"p" * 28, 300], Constr(8, (b"p" * 28, 300))),
        ([7, KEY, 2_000_000], Constr(0, (PUB, just(2_000_000)))),
        ([8, SCRIPT, 2_000_000], Constr(1, (SCR, just(2_000_000)))),
        ([9, KEY, [2]], Constr(2, (PUB, Constr(1, (Constr(1),))))),
        (
            [10, KEY, b"p" * 28, [1, b"d" * 28]],
            Constr(2, (PUB, Constr(2, (b"p" * 28, Constr(0, (Constr(1, (b"d" * 28,)),)))))),
        ),
        ([11, KEY, b"p" * 28, 5], Constr(3, (PUB, Constr(0, (b"p" * 28,)), 5))),
        ([12, KEY, [3], 5], Constr(3, (PUB, Constr(1, (Constr(2),)), 5))),
        (
            [13, KEY, b"p" * 28, [0, b"d" * 28], 5],
            Constr(3, (PUB, Constr(2, (b"p" * 28, Constr(0, (Constr(0, (b"d" * 28,)),)))), 5)),
        ),
        ([14, KEY, SCRIPT], Constr(9, (PUB, SCR))),
        ([15, SCRIPT, None], Constr(10, (SCR,))),
        ([16, SCRIPT, 500, None], Constr(4, (SCR, 500))),
        ([17, KEY, 500], Constr(6, (PUB, 500))),
        ([18, KEY, None], Constr(5, (PUB,))),
    ],
)
def test_tx_cert_constructors(cert, expected):
    assert tx_cert(cert, 10) == expected


def test_tx_cert_tags_on_the_wire():
    """Constructors 7-10 use the 1280+ tags; 0-6 use 121+."""
    decoded = cbor2.loads(encode_data(tx_cert([4, b"p" * 28, 3], 10)))
    assert decoded.tag == 1280 + 1
    decoded = cbor2.loads(encode_data(tx_cert([17, KEY, 1], 10)))
    assert decoded.tag == 121 + 6


def test_voters_and_their_ledger_order():
    assert voter((0, b"k" * 28)) == Constr(0, (PUB,))
    assert voter((1, b"s" * 28)) == Constr(0, (SCR,))
    assert voter((3, b"s" * 28)) == Constr(1, (SCR,))
    assert voter((4, b"p" * 28)) == Constr(2, (b"p" * 28,))


def test_votes_map_orders_committee_drep_pool_scripts_first():
    gaid = (b"g" * 32, 0)
    body = cbor2.loads(TransactionBody(inputs=[KEY_IN], outputs=[], fee=0).to_cbor())
    body[19] = {
        (4, b"a" * 28): {gaid: [1, None]},
        (2, b"a" * 28): {gaid: [0, None]},
        (3, b"z" * 28): {gaid: [2, None]},
        (0, b"b" * 28): {(b"h" * 32, 1): [1, None], (b"g" * 32, 3): [0, None]},
        (1, b"c" * 28): {gaid: [1, None]},
    }
    ctx = TxContext(decode_tx(cbor2.dumps([body, {}, True, None])), make_view(utxo()))
    votes = data_from_cbor(ctx.tx_info).fields[12]
    assert [k for k, _ in votes.pairs] == [
        Constr(0, (Constr(1, (b"c" * 28,)),)),
        Constr(0, (Constr(0, (b"b" * 28,)),)),
        Constr(1, (Constr(1, (b"z" * 28,)),)),
        Constr(1, (Constr(0, (b"a" * 28,)),)),
        Constr(2, (b"a" * 28,)),
    ]
    committee_votes = votes.pairs[1][1]
    assert committee_votes == DataMap(
        ((Constr(0, (b"g" * 32, 3)), Constr(0)), (Constr(0, (b"h" * 32, 1)), Constr(1)))
    )
    assert [p.script_hash for p in ctx.purposes[4]] == [b"c" * 28, None, b"z" * 28, None, None]


def test_proposals_drop_the_anchor():
    account = b"\xe0" + b"r" * 28
    anchor = ["https://x", b"a" * 32]
    info_action = proposal_procedure([100, account, [6], anchor])
    assert info_action == Constr(0, (100, Constr(0, (b"r" * 28,)), Constr(6)))
    withdrawals = governance_action([2, {account: 5, b"\xf0" + b"s" * 28: 6}, b"g" * 28])
    assert withdrawals == Constr(
        2,
        (
            DataMap(((Constr(1, (b"s" * 28,)), 6), (Constr(0, (b"r" * 28,)), 5))),
            just(b"g" * 28),
        ),
    )
    gaid = [b"t" * 32, 2]
    assert governance_action([1, gaid, [11, 0]]) == Constr(
        1, (just(Constr(0, (b"t" * 32, 2))), Constr(0, (11, 0)))
    )
    assert governance_action([5, None, [anchor, None]]) == Constr(
        5, (NOTHING, Constr(0, (NOTHING,)))
    )


def test_update_committee_and_parameter_change():
    from fractions import Fraction

    action = governance_action(
        [4, None, [KEY, SCRIPT], {tuple(KEY): 10, tuple(SCRIPT): 20}, Fraction(2, 3)]
    )
    assert action == Constr(
        4, (NOTHING, [SCR, PUB], DataMap(((SCR, 20), (PUB, 10))), Constr(0, (2, 3)))
    )
    change = governance_action([0, None, {17: 4310, 0: 44, 9: Fraction(3, 10)}, b"g" * 28])
    assert change == Constr(
        0, (NOTHING, DataMap(((0, 44), (9, [3, 10]), (17, 4310))), just(b"g" * 28))
    )


# --- Data encoding ----------------------------------------------------------------------


def test_encode_data_follows_plutus_cbor():
    assert encode_data(Constr(0)) == bytes.fromhex("d87980")
    assert encode_data(Constr(1, (5,))) == bytes.fromhex("d87a9f05ff")
    assert encode_data(Constr(7)) == bytes.fromhex("d9050080")
    assert encode_data(Constr(200)) == bytes.fromhex("d86682") + bytes.fromhex("18c880")
    assert encode_data([]) == b"\x80"
    assert encode_data(DataMap(((1, b"a"),))) == bytes.fromhex("a1014161")
    long = bytes(100)
    assert encode_data(long) == b"\x5f\x58\x40" + long[:64] + b"\x58\x24" + long[64:] + b"\xff"
    assert cbor2.loads(encode_data(2**70)) == 2**70
    assert cbor2.loads(encode_data(-(2**70))) == -(2**70)
    assert encode_data(RawData(b"\x01")) == b"\x01"
    with pytest.raises(TypeError):
        encode_data(True)


def test_witness_datums_are_hashed_from_original_bytes():
    """A datum sent with a definite-length list hashes as sent, not as re-encoded."""
    body = TransactionBody(inputs=[KEY_IN], outputs=[], fee=0)
    dtx = seal(body, plutus_data=[RawPlutusData(CBORTag(121, [1, 2]))], integrity=False)
    ctx = TxContext(dtx, make_view(utxo()))
    [(digest, raw)] = ctx.datums.items()
    assert digest == hashlib.blake2b(raw, digest_size=32).digest()
    assert cbor2.loads(raw) == CBORTag(121, [1, 2])


@pytest.mark.parametrize(
    ("cert", "script"),
    [
        ([0, SCRIPT], None),  # legacy registration: no witness at all
        ([7, SCRIPT, 2_000_000], b"s" * 28),  # Conway registration with deposit: witnessed
        ([1, SCRIPT], b"s" * 28),
        ([2, SCRIPT, b"p" * 28], b"s" * 28),
        ([2, KEY, b"p" * 28], None),  # key credentials are witnessed by signatures
        ([4, b"p" * 28, 3], None),
        ([14, SCRIPT, KEY], b"s" * 28),
        ([18, SCRIPT, None], b"s" * 28),
    ],
)
def test_which_certificates_need_a_script(cert, script):
    assert cert_script_hash(cert) == script


# --- Plutus V1 / V2 ---------------------------------------------------------------------


def legacy_tx(**fields) -> tuple[TxContext, TransactionBody]:
    """Spends the three script inputs and Alice's, mints with POLICY_A, withdraws from Alice."""
    minted = MultiAsset({plutus_script_hash(POLICY_A): Asset({AssetName(b"x"): 5})})
    body = TransactionBody(
        inputs=[KEY_IN, HASHED_IN, BARE_IN],
        outputs=[TransactionOutput(ALICE.address, Value(3_000_000, minted))],
        fee=1_000_000,
        mint=minted,
        certificates=[StakeRegistration(StakeCredential(ALICE.key_hash))],
        withdraws=Withdrawals({stake_address(ALICE.key_hash): 0}),
        **fields,
    )
    spends = sorted_refs(KEY_IN, HASHED_IN, BARE_IN)
    dtx = seal(
        body,
        plutus_data=[HASHED_DATUM],
        redeemer=[redeemer(RedeemerTag.SPEND, spends.index(HASHED_IN), 10)],
        integrity=False,
    )
    return TxContext(dtx, make_view(utxo())), body


def wrapped_ref(ref) -> Constr:
    return Constr(0, (Constr(0, (ref.transaction_id.payload,)), ref.index))


def test_v2_tx_info_wraps_txid_and_keeps_zero_ada_in_mint():
    ctx, _ = legacy_tx(reference_inputs=[REFERENCE_IN])
    info = data_from_cbor(ctx.legacy_tx_info(2))
    assert len(info.fields) == 12
    inputs, references, outputs, fee, mint, certs, wdrl, _, _, redeemers, data, tx_id = info.fields
    assert [i.fields[0] for i in inputs] == [
        wrapped_ref(r) for r in sorted_refs(KEY_IN, HASHED_IN, BARE_IN)
    ]
    assert references[0].fields[0] == wrapped_ref(REFERENCE_IN)
    assert len(outputs[0].fields) == 4  # V2 TxOut: address, value, datum, reference script
    assert fee == DataMap((ada(1_000_000),))
    assert mint == DataMap((ada(0), (h(POLICY_A), DataMap(((b"x", 5),)))))
    staking_hash = Constr(0, (Constr(0, (ALICE.key_hash.payload,)),))
    assert certs == [Constr(0, (staking_hash,))]  # DCertDelegRegKey
    assert wdrl == DataMap(((staking_hash, 0),))
    assert [k for k, _ in redeemers.pairs] == [Constr(1, (wrapped_ref(HASHED_IN),))]
    assert [k for k, _ in data.pairs] == [datum_hash(HASHED_DATUM).payload]
    assert tx_id == Constr(0, (ctx.dtx.id,))


def test_v2_spending_arguments_are_datum_redeemer_context():
    ctx, _ = legacy_tx()
    [spend] = [p for p in ctx.purposes[SPEND] if p.target == HASHED_IN]
    datum, redeemer_, context = data_from_cbor(ctx.arguments(2, spend, ctx.redeemers[0]))
    assert datum == Constr(1, (b"hashed",))
    assert redeemer_ == 10
    assert context.fields[1] == Constr(1, (wrapped_ref(HASHED_IN),))
    [bare] = [p for p in ctx.purposes[SPEND] if p.target == BARE_IN]
    with pytest.raises(ContextError, match="needs a datum"):
        ctx.arguments(2, bare, ctx.redeemers[0])


def test_v1_tx_info_has_ten_fields_and_lists_of_pairs():
    ctx, _ = legacy_tx()
    info = data_from_cbor(ctx.legacy_tx_info(1))
    assert len(info.fields) == 10
    inputs, outputs, _, _, _, wdrl, _, _, data, tx_id = info.fields
    by_ref = {i.fields[0]: i.fields[1] for i in inputs}
    hashed = by_ref[wrapped_ref(HASHED_IN)]
    assert hashed.fields[2] == just(datum_hash(HASHED_DATUM).payload)  # V1 TxOut: Maybe hash
    assert len(outputs[0].fields) == 3
    staking_hash = Constr(0, (Constr(0, (ALICE.key_hash.payload,)),))
    assert wdrl == [Constr(0, (staking_hash, 0))]
    assert data == [Constr(0, (datum_hash(HASHED_DATUM).payload, Constr(1, (b"hashed",))))]
    assert tx_id == Constr(0, (ctx.dtx.id,))


def test_what_v1_and_v2_cannot_see():
    ctx, _ = legacy_tx(reference_inputs=[REFERENCE_IN])
    with pytest.raises(ContextError, match="reference inputs"):
        ctx.legacy_tx_info(1)
    ctx = TxContext(rich_tx(), make_view(utxo()))  # inline datums, Conway certificate, treasury
    with pytest.raises(ContextError, match="Conway certificates") as caught:
        ctx.legacy_tx_info(2)
    assert "treasury" in str(caught.value)
    with pytest.raises(ContextError, match="inline datums"):
        ctx.legacy_tx_info(1)
