"""The migrations build exactly the tables the models describe, and settings read in order."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

from offchain.market.db import make_engine, upgrade
from offchain.market.settings import MarketSettings, load_settings


def test_migrations_at_head_match_the_models(settings):
    engine = make_engine(settings)
    upgrade(engine)
    upgrade(engine)  # at head already: nothing to do
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, SQLModel.metadata) == []


def test_flags_over_environment_over_toml(tmp_path):
    toml = tmp_path / "market.toml"
    toml.write_text('identity = "from-toml"\nport = 1\nquote_ttl_ms = 5000\ndata_dir = "here"\n')
    env = {"UNCHAINED_MARKET_PORT": "2", "UNCHAINED_MARKET_IDENTITY": "from-env"}
    settings = load_settings(toml, {"identity": "from-flag", "port": None}, env)
    assert (settings.identity, settings.port, settings.quote_ttl_ms) == ("from-flag", 2, 5000)
    assert settings.data_dir == tmp_path / "here"  # relative to the TOML file
    assert settings.sqlalchemy_url == f"sqlite:///{tmp_path / 'here' / 'market.db'}"
    assert load_settings(None, {}, {}).settle_fee_share == MarketSettings().settle_fee_share


def test_database_url_comes_from_the_usual_variable_unless_the_markets_own_is_set():
    usual = {"DATABASE_URL": "postgresql+psycopg://u@/db"}
    assert load_settings(None, {}, usual).sqlalchemy_url == "postgresql+psycopg://u@/db"
    both = usual | {"UNCHAINED_MARKET_DATABASE_URL": "sqlite:////tmp/own.db"}
    assert load_settings(None, {}, both).database_url == "sqlite:////tmp/own.db"
