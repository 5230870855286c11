"""The database's nonce store: a nonce is spent once across every process sharing the database,
and forgotten once the request that carried it is stale."""

from __future__ import annotations

from sqlmodel import Session, select

from offchain.market.db import make_engine, upgrade
from offchain.market.models import Nonce
from offchain.market.services.nonces import DatabaseNonces


def test_a_nonce_is_spent_once_per_signer_and_forgotten_when_stale(settings):
    engine = make_engine(settings)
    upgrade(engine)
    first, second = DatabaseNonces(engine), DatabaseNonces(make_engine(settings))  # two processes
    assert first.claim("a", "n1", keep_until_ms=100, now_ms=0)
    assert not second.claim("a", "n1", keep_until_ms=100, now_ms=50)
    assert second.claim("b", "n1", keep_until_ms=100, now_ms=50)  # another signer's nonce
    assert first.claim("a", "n2", keep_until_ms=300, now_ms=101)  # n1 of both signers go
    with Session(engine) as session:
        assert [(n.signer, n.nonce) for n in session.exec(select(Nonce))] == [("a", "n2")]
    assert not first.claim("a", "n2", keep_until_ms=400, now_ms=300)
