"""jobs: a renter's cancel of a locked job, as posted and as the provider answered it

Revision ID: 0008
Revises: 0007

`cancel_tx` is the Cancel transaction (CBOR hex) the renter posted, with the provider's witness
once it signed; `cancel_state` says where the request stands (requested, signed, stopping,
refused) and `cancel_refusal` why the provider refused it. A job whose escrow is spent by
Cancel is in the new state `cancelled` (states are strings: no type to migrate).
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cancel_tx", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("cancel_state", sa.String(length=16), nullable=True))
        batch_op.add_column(
            sa.Column("cancel_refusal", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("cancel_refusal")
        batch_op.drop_column("cancel_state")
        batch_op.drop_column("cancel_tx")
