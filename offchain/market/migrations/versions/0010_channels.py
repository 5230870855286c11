"""channels: the payment channels the chain follower indexes, and each move of each channel

Revision ID: 0010
Revises: 0009

A channel row holds its terms (from its open transaction's metadata) and its state now; each
event holds one transaction's move and the channel's state after it, so a rollback deletes the
events of the blocks it takes back and restores each channel from its newest event left. Both
start empty: they fill from the blocks the follower applies after this revision.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL_INDEXES = {
    "ix_channel_ref": ["ref"],
    "ix_channel_opened": ["opened_slot", "id"],
    "ix_channel_state": ["state", "opened_slot", "id"],
    "ix_channel_provider": ["provider_id", "opened_slot", "id"],
    "ix_channel_renter": ["renter", "opened_slot", "id"],
    "ix_channel_payee": ["provider", "opened_slot", "id"],
}


def _now() -> list[sa.Column]:
    """The columns of a channel's state, which a channel and each of its events hold."""
    text = sqlmodel.sql.sqltypes.AutoString
    return [
        sa.Column("ref", text(length=80), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("funded", sa.BigInteger(), nullable=False),
        sa.Column("claimed", sa.BigInteger(), nullable=False),
        sa.Column("lovelace", sa.BigInteger(), nullable=False),
        sa.Column("closing_at_ms", sa.BigInteger(), nullable=True),
    ]


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "channel",
        *_now(),
        sa.Column("id", text(length=56), nullable=False),
        sa.Column("renter", text(length=128), nullable=False),
        sa.Column("renter_vkey", text(length=64), nullable=False),
        sa.Column("provider", text(length=128), nullable=False),
        sa.Column("provider_vkey", text(length=64), nullable=False),
        sa.Column("provider_id", text(length=56), nullable=False),
        sa.Column("close_period_ms", sa.BigInteger(), nullable=False),
        sa.Column("nonce", text(length=80), nullable=False),
        sa.Column("open_tx", text(length=64), nullable=False),
        sa.Column("opened_slot", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    for name, columns in CHANNEL_INDEXES.items():
        op.create_index(name, "channel", columns, unique=False)
    op.create_table(
        "channelevent",
        *_now(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("channel_id", text(length=56), nullable=False),
        sa.Column("move", sa.String(length=16), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("tx_id", text(length=64), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("height", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["channel_id"], ["channel.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_channelevent_channel_slot", "channelevent", ["channel_id", "slot", "id"], unique=False
    )
    op.create_index("ix_channelevent_tx_id", "channelevent", ["tx_id"], unique=False)
    op.create_index("ix_channelevent_slot", "channelevent", ["slot"], unique=False)


def downgrade() -> None:
    op.drop_table("channelevent")
    op.drop_table("channel")
