"""A provider or a channel named by the first characters of its id, as the CLI prints them
(16 hex digits): the explorer's pages and its search take a unique prefix, as they take a
job's (`job_ids`)."""

from __future__ import annotations

import re

from sqlmodel import Session, col, select

from offchain.market.errors import Conflict, NotFound
from offchain.market.services.job_ids import MIN_PREFIX

HEX_ID = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},56}}")


def full_id(session: Session, column: str, text: str, what: str) -> str:
    """The one id of `column` (a model's id column, `Provider.id`) that `text` is or starts;
    NotFound when none is, Conflict when a prefix names several."""
    key = text.strip().lower()
    if not HEX_ID.fullmatch(key):
        raise NotFound(f"no {what} {text[:80]!r}: give its id or a unique prefix of it (at "
                       f"least {MIN_PREFIX} hex digits)", f"{what}_id")  # fmt: skip
    found = session.exec(
        select(col(column)).where(col(column).startswith(key, autoescape=True)).limit(2)
    ).all()
    if not found:
        raise NotFound(f"no {what} {key}", f"{what}_id")
    if len(found) > 1 and key not in found:
        raise Conflict(f"{key} names several {what}s: give more of the id", f"{what}_id")
    return key if key in found else found[0]
