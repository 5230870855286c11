"""Spent request nonces in the market's database: every API process sharing it refuses the
second use of a nonce, whichever process saw the first."""

from __future__ import annotations

from sqlalchemy import Engine, delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from offchain.market.models import Nonce


class DatabaseNonces:
    """The signed requests' NonceStore (`offchain.protocol.signed_request`): the table's
    (signer, nonce) unique constraint decides, so two processes cannot both claim one nonce."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(self, signer: str, nonce: str, *, keep_until_ms: int, now_ms: int) -> bool:
        """Spend the nonce in its own transaction (spent whatever the request's outcome);
        nonces whose requests are stale by now go in the same transaction."""
        with Session(self.engine) as session:
            session.execute(delete(Nonce).where(col(Nonce.keep_until_ms) < now_ms))
            session.add(
                Nonce(signer=signer, nonce=nonce, seen_at_ms=now_ms, keep_until_ms=keep_until_ms)
            )
            try:
                session.commit()
            except IntegrityError:
                return False
        return True
