"""`database_url` as the market's engine takes it. A SQLAlchemy URL is kept as it is. A libpq
URL (`postgresql://` or `postgres://`, what PostgreSQL's own tools, hosting platforms and
failover guides hand out) is read by libpq's own parser, so every form it knows works,
multi-host included: `postgresql://user@db1:5432,db2:5432/market?target_session_attrs=read-write`
lists a primary and its standby, and libpq connects to whichever of them accepts writes now.
SQLAlchemy cannot read hosts in that place (it would pick the psycopg2 driver for the scheme,
which the market does not install, and fail on the second port), so the URL is rewritten to
its psycopg form with the hosts and ports as query values, which it hands on to libpq."""

from __future__ import annotations

from urllib.parse import urlsplit

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import URL

LIBPQ_SCHEMES = ("postgresql", "postgres")
DRIVER = "postgresql+psycopg"


def engine_url(database_url: str) -> str:
    """The SQLAlchemy URL of `database_url`; ValueError saying why one cannot be read."""
    if urlsplit(database_url).scheme not in LIBPQ_SCHEMES:
        return database_url
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(database_url).items()}
    except ProgrammingError as exc:
        raise ValueError(f"not a PostgreSQL connection URL: {exc}") from exc
    ports = params.get("port", "").split(",")
    if not all(port.isdigit() or not port for port in ports):
        raise ValueError(f"a port is not a number: {params['port']}")
    url = URL.create(
        DRIVER,
        username=params.pop("user", None),
        password=params.pop("password", None),
        database=params.pop("dbname", None),
        query=params,  # host and port too: libpq reads lists of them, SQLAlchemy passes them on
    )
    return url.render_as_string(hide_password=False)
