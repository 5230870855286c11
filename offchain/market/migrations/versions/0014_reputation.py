"""reputation: each provider's escrow and bond endings as the chain index shows them

Revision ID: 0014
Revises: 0013

One event per escrow settled (delivered, or failed for zero units), refunded or cancelled and
per bond slashed, and their counts per provider (`services/reputation`). Filled here from the
transactions the index already holds, so a market that upgrades keeps its providers' records.
"""

import json
from collections.abc import Sequence
from types import SimpleNamespace

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS = ("delivered", "failed", "refunded", "cancelled", "slashed")


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "reputationevent",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider_id", text(length=56), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", text(length=80), nullable=False),
        sa.Column("tx_id", text(length=64), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_reputationevent_slot", "reputationevent", ["slot"])
    op.create_index("ix_reputationevent_provider_slot", "reputationevent", ["provider_id", "slot"])
    op.create_table(
        "providerreputation",
        sa.Column("provider_id", text(length=56), nullable=False),
        *(sa.Column(kind, sa.Integer(), nullable=False) for kind in KINDS),
        sa.PrimaryKeyConstraint("provider_id"),
    )
    _fill()


def _fill() -> None:
    """The endings of the transactions indexed so far, oldest first, and their counts."""
    from offchain.market.services.reputation import endings

    connection = op.get_bind()
    counts: dict[str, dict[str, int]] = {}
    for tx_id, slot, view_text in connection.execute(
        sa.text("SELECT tx_id, slot, view FROM chaintx ORDER BY slot, tx_id")
    ):
        view = json.loads(view_text)
        refs = [item["ref"] for item in view["inputs"]]
        spent = {
            row.ref: SimpleNamespace(script=row.script, datum=row.datum)
            for row in connection.execute(
                sa.text("SELECT ref, script, datum FROM chaintxout WHERE ref IN :refs")
                .bindparams(sa.bindparam("refs", expanding=True)), {"refs": refs}
            )
        } if refs else {}  # fmt: skip
        for end in endings(view, spent):  # type: ignore[arg-type]
            connection.execute(
                sa.text("INSERT INTO reputationevent (provider_id, kind, subject, tx_id, slot) "
                        "VALUES (:provider, :kind, :subject, :tx_id, :slot)"),
                {"provider": end.provider, "kind": end.kind.value, "subject": end.subject,
                 "tx_id": tx_id, "slot": slot},
            )  # fmt: skip
            row = counts.setdefault(end.provider, dict.fromkeys(KINDS, 0))
            row[end.kind.value] += 1
    for provider, row in counts.items():
        connection.execute(
            sa.text(f"INSERT INTO providerreputation (provider_id, {', '.join(KINDS)}) "
                    f"VALUES (:provider, {', '.join(':' + k for k in KINDS)})"),
            {"provider": provider, **row},
        )  # fmt: skip


def downgrade() -> None:
    op.drop_table("providerreputation")
    op.drop_index("ix_reputationevent_provider_slot", table_name="reputationevent")
    op.drop_index("ix_reputationevent_slot", table_name="reputationevent")
    op.drop_table("reputationevent")
