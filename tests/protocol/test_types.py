"""offchain/protocol's types encode exactly what the validators read: every datum and
redeemer conforms to the committed CIP-57 blueprint, and every record decodes as the
contracts' own OpShin class and re-encodes to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cbor2
import pytest
from pycardano import (
    Address,
    IndefiniteList,
    Network,
    PaymentSigningKey,
    PlutusData,
    ScriptHash,
)

from contracts import onchain
from devnet.script_context import Constr, encode_data
from offchain.protocol.ledger import types
from offchain.protocol.ledger.addresses import to_plutus

BUILD = Path(__file__).resolve().parents[2] / "contracts" / "build"
KEY = PaymentSigningKey.generate().to_verification_key()
REF = types.TxOutRef(b"\x07" * 32, 3)
ADDRESS = to_plutus(Address(KEY.hash(), ScriptHash(b"\x05" * 28), network=Network.TESTNET))
ESCROW = types.EscrowDatum(
    ADDRESS, to_plutus(Address(KEY.hash(), network=Network.TESTNET)), KEY.payload, 2_000,
    3_600, 1_800_000_000_000, 60_000, b"\x01" * 32, 2_000_000,
)  # fmt: skip
BOND = types.BondDatum(ADDRESS, KEY.payload, types.Just(1_800_000_000_000))
SETTLE_CLAIM = types.SettleClaim(b"\x02" * 32, b"\x04" * 64, KEY.payload)
SETTLE_RECEIPT = types.SettleReceipt(b"\x03" * 32, b"\x05" * 64)
BATCH = types.BatchSettle(
    [10, 0, 0, 1, -1, 0, 3_600, 1, -1],
    [SETTLE_CLAIM, types.SettleClaim(b"", b"s", b"")],
    [SETTLE_RECEIPT],
    2,
)
CLAIM = types.ClaimPayload(
    b"UNCHAINED/claim/v1", 0, b"\x06" * 28, b"n" * 32,
    IndefiniteList([REF, 10, types.TxOutRef(b"\x07" * 32, 1), 0]),
)  # fmt: skip
TERMS = types.ChannelTerms(ADDRESS, ESCROW.provider, KEY.payload, 3_600_000, REF)
CHANNEL = types.ChannelDatum(KEY.payload, b"\x0b" * 28, b"\x0c" * 28, 5_000_000, -1)
BATCH_CLAIM = types.BatchClaim([0, 1, 0], [b"\x0d" * 64, b"\x0e" * 64, b"\x0f" * 64], 2)
IOU = types.Iou(b"UNCHAINED/iou/v1", 0, b"\x06" * 28, b"\x0c" * 28, 5_000_000)

# (validator, "datum" or redeemer title, our value, the contracts' class)
CASES = [
    ("escrow", "escrow.spend", "datum", ESCROW, onchain.EscrowDatum),
    ("escrow", "escrow.spend", "redeemer", types.Settle(), onchain.Settle),
    ("escrow", "escrow.spend", "redeemer", types.Refund(1, 4), onchain.Refund),
    ("escrow", "escrow.spend", "redeemer", types.Cancel(0, 5), onchain.Cancel),
    ("escrow", "escrow.spend", "redeemer", types.Start(2, 0), onchain.Start),
    ("settle", "settle.withdraw", "redeemer", BATCH, onchain.BatchSettle),
    ("settle_reference", "settle_reference.withdraw", "redeemer", BATCH, onchain.BatchSettle),
    ("bond", "bond.spend", "datum", BOND, onchain.BondDatum),
    (
        "bond",
        "bond.spend",
        "datum",
        types.BondDatum(ADDRESS, KEY.payload, types.Nothing()),
        onchain.BondDatum,
    ),
    ("bond", "bond.spend", "redeemer", types.TopUp(0), onchain.TopUp),
    ("bond", "bond.spend", "redeemer", types.BeginUnbond(1), onchain.BeginUnbond),
    ("bond", "bond.spend", "redeemer", types.Withdraw(), onchain.Withdraw),
    ("bond", "bond.spend", "redeemer", types.Slash(2, b"\x09" * 64, 1, 2), onchain.Slash),
    ("channel", "channel.spend", "datum", CHANNEL, onchain.ChannelDatum),
    (
        "channel",
        "channel.spend",
        "datum",
        types.ChannelDatum(KEY.payload, b"\x0b" * 28, b"\x0c" * 28, 0, 1_800_000_000_000),
        onchain.ChannelDatum,
    ),
    ("channel", "channel.spend", "redeemer", types.ChannelClaim(), onchain.ChannelClaim),
    ("channel", "channel.spend", "redeemer", types.ChannelTopUp(0, 1, TERMS), onchain.ChannelTopUp),
    ("channel", "channel.spend", "redeemer", types.StartClose(1, 0, TERMS), onchain.StartClose),
    ("channel", "channel.spend", "redeemer", types.Drain(0, 2, TERMS), onchain.Drain),
    ("channel", "channel.spend", "redeemer", types.ProviderEnd(2, 0, TERMS), onchain.ProviderEnd),
    ("channel", "channel.spend", "redeemer", types.MutualClose(TERMS), onchain.MutualClose),
    ("claim", "claim.withdraw", "redeemer", BATCH_CLAIM, onchain.BatchClaim),
]


def conforms(value: Any, schema: dict[str, Any]) -> bool:
    """Whether decoded CBOR `value` has the shape a CIP-57 `schema` describes."""
    if "anyOf" in schema:
        return any(conforms(value, option) for option in schema["anyOf"])
    kind = schema.get("dataType")
    if kind == "constructor":
        return (
            isinstance(value, cbor2.CBORTag)
            and value.tag == 121 + schema["index"]
            and len(value.value) == len(schema["fields"])
            and all(conforms(v, f) for v, f in zip(value.value, schema["fields"], strict=True))
        )
    if kind == "bytes":
        return isinstance(value, bytes)
    if kind == "integer":
        return isinstance(value, int)
    if kind == "list":
        return isinstance(value, list) and all(conforms(v, schema["items"]) for v in value)
    return kind is None  # untyped: any Data


def schema(validator: str, title: str, part: str) -> dict[str, Any]:
    blueprint = json.loads((BUILD / validator / "plutus.json").read_text())
    [entry] = [v for v in blueprint["validators"] if v["title"] == title]
    return entry[part]["schema"]


@pytest.mark.parametrize(("validator", "title", "part", "value", "theirs"), CASES)
def test_datums_and_redeemers_match_the_blueprint_and_the_contracts_classes(
    validator: str, title: str, part: str, value: PlutusData, theirs: type[PlutusData]
):
    raw = value.to_cbor()
    assert conforms(cbor2.loads(raw), schema(validator, title, part))
    assert theirs.from_cbor(raw).to_cbor() == raw


RECORDS = [  # (ours, the contracts' class): the signed payloads, tags and redeemer parts
    (types.Payout(types.PayoutKind.CANCEL, REF), onchain.Payout),
    (types.SlashPayout(REF, types.TxOutRef(b"\x07" * 32, 1)), onchain.SlashPayout),
    (CLAIM, onchain.Claim),
    (types.Acceptance(b"d", 1, b"\x06" * 28, REF, b"j" * 32, b"\x08" * 28), onchain.Acceptance),
    (SETTLE_CLAIM, onchain.SettleClaim),
    (SETTLE_RECEIPT, onchain.SettleReceipt),
    (TERMS, onchain.ChannelTerms),
    (IOU, onchain.Iou),
    (types.Payout(types.PayoutKind.DRAIN, REF), onchain.Payout),
    (types.Payout(types.PayoutKind.END, REF), onchain.Payout),
]


@pytest.mark.parametrize(("ours", "theirs"), RECORDS, ids=lambda v: type(v).__name__)
def test_payouts_claims_acceptances_settle_entries_terms_and_ious_are_the_contracts_records(
    ours, theirs
):
    raw = ours.to_cbor()
    assert theirs.from_cbor(raw).to_cbor() == raw
    assert type(ours).from_cbor(raw).to_cbor() == raw


def test_a_claim_encodes_as_serialise_data_does():
    """What a provider signs is what the settle scripts rebuild and serialise: a non-empty
    list indefinite-length, the whole Claim as the ledger's serialiseData writes it."""
    flat = [Constr(0, (REF.tx_id, REF.index)), 10, Constr(0, (b"\x07" * 32, 1)), 0]
    ledger = Constr(0, (b"UNCHAINED/claim/v1", 0, b"\x06" * 28, b"n" * 32, flat))
    assert CLAIM.to_cbor() == encode_data(ledger)


def test_every_protocol_type_the_contracts_name_is_checked():
    """Each PlutusData of types.py that onchain.py defines too (the ledger's own types come
    from OpShin's prelude there) is one of the cases above."""
    checked = {type(value).__name__ for *_, value, _ in CASES} | {
        type(ours).__name__ for ours, _ in RECORDS
    }
    shared = {
        name
        for name, value in vars(types).items()
        if isinstance(value, type)
        and issubclass(value, PlutusData)
        and getattr(getattr(onchain, name, None), "__module__", None) == onchain.__name__
    }
    assert shared - checked == set()


def test_terms_and_an_iou_encode_as_serialise_data_does():
    """A channel's id hashes its terms' bytes and a renter signs its IOU's: both must be what
    the channel and claim scripts rebuild and serialise."""
    stake = Constr(0, (Constr(0, (Constr(1, (b"\x05" * 28,)),)),))  # Just (StakingHash script)
    address = Constr(0, (Constr(0, (KEY.hash().payload,)), stake))
    provider = Constr(0, (Constr(0, (KEY.hash().payload,)), Constr(1)))
    ref = Constr(0, (REF.tx_id, REF.index))
    assert TERMS.to_cbor() == encode_data(
        Constr(0, (address, provider, KEY.payload, 3_600_000, ref))
    )
    ledger = Constr(0, (b"UNCHAINED/iou/v1", 0, b"\x06" * 28, b"\x0c" * 28, 5_000_000))
    assert IOU.to_cbor() == encode_data(ledger)
