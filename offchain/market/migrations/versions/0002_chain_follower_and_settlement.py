"""chain follower and settlement: the follower's points and undo log, bonds seen on chain, the
block that locked each escrow, and settle transactions kept with their signed bytes

Revision ID: 0002
Revises: 0001

The settlement table was never written before this revision, so its new NOT NULL columns need
no default. The unused chaincursor (one point) gives way to chainpoint (the recent blocks).
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bond",
        sa.Column("ref", sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
        sa.Column("provider_id", sqlmodel.sql.sqltypes.AutoString(length=56), nullable=False),
        sa.Column("lovelace", sa.BigInteger(), nullable=False),
        sa.Column("unbonding_since_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_slot", sa.BigInteger(), nullable=False),
        sa.Column("spent_tx", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("spent_as", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.PrimaryKeyConstraint("ref"),
    )
    with op.batch_alter_table("bond", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_bond_provider_id"), ["provider_id"], unique=False)

    op.create_table(
        "chainpoint",
        sa.Column("slot", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("block_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("height", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("slot"),
    )
    with op.batch_alter_table("chainpoint", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chainpoint_height"), ["height"], unique=False)

    op.create_table(
        "chainundo",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("height", sa.BigInteger(), nullable=False),
        sa.Column("table_name", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
        sa.Column("before", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("chainundo", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chainundo_slot"), ["slot"], unique=False)

    op.drop_table("chaincursor")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("escrow_slot", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("escrow_height", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("refundable_since_ms", sa.BigInteger(), nullable=True))
        batch_op.create_index(batch_op.f("ix_job_escrow_height"), ["escrow_height"], unique=False)

    with op.batch_alter_table("provider", schema=None) as batch_op:
        batch_op.add_column(sa.Column("offline_since_ms", sa.BigInteger(), nullable=True))

    with op.batch_alter_table("settlement", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tx_cbor", sa.Text(), nullable=False))
        batch_op.add_column(sa.Column("ttl_slot", sa.BigInteger(), nullable=False))
        batch_op.add_column(sa.Column("submitted_at_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("settlement", schema=None) as batch_op:
        batch_op.drop_column("submitted_at_ms")
        batch_op.drop_column("ttl_slot")
        batch_op.drop_column("tx_cbor")

    with op.batch_alter_table("provider", schema=None) as batch_op:
        batch_op.drop_column("offline_since_ms")

    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_escrow_height"))
        batch_op.drop_column("refundable_since_ms")
        batch_op.drop_column("escrow_height")
        batch_op.drop_column("escrow_slot")

    op.create_table(
        "chaincursor",
        sa.Column("name", sa.VARCHAR(length=32), nullable=False),
        sa.Column("slot", sa.BIGINT(), nullable=False),
        sa.Column("block_id", sa.VARCHAR(length=64), nullable=False),
        sa.Column("height", sa.BIGINT(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("chainundo", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_chainundo_slot"))

    op.drop_table("chainundo")
    with op.batch_alter_table("chainpoint", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_chainpoint_height"))

    op.drop_table("chainpoint")
    with op.batch_alter_table("bond", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_bond_provider_id"))

    op.drop_table("bond")
