"""jobs: why the batcher leaves a receipt alone, and each quote's escrow terms, unique

Revision ID: 0006
Revises: 0005

Jobs quoted before this revision have no recorded terms (NULL, which the unique index allows
any number of); every quote after it gets terms no other job has.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("unsettleable", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("escrow_terms", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
        batch_op.create_unique_constraint("uq_job_escrow_terms", ["escrow_terms"])


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_constraint("uq_job_escrow_terms", type_="unique")
        batch_op.drop_column("escrow_terms")
        batch_op.drop_column("unsettleable")
