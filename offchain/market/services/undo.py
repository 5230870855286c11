"""The chain follower's undo log: before it changes a row for a block, it records the columns it
changes as they were, so a rollback restores exactly what the chain took back and nothing the
API changed meanwhile (an acceptance, a receipt).

Each change gets its own record, restored newest first: a block that both funded and refunded
a job unwinds refunded -> funded -> quoted, each step a move the state machine allows, each
stored as a JobEvent caused by the chain.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from sqlalchemy import delete
from sqlmodel import Session, SQLModel, col, select

from offchain.market.errors import Conflict
from offchain.market.models import Bond, Cause, ChainUndo, Job, JobState, Provider, Settlement
from offchain.market.services import jobs

log = logging.getLogger(__name__)

# The columns the follower writes, per table, and each table's key column.
TRACKED: dict[type[SQLModel], tuple[str, tuple[str, ...]]] = {
    Job: ("id", ("state", "escrow_ref", "escrow_height", "settle_tx")),
    Provider: ("id", ("bond_ref", "bond_lovelace", "bond_state")),
    Bond: ("ref", ("spent_tx", "spent_as")),
    Settlement: ("tx_id", ("state",)),
}
MODELS = {model.__tablename__: model for model in TRACKED}


@dataclasses.dataclass(frozen=True)
class BlockAt:
    """The block whose effects are being recorded (or the point a rollback returns to)."""

    slot: int
    height: int
    id: str


def _key(row: SQLModel) -> str:
    return str(getattr(row, TRACKED[type(row)][0]))


def remember(session: Session, at: BlockAt, row: SQLModel, **as_if: Any) -> None:
    """Record `row`'s tracked columns before a change in block `at`; `as_if` overrides what
    the chain knew before (a job the API funded before its block was seen was, for the
    chain, still only quoted)."""
    before = {name: getattr(row, name) for name in TRACKED[type(row)][1]} | as_if
    session.add(_record(at, row, json.dumps(before)))


def remember_created(session: Session, at: BlockAt, row: SQLModel) -> None:
    """Record that block `at` created `row`: a rollback deletes it."""
    session.add(_record(at, row, None))


def _record(at: BlockAt, row: SQLModel, before: str | None) -> ChainUndo:
    return ChainUndo(
        slot=at.slot,
        height=at.height,
        table_name=str(row.__tablename__),
        key=_key(row),
        before=before,
    )


def undo_after(session: Session, point: BlockAt) -> int:
    """Restore every change recorded for blocks after `point`, newest first; returns how many
    were undone. The caller commits."""
    query = select(ChainUndo).where(col(ChainUndo.slot) > point.slot)
    records = session.exec(query.order_by(col(ChainUndo.id).desc())).all()
    for record in records:
        row = session.get(MODELS[record.table_name], record.key)
        if row is None:
            pass
        elif record.before is None:
            session.delete(row)
        else:
            _restore(session, row, json.loads(record.before), point, record.slot)
        session.delete(record)
        session.flush()
    return len(records)


def _restore(
    session: Session, row: SQLModel, before: dict[str, Any], point: BlockAt, slot: int
) -> None:
    state = before.pop("state", None)
    if isinstance(row, Job) and state is not None and state != row.state:
        try:
            jobs.transition(
                session, row, JobState(state), Cause.CHAIN,
                f"rolled back: the block at slot {slot} left the chain",
                slot=point.slot, block_height=point.height,
            )  # fmt: skip
        except Conflict:
            # Deeper than the confirmations the parties waited for: the job moved on by API.
            log.warning("job %s is %s: the rollback cannot return it to %s", row.id, row.state,
                        state)  # fmt: skip
            return
    elif state is not None:
        row.state = state
    for name, value in before.items():
        setattr(row, name, value)
    session.add(row)


def forget_before(session: Session, slot: int) -> None:
    """Drop records of blocks at or before `slot`: no rollback reaches them any more."""
    session.execute(delete(ChainUndo).where(col(ChainUndo.slot) <= slot))
