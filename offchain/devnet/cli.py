"""`unchained devnet`: run the local Cardano devnet that speaks Ogmios v6."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer

from offchain.devnet.genesis import demo_wallet_addresses, wallet_key_path
from offchain.devnet.node import Devnet
from offchain.devnet.server import run

app = typer.Typer(help="A local Cardano ledger (Conway) served over Ogmios v6 JSON-RPC.")


@app.callback(invoke_without_command=True)
def devnet(
    host: Annotated[str, typer.Option(envvar="UNCHAINED_DEVNET_HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="UNCHAINED_DEVNET_PORT")] = 1337,
    data_dir: Annotated[
        Path, typer.Option(envvar="UNCHAINED_DEVNET_DATA_DIR", help="Where the chain lives.")
    ] = Path("data/devnet"),
    reset: Annotated[bool, typer.Option(help="Discard the stored chain and start fresh.")] = False,
    slot_length: Annotated[
        int, typer.Option(envvar="UNCHAINED_DEVNET_SLOT_LENGTH", help="Slot length in ms.")
    ] = 1000,
) -> None:
    """Serve the devnet until interrupted; the chain persists in DATA_DIR."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)  # no line per connection
    asyncio.run(_serve(host, port, data_dir, reset, slot_length))


async def _serve(host: str, port: int, data_dir: Path, reset: bool, slot_length: int) -> None:
    node = Devnet(data_dir, slot_length_ms=slot_length, reset=reset)
    if node.genesis.slot_length_ms != slot_length:
        typer.echo(
            f"note: this chain was created with {node.genesis.slot_length_ms} ms slots; "
            "use --reset to change the slot length",
            err=True,
        )
    for name, address in demo_wallet_addresses(data_dir).items():
        typer.echo(f"wallet {name:<9} {address}  ({wallet_key_path(data_dir, name)})")
    try:
        await run(node, host, port)
    finally:
        node.close()
