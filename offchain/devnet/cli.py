"""`unchained devnet`: run the local Cardano devnet that speaks Ogmios v6.

Settings come from flags, then `UNCHAINED_DEVNET_*` environment variables, then a TOML file
(`--config`; a relative `data_dir` in it is read from its folder), then defaults. The TOML file
may also override protocol parameters:

    slot_length = 1000
    [protocol_parameters]
    max_block_memory = 72_000_000
"""

from __future__ import annotations

import asyncio
import logging
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:  # the ledger and its script evaluator are imported to serve, not for --help
    from offchain.devnet.params import ProtocolParameters

app = typer.Typer(help="A local Cardano ledger (Conway) served over Ogmios v6 JSON-RPC.")

DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 1337,
    "data_dir": "data/devnet",
    "slot_length": 1000,
}


@app.callback(invoke_without_command=True)
def devnet(
    host: Annotated[str | None, typer.Option(envvar="UNCHAINED_DEVNET_HOST")] = None,
    port: Annotated[int | None, typer.Option(envvar="UNCHAINED_DEVNET_PORT")] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar="UNCHAINED_DEVNET_DATA_DIR", help="Where the chain lives."),
    ] = None,
    reset: Annotated[bool, typer.Option(help="Discard the stored chain and start fresh.")] = False,
    slot_length: Annotated[
        int | None, typer.Option(envvar="UNCHAINED_DEVNET_SLOT_LENGTH", help="Slot length, ms.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(envvar="UNCHAINED_DEVNET_CONFIG", help="A TOML settings file.")
    ] = None,
) -> None:
    """Serve the devnet until SIGTERM or SIGINT (a clean stop); the chain persists in DATA_DIR."""
    from offchain.devnet.params import ProtocolParameters

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)  # no line per connection
    file_settings = tomllib.loads(config.read_text()) if config else {}
    if config and "data_dir" in file_settings:  # a relative one is read from the file's folder
        file_settings["data_dir"] = config.parent / str(file_settings["data_dir"])
    overrides = file_settings.pop("protocol_parameters", {})
    unknown = set(file_settings) - set(DEFAULTS)
    if unknown:
        raise typer.BadParameter(f"unknown settings {sorted(unknown)} in {config}")
    given = {"host": host, "port": port, "data_dir": data_dir, "slot_length": slot_length}
    settings = {
        key: given[key] if given[key] is not None else file_settings.get(key, default)
        for key, default in DEFAULTS.items()
    }
    try:
        params = ProtocolParameters().with_overrides(overrides)
    except TypeError as exc:
        raise typer.BadParameter(f"bad [protocol_parameters] in {config}: {exc}") from exc
    # absolute once, here: the wallet key paths printed do not depend on where it started
    asyncio.run(_serve(settings, Path(settings["data_dir"]).resolve(), reset, params))


async def _serve(
    settings: dict[str, Any], data_dir: Path, reset: bool, params: ProtocolParameters
) -> None:
    from offchain.devnet import phase2
    from offchain.devnet.genesis import demo_wallet_addresses, wallet_key_path
    from offchain.devnet.node import Devnet
    from offchain.devnet.server import run

    node = Devnet(data_dir, slot_length_ms=settings["slot_length"], params=params, reset=reset)
    if node.genesis.slot_length_ms != settings["slot_length"]:
        typer.echo(
            f"note: this chain was created with {node.genesis.slot_length_ms} ms slots; "
            "use --reset to change the slot length",
            err=True,
        )
    for name, address in demo_wallet_addresses(data_dir).items():
        typer.echo(f"wallet {name:<9} {address}  ({wallet_key_path(data_dir, name)})")
    try:
        await run(node, settings["host"], settings["port"])
    finally:
        node.close()  # the store is flushed, the script workers are stopped
        phase2.stop_helper_processes()
    typer.echo("devnet stopped")
