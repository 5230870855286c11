"""deployments: the endpoints and pods providers report, for the explorer

Revision ID: 0011
Revises: 0010

One row per deployment (provider, name, created_ms) as its provider last reported it; the
explorer lists them newest first under each filter. Starts empty: daemons report theirs each
heartbeat.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_deployment_created": ["created_ms", "id"],
    "ix_deployment_state": ["state", "created_ms", "id"],
    "ix_deployment_kind": ["kind", "created_ms", "id"],
    "ix_deployment_provider": ["provider_id", "created_ms", "id"],
    "ix_deployment_channel": ["channel", "created_ms", "id"],
}
BIG = ("price_per_request", "price_per_second", "created_ms", "started_ms", "stopped_ms",
       "requests", "served", "seconds_run", "first_reported_ms", "reported_ms")  # fmt: skip


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "deployment",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider_id", text(length=56), nullable=False),
        sa.Column("name", text(length=64), nullable=False),
        sa.Column("kind", text(length=16), nullable=False),
        sa.Column("channel", text(length=56), nullable=False),
        sa.Column("image_digest", text(length=255), nullable=False),
        sa.Column("state", text(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in BIG),
        sa.ForeignKeyConstraint(["provider_id"], ["provider.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("provider_id", "name", "created_ms"),
    )
    for name, columns in INDEXES.items():
        op.create_index(name, "deployment", columns, unique=False)


def downgrade() -> None:
    op.drop_table("deployment")
