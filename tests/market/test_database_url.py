"""`database_url` as operators write it: a libpq URL (several hosts included) reaches the
database through the market's own engine, a SQLAlchemy URL is kept as written, and one that
cannot be read is refused at start naming the field."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from devnet.process import free_port
from offchain.market.db import make_engine
from offchain.market.errors import Invalid
from offchain.market.settings import MarketSettings, load_settings


def test_a_libpq_url_of_two_hosts_reaches_the_one_that_answers(postgresql_cluster, tmp_path):
    """The first host refuses (nothing listens there), libpq goes on to the second."""
    database = postgresql_cluster.create_database()
    hosts = f"127.0.0.1:{free_port()},127.0.0.1:{postgresql_cluster.port}"
    url = f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"
    engine = make_engine(MarketSettings(data_dir=tmp_path, database_url=url))
    try:
        with engine.connect() as connection:
            port = connection.execute(text("SELECT current_setting('port')")).scalar_one()
            name = connection.execute(text("SELECT current_database()")).scalar_one()
    finally:
        engine.dispose()
    assert (int(port), name) == (postgresql_cluster.port, database)


def test_a_libpq_url_keeps_its_user_password_and_options():
    url = "postgres://ops:p%40ss@db1,db2:6432/market?target_session_attrs=read-write"
    engine_url = make_url(MarketSettings(database_url=url).sqlalchemy_url)
    assert engine_url.drivername == "postgresql+psycopg"  # the driver the market installs
    assert (engine_url.username, engine_url.password) == ("ops", "p@ss")
    assert engine_url.database == "market"
    assert engine_url.query == {
        "host": "db1,db2", "port": ",6432", "target_session_attrs": "read-write"
    }  # fmt: skip


@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg://ops@/market?host=/run/postgresql", "sqlite:////var/lib/market.db"],
)
def test_a_sqlalchemy_url_is_kept_as_written(url):
    assert MarketSettings(database_url=url).sqlalchemy_url == url


@pytest.mark.parametrize(
    "url", ["db1:5432/market", "postgresql://[db1/market", "postgresql://db1:5432,db2:x/market"]
)
def test_an_unreadable_url_is_refused_at_start(url):
    with pytest.raises(Invalid) as refused:
        load_settings(flags={"database_url": url})
    assert refused.value.field == "settings" and "database_url" in str(refused.value)
