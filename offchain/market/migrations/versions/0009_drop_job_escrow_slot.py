"""jobs: no escrow_slot (written by the chain follower, never read: escrow_height is what counts)

Revision ID: 0009
Revises: 0008

The follower's undo records of jobs kept the column's old value to restore it at a rollback;
it is taken out of them too, or a rollback past this revision would set a column that is gone.
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHAIN_UNDO = sa.table(
    "chainundo", sa.column("id", sa.Integer()), sa.column("table_name"), sa.column("before")
)


def upgrade() -> None:
    connection = op.get_bind()
    records = connection.execute(
        sa.select(CHAIN_UNDO.c.id, CHAIN_UNDO.c.before).where(
            CHAIN_UNDO.c.table_name == "job", CHAIN_UNDO.c.before.is_not(None)
        )
    ).all()
    for record_id, before in records:
        columns = json.loads(before)
        if "escrow_slot" in columns:
            del columns["escrow_slot"]
            connection.execute(
                CHAIN_UNDO.update()
                .where(CHAIN_UNDO.c.id == record_id)
                .values(before=json.dumps(columns))
            )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("escrow_slot")


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("escrow_slot", sa.BigInteger(), nullable=True))
