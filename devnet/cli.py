"""`unchained devnet`: run the local Cardano devnet that speaks Ogmios v6.

Settings come from flags, then `UNCHAINED_DEVNET_*` environment variables, then a TOML file
(`--config`), then defaults (`devnet.settings`, which also says how the file may
override protocol parameters).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # the ledger and its script evaluator are imported to serve, not for --help
    from devnet.params import ProtocolParameters
    from devnet.settings import DevnetSettings

app = typer.Typer(help="A local Cardano ledger (Conway) served over Ogmios v6 JSON-RPC.")
ENV_HELP = (
    "Each option but --reset and --config may also be given as an UNCHAINED_DEVNET_* variable "
    "(UNCHAINED_DEVNET_PORT for --port): a flag wins over it, it wins over the --config file."
)


@app.callback(invoke_without_command=True, epilog=ENV_HELP)
def devnet(
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where the chain lives.")] = None,
    reset: Annotated[bool, typer.Option(help="Discard the stored chain and start fresh.")] = False,
    slot_length: Annotated[int | None, typer.Option(help="Slot length, ms.")] = None,
    profile: Annotated[
        str | None, typer.Option(help="instant (a block when transactions wait) or realistic.")
    ] = None,
    active_slot_coeff: Annotated[
        str | None, typer.Option(help="realistic: share of slots with a block, e.g. 1/20.")
    ] = None,
    fork_rate: Annotated[
        str | None, typer.Option(help="realistic: share of blocks a fork takes back, e.g. 1/20.")
    ] = None,
    fork_depth_max: Annotated[
        int | None, typer.Option(help="realistic: a fork's greatest depth, blocks.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="realistic: the seed of every draw.")] = None,
    config: Annotated[
        Path | None, typer.Option(envvar="UNCHAINED_DEVNET_CONFIG", help="A TOML settings file.")
    ] = None,
) -> None:
    """Serve the devnet until SIGTERM or SIGINT (a clean stop); the chain persists in DATA_DIR."""
    from pydantic import ValidationError

    from devnet.params import ProtocolParameters
    from devnet.settings import DevnetSettings
    from offchain.core import logs
    from offchain.core.settings import SettingsFileError
    from offchain.protocol.job.jobspec import describe

    logs.configure("devnet")
    given = {"host": host, "port": port, "data_dir": data_dir, "slot_length": slot_length,
             "profile": profile, "active_slot_coeff": active_slot_coeff, "fork_rate": fork_rate,
             "fork_depth_max": fork_depth_max, "seed": seed}  # fmt: skip
    try:
        settings = DevnetSettings.load(config, given, file="required")
    except SettingsFileError as exc:
        raise typer.BadParameter(str(exc)) from exc
    except ValidationError as exc:
        raise typer.BadParameter(f"bad settings:\n{describe(exc)}") from exc
    try:
        params = ProtocolParameters().with_overrides(settings.protocol_parameters)
    except TypeError as exc:
        raise typer.BadParameter(f"bad [protocol_parameters] in {config}: {exc}") from exc
    asyncio.run(_serve(settings, reset, params))


async def _serve(settings: DevnetSettings, reset: bool, params: ProtocolParameters) -> None:
    from devnet import phase2
    from devnet.genesis import demo_wallet_addresses, wallet_key_path
    from devnet.node import Devnet
    from devnet.server import run

    data_dir = settings.data_dir
    node = Devnet(
        data_dir,
        slot_length_ms=settings.slot_length,
        params=params,
        reset=reset,
        praos=settings.praos(),
    )
    if node.genesis.slot_length_ms != settings.slot_length:
        typer.echo(
            f"note: this chain was created with {node.genesis.slot_length_ms} ms slots; "
            "use --reset to change the slot length",
            err=True,
        )
    for name, address in demo_wallet_addresses(data_dir).items():
        typer.echo(f"wallet {name:<9} {address}  ({wallet_key_path(data_dir, name)})")
    try:
        await run(node, settings.host, settings.port)
    finally:
        node.close()  # the store is flushed, the script workers are stopped
        phase2.stop_helper_processes()
    typer.echo("devnet stopped")
