"""explorer: providers' online spans (uptime from heartbeats) and the self-test summary their
latest offer carried

Revision ID: 0005
Revises: 0004

Uptime counts from the first heartbeat after this revision; no provider has a self-test until
it publishes an offer carrying one.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "onlinespan",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider_id", sqlmodel.sql.sqltypes.AutoString(length=56), nullable=False),
        sa.Column("start_ms", sa.BigInteger(), nullable=False),
        sa.Column("end_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["provider_id"], ["provider.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_onlinespan_provider_end", "onlinespan", ["provider_id", "end_ms"], unique=False
    )
    with op.batch_alter_table("provider", schema=None) as batch_op:
        batch_op.add_column(sa.Column("selftest", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("provider", schema=None) as batch_op:
        batch_op.drop_column("selftest")
    op.drop_index("ix_onlinespan_provider_end", table_name="onlinespan")
    op.drop_table("onlinespan")
