"""job start deadline: the escrow's, when the renter asked for one (failover, issue 36)

Revision ID: 0015
Revises: 0014

A provider that has not Started the escrow by then is refunded by the renter at once.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("start_deadline_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("start_deadline_ms")
