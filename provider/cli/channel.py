"""`unchained provider channel admit | list`: the provider's book of payment channels
(`provider.money.channel_book`), the one its daemon claims from and its gateway takes IOUs into.

`admit` serves a channel a renter opened for this provider once it passes `check_channel` on
the chain's copy (`provider.daemon.channel_claims.admit`); `list` shows each channel's state,
what is claimed on chain and the latest IOU. The chain's clients are imported as a command
runs, never for `--help`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from provider.cli.options import ChainFlags, chain_command, fail, given, reported, settings_of

if TYPE_CHECKING:
    from pycardano import ChainContext

    from offchain.protocol.tx.deployment import Deployment
    from provider.config import ProviderSettings
    from provider.money.channel_book import BookEntry, ChannelBook

app = typer.Typer(
    help="The provider's payment channels: which it serves, their IOUs and claims.",
    no_args_is_help=True,
)


def open_book(flags: ChainFlags) -> tuple[ChainContext, Deployment, ProviderSettings, ChannelBook]:
    """The chain, the deployment, the settings and the book in the state directory."""
    from provider.cli.options import open_deployment
    from provider.money.channel_book import ChannelBook

    settings = settings_of(flags.config, given(flags.state_dir))
    context, deployment = open_deployment(flags.ogmios_url, flags.deployment, flags.network)
    book = ChannelBook.in_state_dir(
        settings.runner.state_dir, deployment.network_id, deployment.channel_hash,
        settings.daemon.channel_credit_lovelace,
    )  # fmt: skip
    return context, deployment, settings, book


@app.command()
@reported()
@chain_command
def admit(
    flags: ChainFlags,
    channel: Annotated[str, typer.Argument(help="The channel's output, TXID#IX.")],
    terms: Annotated[str, typer.Argument(help="Its terms as the renter has them: CBOR hex.")],
) -> None:
    """Serve the channel at TXID#IX: checked on chain (this deployment, this provider's key
    and address, open, enough deposit, a close period long enough), then in the book."""
    from offchain.chain.utxo import parse_out_ref
    from offchain.protocol.ledger.types import ChannelTerms
    from provider.daemon import channel_claims
    from provider.daemon.chain import Chain

    try:
        ref, read = parse_out_ref(channel), ChannelTerms.from_cbor(bytes.fromhex(terms))
    except Exception as exc:  # pycardano raises several kinds for CBOR of another shape
        raise fail(f"{channel} {terms[:16]}...: not TXID#IX and ChannelTerms CBOR hex") from exc
    context, deployment, settings, book = open_book(flags)
    chain = Chain.of(flags.ogmios_url, context, deployment, settings)
    try:
        view = channel_claims.admit(chain, book, ref, read, settings.daemon)
    except LookupError as exc:
        raise fail(str(exc), code=1) from exc
    typer.echo(f"serving channel {view.id.hex()} at {view.utxo}: IOUs up to "
               f"{view.capacity} lovelace, {settings.daemon.channel_credit_lovelace} lovelace "
               "of credit")  # fmt: skip


@app.command("list")
@reported()
@chain_command
def list_channels(
    flags: ChainFlags,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document (lovelace).")] = False,
) -> None:
    """Every channel in the book: open, closing or ended, claimed on chain, the latest IOU."""
    _, _, _, book = open_book(flags)
    rows = [channel_row(entry) for entry in book.entries()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no channels: admit one with `unchained provider channel admit`")
    for row in rows:
        typer.echo(f"{str(row['channel'])[:16]}  {row['state']:<7}  claimed {row['claimed']}  "
                   f"latest IOU {row['latest_iou']}  unclaimed {row['unclaimed']}  "
                   f"capacity {row['capacity']}  {row['utxo']}")  # fmt: skip


def channel_row(entry: BookEntry) -> dict[str, str | int]:
    from offchain.protocol.tx.channel import OPEN

    view = entry.view
    state = "ended" if entry.ended else "open" if view.closing_at == OPEN else "closing"
    return {
        "channel": view.id.hex(), "utxo": view.utxo, "state": state, "claimed": view.claimed,
        "latest_iou": entry.iou.amount if entry.iou else 0, "unclaimed": entry.unclaimed,
        "capacity": view.capacity, "closing_at": view.closing_at,
    }  # fmt: skip
