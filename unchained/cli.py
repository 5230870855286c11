"""The `unchained` command: one CLI, each component's sub-commands mounted from its package."""

import typer

from consumer.cli import job_app, offers_app, wallet_app
from contracts.cli import app as contracts_app
from offchain.devnet.cli import app as devnet_app
from offchain.market.cli import app as market_app
from provider.cli import app as provider_app
from unchained.demo import app as demo_app
from unchained.deploy import app as deploy_app

app = typer.Typer(
    help="Unchained: a GPU compute marketplace settled on Cardano.", no_args_is_help=True
)
app.add_typer(devnet_app, name="devnet")
app.add_typer(demo_app, name="demo")
app.add_typer(contracts_app, name="contracts")
app.add_typer(deploy_app, name="deploy")
app.add_typer(provider_app, name="provider")
app.add_typer(market_app, name="market")
app.add_typer(job_app, name="job")
app.add_typer(offers_app, name="offers")
app.add_typer(wallet_app, name="wallet")

if __name__ == "__main__":
    app()
