"""Alembic's environment: the market's models are the target; the engine comes from
`offchain.market.db.alembic_config` (online only: the service migrates its own database)."""

from alembic import context
from sqlmodel import SQLModel

import offchain.market.models  # noqa: F401 - registers the tables on SQLModel.metadata

engine = context.config.attributes["engine"]
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=SQLModel.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
