"""job registry account: a renter's registry account for a private image, sealed to the provider

Revision ID: 0013
Revises: 0012

Ciphertext only the quoted provider opens (`registry_seal`); the market carries it to that
provider with the job's assignment.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("registry_account", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("registry_account")
