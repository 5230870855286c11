"""blob chunks: stored files' bytes in the database, for a market on several hosts

Revision ID: 0012
Revises: 0011

Result archives and metering records were files under one host's data dir. Their bytes now
live in `blob_chunk` rows; files a market stored before are read into them when it starts
(`storage.import_disk_blobs`). A job whose files and logs the retention deleted says so
(`job.results_forgotten`).
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blob_chunk",
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["sha256"], ["blob.sha256"]),
        sa.PrimaryKeyConstraint("sha256", "seq"),
    )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("results_forgotten", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.alter_column("results_forgotten", existing_type=sa.Boolean(), server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("results_forgotten")
    op.drop_table("blob_chunk")
