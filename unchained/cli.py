"""The `unchained` command: one CLI, each component's sub-commands mounted from its package."""

import typer

from offchain.devnet.cli import app as devnet_app

app = typer.Typer(
    help="Unchained: a GPU compute marketplace settled on Cardano.", no_args_is_help=True
)
app.add_typer(devnet_app, name="devnet")

if __name__ == "__main__":
    app()
