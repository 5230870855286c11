"""Spent request nonces in the market's database: every API process sharing it refuses the
second use of a nonce, whichever process saw the first."""

from __future__ import annotations

import dataclasses

from sqlalchemy import Connection, Engine, delete, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from offchain.market.db import writing
from offchain.market.models import Nonce
from offchain.protocol.api.signed_request import ReplayedRequest


class DatabaseNonces:
    """The signed requests' NonceStore (`offchain.protocol.api.signed_request`): the table's
    (signer, nonce) unique constraint decides, so two processes cannot both claim one nonce."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(self, signer: str, nonce: str, *, keep_until_ms: int, now_ms: int) -> bool:
        """Spend the nonce in its own transaction (spent whatever the request's outcome);
        nonces whose requests are stale by now go in the same transaction."""
        with writing(self.engine), Session(self.engine) as session:
            session.execute(delete(Nonce).where(col(Nonce.keep_until_ms) < now_ms))
            session.add(
                Nonce(signer=signer, nonce=nonce, seen_at_ms=now_ms, keep_until_ms=keep_until_ms)
            )
            try:
                session.commit()
            except IntegrityError:
                return False
        return True


@dataclasses.dataclass
class PendingNonce:
    """A NonceStore that spends nothing yet: it keeps the verified request's nonce for the
    caller to spend in the transaction that stores what the request asked for (`spend`), so a
    signed job request is one write, not two."""

    row: dict[str, str | int] | None = None

    def claim(self, signer: str, nonce: str, *, keep_until_ms: int, now_ms: int) -> bool:
        self.row = {
            "signer": signer, "nonce": nonce, "seen_at_ms": now_ms, "keep_until_ms": keep_until_ms
        }  # fmt: skip
        return True

    def spend(self, connection: Connection) -> None:
        """Spend the nonce within `connection`'s transaction; ReplayedRequest (the caller's
        transaction then rolls back whole) when the signer spent it before."""
        assert self.row is not None, "spend a nonce only after its request verified"
        try:
            connection.execute(insert(Nonce), [self.row])
        except IntegrityError as exc:
            raise ReplayedRequest(
                "this nonce was used before: a replayed request", "nonce"
            ) from exc


def forget_stale(engine: Engine, now_ms: int) -> None:
    """Nonces whose requests are stale by now go (scheduled work: a replay of one is refused
    as stale before its nonce is looked at)."""
    with writing(engine), engine.begin() as connection:
        connection.execute(delete(Nonce).where(col(Nonce.keep_until_ms) < now_ms))
