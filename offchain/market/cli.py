"""`unchained market`: serve the marketplace API (settings from flags, `UNCHAINED_MARKET_*`,
then the TOML file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from offchain.market.app import create_app
from offchain.market.errors import MarketError
from offchain.market.settings import load_settings

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
) -> None:
    """Serve the market's API (OpenAPI at /docs)."""
    flags = {
        "data_dir": data_dir, "database_url": database_url, "ogmios_url": ogmios_url,
        "deployment": deployment, "identity": identity, "host": host, "port": port,
    }  # fmt: skip
    try:
        settings = load_settings(config.resolve(), flags)
    except MarketError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port)
