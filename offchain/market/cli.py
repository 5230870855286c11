"""`unchained market`: serve the marketplace API (settings from flags, `UNCHAINED_MARKET_*`,
then the TOML file)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from offchain.core.serving import KEEP_ALIVE_S

# A spawned worker answers the supervisor's health check only once it has imported the app
# (pycardano and all): uvicorn's 5 s default kills it as hung on a busy machine.
WORKER_START_S = 120

app = typer.Typer(help="The marketplace and settlement service.", no_args_is_help=True)


@app.command()
def serve(
    config: Annotated[
        Path, typer.Option(envvar="UNCHAINED_MARKET_CONFIG", help="TOML settings file.")
    ] = Path("data/market/market.toml"),
    data_dir: Annotated[Path | None, typer.Option(help="Database, results and logs.")] = None,
    database_url: Annotated[str | None, typer.Option(help="SQLAlchemy URL.")] = None,
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
    from offchain.market.db import make_engine, upgrade
    from offchain.market.errors import MarketRefusal
    from offchain.market.settings import load_settings

    flags = {
        "data_dir": data_dir, "database_url": database_url, "ogmios_url": ogmios_url,
        "deployment": deployment, "identity": identity, "host": host, "port": port,
    }  # fmt: skip
    try:
        settings = load_settings(config.resolve(), flags)
    except MarketRefusal as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    checked_chain(settings.ogmios_url, settings.deployment)
    host, port = settings.host, settings.port
    if workers == 1:
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            access_log=access_log,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        return
    engine = make_engine(settings)
    upgrade(engine)  # once, before the workers start (each would race to create the tables)
    engine.dispose()
    os.environ[SETTINGS_ENV] = settings.model_dump_json()  # each worker's app factory reads it
    uvicorn.run(f"{from_environment.__module__}:{from_environment.__name__}", factory=True,
                workers=workers, timeout_worker_healthcheck=WORKER_START_S, host=host, port=port,
                access_log=access_log, timeout_keep_alive=KEEP_ALIVE_S)  # fmt: skip


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
