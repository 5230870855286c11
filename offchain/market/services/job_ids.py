"""Which job a person means: people copy a job id's first characters, the escrow `TXID#IX` the
chain shows, or the spec digest the escrow's datum calls its job_id. One resolver for the
signed `/jobs/{id}` routes, the explorer's job page and its search."""

from __future__ import annotations

import re

from sqlalchemy import func
from sqlmodel import Session, col, select

from offchain.chain.utxo import OUT_REF_PATTERN, format_out_ref, parse_out_ref
from offchain.market.errors import Conflict, NotFound
from offchain.market.models import Job

MIN_PREFIX = 8  # hex digits: 4 billion ids apart, short enough to type
JOB_ID = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},32}}")
ESCROW_REF = re.compile(OUT_REF_PATTERN)
SPEC_DIGEST = re.compile(r"[0-9a-f]{64}")
WANTED = (
    "a job id, a unique prefix of one (at least 8 hex digits), its escrow TXID#IX or its "
    "spec digest"
)


def resolve(session: Session, text: str) -> Job:
    """The one job `text` names; NotFound when none does, Conflict (naming how many) when a
    prefix or a spec digest names several."""
    key = text.strip().lower()
    if ESCROW_REF.fullmatch(key):
        query = select(Job).where(Job.escrow_ref == format_out_ref(parse_out_ref(key)))
    elif SPEC_DIGEST.fullmatch(key):
        query = select(Job).where(Job.spec_digest == key)
    elif JOB_ID.fullmatch(key):
        exact = session.get(Job, key)
        if exact is not None:
            return exact
        query = select(Job).where(col(Job.id).startswith(key, autoescape=True))
    else:
        raise NotFound(f"no job {text[:80]!r}: give {WANTED}", "job_id")
    found = session.exec(query.limit(2)).all()
    if not found:
        raise NotFound(f"no job {key}: give {WANTED}", "job_id")
    if len(found) > 1:
        count = session.exec(select(func.count()).select_from(query.subquery())).one()
        raise Conflict(f"{key} names {count} jobs: give more of the job id", "job_id")
    return found[0]
