"""Providers' records from the chain index (`services/reputation`): what each indexed
transaction ended (settled for units or none, refunded, cancelled, a bond slashed), named by
the key in the escrow's or bond's datum, never by an output's address; counted in the same
database transaction and counted again after a rollback; and matching over real HTTP: at equal
price the better record is quoted, `min_delivered_percent` leaves out a provider below it or
with no record (and says so), and the offer search shows each provider's record."""

from __future__ import annotations

import json

import pytest
from pycardano import PaymentSigningKey
from sqlmodel import Session

from offchain.market.db import make_engine
from offchain.market.models import ChainTxOut, ProviderReputation, ReputationKind
from offchain.market.services import reputation
from offchain.market.settings import MarketSettings
from tests.market.client import Party
from tests.market.database import engine_at_head
from tests.market.test_lifecycle import PRICE, job_request
from tests.market.test_offers import offer

K = ReputationKind
E = reputation.Ending


def _vkey() -> tuple[str, str]:
    """A provider's vkey (hex) and its id."""
    vkey = PaymentSigningKey.generate().to_verification_key()
    return vkey.payload.hex(), vkey.hash().payload.hex()


def _out(ref: str, script: str, vkey: str | None, datum_type: str = "EscrowDatum") -> ChainTxOut:
    datum = {"type": datum_type, "provider": "addr_test1...", "provider_vkey": vkey}
    return ChainTxOut(ref=ref, slot=1, address="addr_test1", lovelace=10_000_000, script=script,
                      datum=json.dumps(datum) if vkey is not None else None)  # fmt: skip


def _view(settled: list[tuple[str, int]], spends: list[tuple[str, str | None]]) -> dict:
    return {
        "settled": [{"escrow": ref, "units": units} for ref, units in settled],
        "inputs": [{"ref": ref, "redeemer": {"type": kind} if kind else None}
                   for ref, kind in spends],
    }  # fmt: skip


def test_each_ending_is_its_providers_by_the_datums_key():
    (vkey_a, a), (vkey_b, b) = _vkey(), _vkey()
    spent = {
        "e1#0": _out("e1#0", "escrow", vkey_a), "e2#0": _out("e2#0", "escrow", vkey_a),
        "e3#0": _out("e3#0", "escrow", vkey_b), "e4#0": _out("e4#0", "escrow", vkey_b),
        "b1#0": _out("b1#0", "bond", vkey_b, "BondDatum"),
        "junk#0": _out("junk#0", "escrow", "not hex"),
        "nodatum#0": _out("nodatum#0", "escrow", None),
        "key#0": _out("key#0", None, vkey_a),  # a key output: no script, no ending
    }  # fmt: skip
    settle = _view([("e1#0", 300), ("e2#0", 0), ("junk#0", 5), ("gone#0", 7)],
                   [("e1#0", "Settle"), ("e2#0", "Settle")])  # fmt: skip
    assert reputation.endings(settle, spent) == [
        E(a, K.DELIVERED, "e1#0"), E(a, K.FAILED, "e2#0"),
    ]  # fmt: skip
    others = _view([], [("e3#0", "Refund"), ("e4#0", "Cancel"), ("b1#0", "Slash"),
                        ("nodatum#0", "Refund"), ("key#0", "Refund")])  # fmt: skip
    assert reputation.endings(others, spent) == [
        E(b, K.REFUNDED, "e3#0"), E(b, K.CANCELLED, "e4#0"),
        E(b, K.SLASHED, "b1#0"),
    ]  # fmt: skip


@pytest.fixture
def engine(tmp_path):
    engine = engine_at_head(MarketSettings(data_dir=tmp_path))
    yield engine
    engine.dispose()


def test_counts_follow_the_blocks_and_a_rollback_counts_again(engine):
    a, b = _vkey()[1], _vkey()[1]
    with Session(engine) as session:
        reputation.record(session, [E(a, K.DELIVERED, "e1#0"),
                                    E(b, K.REFUNDED, "e2#0")], "t1", 10)  # fmt: skip
        reputation.record(
            session, [E(a, K.DELIVERED, "e3#0"), E(a, K.DELIVERED, "e5#0")], "t2", 20
        )  # one batch settles two of a's escrows
        reputation.record(session, [E(a, K.FAILED, "e4#0"),
                                    E(b, K.SLASHED, "b#0")], "t3", 30)  # fmt: skip
        session.commit()
        got = reputation.of(session, [a, b, "none"])
        assert (got[a].delivered, got[a].failed, got[a].delivered_percent) == (3, 1, 75)
        assert (got[b].refunded, got[b].slashed, got[b].delivered_percent) == (1, 1, 0)
        assert got["none"] == reputation.Reputation() and got["none"].delivered_percent == -1

        reputation.roll_back(session, 15)  # the blocks at 20 and 30 are gone
        session.commit()
        got = reputation.of(session, [a, b])
        assert (got[a].delivered, got[a].failed, got[a].delivered_percent) == (1, 0, 100)
        assert (got[b].refunded, got[b].slashed) == (1, 0)
        reputation.roll_back(session, 15)  # nothing after 15 any more: nothing changes
        assert session.get(ProviderReputation, a).delivered == 1  # type: ignore[union-attr]


def _set_record(settings: MarketSettings, provider: Party, delivered: int, refunded: int) -> None:
    """Write a provider's counts as the index would have (the counting is tested above)."""
    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            session.add(ProviderReputation(provider_id=provider.wallet.key_hash.payload.hex(),
                                           delivered=delivered, refunded=refunded))  # fmt: skip
            session.commit()
    finally:
        engine.dispose()


async def test_equal_prices_go_to_the_better_record_and_a_minimum_is_kept(http, settings):
    market = settings.identity
    new, poor, good = [await offer(http, market) for _ in range(3)]
    _set_record(settings, poor, delivered=1, refunded=1)
    _set_record(settings, good, delivered=19, refunded=1)
    consumer = Party.new(http, market)

    def provider_of(answer) -> str:
        assert answer.status_code == 201, answer.text
        return answer.json()["offer"]["provider_id"]

    good_id = good.wallet.key_hash.payload.hex()
    assert provider_of(await consumer.send("POST", "/jobs", job_request(consumer))) == good_id
    strict = {**job_request(consumer), "min_delivered_percent": 96}
    refused = await consumer.send("POST", "/jobs", strict)
    assert refused.status_code == 409, refused.text
    assert "the best record of those is 95% delivered" in refused.text, refused.text
    fifty = {**job_request(consumer), "min_delivered_percent": 50}
    assert provider_of(await consumer.send("POST", "/jobs", fifty)) == good_id

    found = (await http.get("/offers", params={"query": "delivered>=0"})).json()
    assert [o["provider_id"] for o in found["offers"]] == [good_id, poor.wallet.key_hash
                                                           .payload.hex()]  # fmt: skip
    everyone = (await http.get("/offers", params={"query": f"price<={PRICE}lovelace"})).json()
    records = everyone["records"]
    assert records[good_id]["delivered_percent"] == 95 and records[good_id]["refunded"] == 1
    assert records[new.wallet.key_hash.payload.hex()]["delivered_percent"] == -1
    assert [o["provider_id"] for o in everyone["offers"]][-1] == new.wallet.key_hash.payload.hex()
    bad = await consumer.send(
        "POST", "/jobs", {**job_request(consumer), "min_delivered_percent": 101}
    )
    assert bad.status_code == 422 and "min_delivered_percent" in bad.text
