"""explorer: the chain index (blocks, the transactions touching our scripts, their outputs) and
the indexes the explorer's pages read jobs and settlements by

Revision ID: 0004
Revises: 0003

The index starts empty: it fills from the blocks the follower applies after this revision.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_INDEXES = {
    "ix_explorer_job_created": ["created_at_ms", "id"],
    "ix_explorer_job_state": ["state", "created_at_ms", "id"],
    "ix_explorer_job_locked": ["state", "lock_lovelace"],
    "ix_explorer_job_provider": ["provider_id", "created_at_ms", "id"],
    "ix_explorer_job_consumer": ["consumer_id", "created_at_ms", "id"],
    "ix_explorer_job_gpu": ["gpu_model", "created_at_ms", "id"],
}


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "chainblock",
        sa.Column("slot", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("height", sa.BigInteger(), nullable=False),
        sa.Column("block_id", text(length=64), nullable=False),
        sa.Column("tx_count", sa.Integer(), nullable=False),
        sa.Column("indexed_txs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("slot"),
    )
    op.create_index("ix_chainblock_height", "chainblock", ["height"], unique=True)
    op.create_index("ix_chainblock_block_id", "chainblock", ["block_id"], unique=False)
    op.create_table(
        "chaintx",
        sa.Column("tx_id", text(length=64), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("height", sa.BigInteger(), nullable=False),
        sa.Column("view", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tx_id"),
    )
    op.create_index("ix_chaintx_slot_tx", "chaintx", ["slot", "tx_id"], unique=False)
    op.create_table(
        "chaintxout",
        sa.Column("ref", text(length=80), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("address", text(length=128), nullable=False),
        sa.Column("lovelace", sa.BigInteger(), nullable=False),
        sa.Column("script", text(length=8), nullable=True),
        sa.Column("datum", sa.Text(), nullable=True),
        sa.Column("spent_by", text(length=64), nullable=True),
        sa.Column("spent_slot", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("ref"),
    )
    op.create_index(
        "ix_chaintxout_address_slot", "chaintxout", ["address", "slot", "ref"], unique=False
    )
    for name, columns in JOB_INDEXES.items():
        op.create_index(name, "job", columns, unique=False)
    op.create_index("ix_explorer_event_state_slot", "jobevent", ["to_state", "slot"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_explorer_event_state_slot", table_name="jobevent")
    for name in JOB_INDEXES:
        op.drop_index(name, table_name="job")
    op.drop_table("chaintxout")
    op.drop_table("chaintx")
    op.drop_table("chainblock")
