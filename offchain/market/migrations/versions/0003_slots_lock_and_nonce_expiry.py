"""offer slots, the lock transaction built for a job, and when a nonce may be forgotten

Revision ID: 0003
Revises: 0002

Offers posted before this revision run one job at a time (one slot). A nonce stored before it
is kept a day after it was seen: longer than any request's tolerance.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DAY_MS = 24 * 3600 * 1000


def upgrade() -> None:
    with op.batch_alter_table("offer", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slots", sa.Integer(), nullable=False, server_default="1"))
        batch_op.alter_column("slots", existing_type=sa.Integer(), server_default=None)
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lock_tx_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
    with op.batch_alter_table("nonce", schema=None) as batch_op:
        batch_op.add_column(sa.Column("keep_until_ms", sa.BigInteger(), nullable=True))
    op.execute(f"UPDATE nonce SET keep_until_ms = seen_at_ms + {DAY_MS}")
    with op.batch_alter_table("nonce", schema=None) as batch_op:
        batch_op.alter_column("keep_until_ms", existing_type=sa.BigInteger(), nullable=False)
        batch_op.create_index(batch_op.f("ix_nonce_keep_until_ms"), ["keep_until_ms"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("nonce", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nonce_keep_until_ms"))
        batch_op.drop_column("keep_until_ms")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("lock_tx_id")
    with op.batch_alter_table("offer", schema=None) as batch_op:
        batch_op.drop_column("slots")
