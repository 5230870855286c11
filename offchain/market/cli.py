"""`unchained market`: serve the marketplace API (settings from flags, `UNCHAINED_MARKET_*`,
then the TOML file)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from offchain.core import logs
from offchain.core.serving import KEEP_ALIVE_S

if TYPE_CHECKING:
    from offchain.market.settings import MarketSettings

# A spawned worker answers the supervisor's health check only once it has imported the app
# (pycardano and all): uvicorn's 5 s default kills it as hung on a busy machine.
WORKER_START_S = 120

app = typer.Typer(help="The marketplace and settlement service.", no_args_is_help=True)


ConfigOption = Annotated[
    Path, typer.Option(envvar="UNCHAINED_MARKET_CONFIG", help="TOML settings file.")
]
DEFAULT_CONFIG = Path("data/market/market.toml")
DataDirOption = Annotated[Path | None, typer.Option(help="Database, results and logs.")]
DatabaseUrlOption = Annotated[str | None, typer.Option(help="SQLAlchemy URL.")]


@app.command()
def serve(
    config: ConfigOption = DEFAULT_CONFIG,
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
    ogmios_url: Annotated[str | None, typer.Option(help="The chain's Ogmios.")] = None,
    deployment: Annotated[Path | None, typer.Option(help="The protocol deployment.")] = None,
    identity: Annotated[str | None, typer.Option(help="Signed into every request.")] = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="API processes; one of them leads (follower, batcher).")
    ] = 1,
    access_log: Annotated[bool, typer.Option(help="Log every request (costs CPU).")] = False,
) -> None:
    """Serve the market's API (OpenAPI at /docs)."""
    import uvicorn  # with the app, here: `unchained --help` needs neither

    from offchain.market.app import SETTINGS_ENV, create_app, from_environment

    flags = {
        "data_dir": data_dir, "database_url": database_url, "ogmios_url": ogmios_url,
        "deployment": deployment, "identity": identity, "host": host, "port": port,
    }  # fmt: skip
    settings = settings_of(config, flags)
    checked_chain(settings.ogmios_url, settings.deployment)
    host, port = settings.host, settings.port
    logs.configure("market")
    if workers == 1:
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            access_log=access_log,
            timeout_keep_alive=KEEP_ALIVE_S,
            log_config=None,  # uvicorn's loggers reach ours (offchain/core/logs.py)
        )
        return
    if settings.migrate:
        migrate_once(settings)  # once, before the workers start: they do not
    workers_settings = settings.model_copy(update={"migrate": False})
    os.environ[SETTINGS_ENV] = workers_settings.model_dump_json()  # each worker's factory reads it
    uvicorn.run(f"{from_environment.__module__}:{from_environment.__name__}", factory=True,
                workers=workers, timeout_worker_healthcheck=WORKER_START_S, host=host, port=port,
                access_log=access_log, timeout_keep_alive=KEEP_ALIVE_S,
                log_config=None)  # fmt: skip


@app.command()
def migrate(
    config: ConfigOption = DEFAULT_CONFIG,
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Bring the database to the newest migration, once, then exit: run it before the market's
    hosts start, each with `migrate = false` (on PostgreSQL it takes an advisory lock, so a
    host migrating at the same time waits)."""
    settings = settings_of(config, {"data_dir": data_dir, "database_url": database_url})
    migrate_once(settings)
    typer.echo("the database is at the newest migration")


def settings_of(config: Path, flags: Mapping[str, object]) -> MarketSettings:
    """The market's settings from `flags`, the environment and the file; exit 2 naming what
    is wrong."""
    from offchain.market.errors import MarketRefusal
    from offchain.market.settings import load_settings

    try:
        return load_settings(config.resolve(), flags)
    except MarketRefusal as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc


def migrate_once(settings: MarketSettings) -> None:
    from offchain.market.db import make_engine, upgrade

    engine = make_engine(settings)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def checked_chain(url: str, deployment: Path) -> None:
    """Before serving: the node runs the deployment's network, Ogmios is a supported version
    and sends transactions' CBOR (the follower reads them); exit 1 saying what to change."""
    from offchain.chain.ogmios import UNREACHABLE
    from offchain.core.errors import UnchainedError
    from offchain.protocol.tx.deployment_start import check_follower

    try:
        check_follower(url, deployment)
    except UnchainedError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    except UNREACHABLE as exc:
        typer.echo(f"cannot reach Ogmios at {url}: {exc}", err=True)
        raise typer.Exit(1) from exc
