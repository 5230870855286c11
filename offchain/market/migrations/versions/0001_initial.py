"""initial: every table

Revision ID: 0001
Revises:
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blob",
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "chaincursor",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("block_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("height", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "nonce",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("signer", sqlmodel.sql.sqltypes.AutoString(length=56), nullable=False),
        sa.Column("nonce", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("seen_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("signer", "nonce"),
    )
    with op.batch_alter_table("nonce", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_nonce_seen_at_ms"), ["seen_at_ms"], unique=False)

    op.create_table(
        "provider",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=56), nullable=False),
        sa.Column("vkey", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("payout_address", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("last_heartbeat_ms", sa.BigInteger(), nullable=False),
        sa.Column("bond_ref", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("bond_lovelace", sa.BigInteger(), nullable=True),
        sa.Column("bond_state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("provider", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_provider_last_heartbeat_ms"), ["last_heartbeat_ms"], unique=False
        )

    op.create_table(
        "settlement",
        sa.Column("tx_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("escrows", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tx_id"),
    )
    with op.batch_alter_table("settlement", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_settlement_state"), ["state"], unique=False)

    op.create_table(
        "offer",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider_id", sqlmodel.sql.sqltypes.AutoString(length=56), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("gpu_model", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("vram_mib", sa.Integer(), nullable=False),
        sa.Column("cpu_cores", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("disk_mib", sa.Integer(), nullable=False),
        sa.Column("price_per_unit", sa.BigInteger(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["provider.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("offer", schema=None) as batch_op:
        batch_op.create_index(
            "ix_offer_match", ["active", "gpu_model", "gpu_count", "vram_mib"], unique=False
        )
        batch_op.create_index("ix_offer_price", ["active", "price_per_unit"], unique=False)
        batch_op.create_index(batch_op.f("ix_offer_provider_id"), ["provider_id"], unique=False)

    op.create_table(
        "job",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("consumer_vkey", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("consumer_id", sqlmodel.sql.sqltypes.AutoString(length=56), nullable=False),
        sa.Column("consumer_address", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("spec_digest", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("max_price", sa.BigInteger(), nullable=False),
        sa.Column("provider_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("offer_id", sa.Integer(), nullable=True),
        sa.Column("provider_vkey", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("provider_address", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("gpu_model", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("price_per_unit", sa.BigInteger(), nullable=True),
        sa.Column("max_units", sa.BigInteger(), nullable=True),
        sa.Column("deadline_ms", sa.BigInteger(), nullable=True),
        sa.Column("settle_window_ms", sa.BigInteger(), nullable=True),
        sa.Column("fee_allowance", sa.BigInteger(), nullable=True),
        sa.Column("lock_lovelace", sa.BigInteger(), nullable=True),
        sa.Column("quote_expires_ms", sa.BigInteger(), nullable=True),
        sa.Column("escrow_ref", sqlmodel.sql.sqltypes.AutoString(length=80), nullable=True),
        sa.Column(
            "acceptance_signature", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True
        ),
        sa.Column("receipt_units", sa.BigInteger(), nullable=True),
        sa.Column(
            "receipt_result_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True
        ),
        sa.Column(
            "receipt_evidence_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True
        ),
        sa.Column("receipt_signature", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("result_sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("failure_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("settle_tx", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["offer_id"],
            ["offer.id"],
        ),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["provider.id"],
        ),
        sa.ForeignKeyConstraint(
            ["result_sha256"],
            ["blob.sha256"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("escrow_ref"),
    )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_consumer_id"), ["consumer_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_job_provider_id"), ["provider_id"], unique=False)
        batch_op.create_index("ix_job_state_updated", ["state", "updated_at_ms"], unique=False)

    op.create_table(
        "jobevent",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("cause", sa.String(length=16), nullable=False),
        sa.Column("detail", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=True),
        sa.Column("block_height", sa.BigInteger(), nullable=True),
        sa.Column("tx_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["job.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("jobevent", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobevent_job_id"), ["job_id"], unique=False)

    op.create_table(
        "logline",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["job.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "seq"),
    )


def downgrade() -> None:
    op.drop_table("logline")
    with op.batch_alter_table("jobevent", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobevent_job_id"))

    op.drop_table("jobevent")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index("ix_job_state_updated")
        batch_op.drop_index(batch_op.f("ix_job_provider_id"))
        batch_op.drop_index(batch_op.f("ix_job_consumer_id"))

    op.drop_table("job")
    with op.batch_alter_table("offer", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_offer_provider_id"))
        batch_op.drop_index("ix_offer_price")
        batch_op.drop_index("ix_offer_match")

    op.drop_table("offer")
    with op.batch_alter_table("settlement", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_settlement_state"))

    op.drop_table("settlement")
    with op.batch_alter_table("provider", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_provider_last_heartbeat_ms"))

    op.drop_table("provider")
    with op.batch_alter_table("nonce", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nonce_seen_at_ms"))

    op.drop_table("nonce")
    op.drop_table("chaincursor")
    op.drop_table("blob")
