"""jobs: how the run ended, as the provider's daemon reports it with its receipt

Revision ID: 0007
Revises: 0006

The job's state stays completed -> settling -> settled whatever the run did (billing follows the
signed units); `outcome` (succeeded, failed, timeout, oom, cancelled) says what the renter's
program did. Jobs completed before this revision have none (NULL).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("outcome", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("outcome")
