"""The `unchained` command: one CLI, each component's sub-commands mounted from its package.

A component is imported only when one of its commands runs (or its own `--help` is asked):
pycardano, the Ogmios client, the market's server and the OpShin compiler take seconds to
import, and `unchained --help` or `unchained job list` needs none of them. So the listing
below names each component's module and says what it is, and `unchained --help` prints it
without importing any (tests/test_cli_imports.py checks both that and that each line is the
component's own help)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup


class Component(NamedTuple):
    """A sub-command group: the module holding its Typer app, and its one-line help."""

    module: str
    attribute: str
    help: str


COMPONENTS = {
    "devnet": Component("devnet.cli", "app",
                        "A local Cardano ledger (Conway) served over Ogmios v6 JSON-RPC."),
    "demo": Component("unchained.demo", "app", "Run the whole market locally: devnet, market + "
                      "explorer, provider, consumers."),
    "contracts": Component("contracts.cli", "app",
                           "The OpShin validators and their committed artifacts."),
    "deploy": Component("unchained.deploy", "app", "Publish the escrow and bond validators as "
                        "reference scripts; write DEPLOYMENT."),
    "doctor": Component("unchained.doctor", "app", "Check this set-up (Ogmios, node, network, "
                        "deployment, wallet, clock); say what to fix."),
    "provider": Component("provider.cli.main", "app",
                          "The provider node: its key, offer, self-test, job runner and bond."),
    "market": Component("offchain.market.cli", "app", "The marketplace and settlement service."),
    "job": Component("consumer.cli.main", "job_app",
                     "Submit GPU jobs, follow them, get verified results or a refund."),
    "offers": Component("consumer.cli.main", "offers_app", "Offers on the market."),
    "channel": Component("consumer.cli.channel", "app", "Pay-as-you-go payment channels to a "
                         "provider: open, top up, close."),
    "endpoint": Component("consumer.cli.endpoint", "app", "Inference endpoints on a provider's "
                          "gateway, paid per request from a payment channel."),
    "pod": Component("consumer.cli.pod", "app", "Interactive GPU pods over SSH, paid per second "
                     "from a payment channel."),
    "wallet": Component("consumer.cli.main", "wallet_app", "The consumer's key and funds."),
    "spend": Component("consumer.cli.spend", "app", "What your jobs and channels cost, to the "
                       "lovelace: paid, fees, what came back."),
    "tx": Component("consumer.cli.tx", "app", "Transactions signed by your wallet: submit them, "
                    "list those pending."),
    "key": Component("unchained.key", "app", "Seal a key file with a passphrase, or unseal it."),
}  # fmt: skip


def load(name: str) -> TyperGroup:
    """The component's sub-commands as click builds them (what `add_typer` would mount)."""
    component = COMPONENTS[name]
    sub_app = getattr(importlib.import_module(component.module), component.attribute)
    group = typer.main.get_group(sub_app)
    group.name = name
    plain(group)
    return group


def plain(command: TyperCommand | TyperGroup) -> None:
    """Help and usage errors as click writes them: typer's rich panels import rich's console,
    markdown, syntax and traceback modules, which took longer than the rest of `unchained
    --help` (bench/consumer.py's cli_start_s). A command is listed with its help's first
    paragraph whole, as in typer's panels (click would cut it to fit one line)."""
    command.rich_markup_mode = None
    if command.help and not command.short_help:
        command.short_help = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
    for sub in getattr(command, "commands", {}).values():
        plain(sub)


class Components(TyperGroup):
    """The top-level group: each component loaded when it is called, listed without loading."""

    listing = False  # True while the help is written: each component is its one-line help

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Stand-ins, so the help lists the components and a typo gets "Did you mean ...?"
        self.commands.update({name: TyperCommand(name, help=component.help,
                                                 short_help=component.help)
                              for name, component in COMPONENTS.items()})  # fmt: skip

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in COMPONENTS and not self.listing:
            return load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


app = typer.Typer(
    cls=Components,
    help="Unchained: a GPU compute marketplace settled on Cardano.",
    no_args_is_help=True,
    rich_markup_mode=None,  # as each component's (`plain`)
    context_settings={"max_content_width": 120},  # click's default, 80, narrower than rich's
)


@app.callback()
def main() -> None:
    """Typer makes a group (of the components) only of an app with a callback: none to run."""


if __name__ == "__main__":
    app()
