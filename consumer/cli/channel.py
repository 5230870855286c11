"""`unchained channel ...`: the renter's payment channels (`consumer.sdk.channels` is the SDK).
Amounts are typed in ADA (`10`, `2.5ADA`, or `2500000lovelace`) and shown in ADA, computed in
integer lovelace; durations carry their unit (`90s`, `30min`, `1h`, `2d`). The connection
options and `--json` are the job commands' (`consumer.cli.main`); `channel list --local` reads the
state directory alone and imports no pycardano. (No `from __future__ import annotations`:
typer reads these annotations through `consumer.cli.main.command`'s signature.)"""

import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from consumer.cli.main import Env, Json, command, emit, market_reader, on_chain, run_sync
from consumer.cli.unsigned import UnsignedTx, defer
from consumer.sdk.channel_store import ChannelRecord, ChannelStore
from consumer.sdk.errors import ConsumerError
from consumer.sdk.store import local_time
from offchain.protocol.ledger.amounts import ada, parse_lovelace

if TYPE_CHECKING:
    from consumer.sdk.channels import Channels

app = typer.Typer(help="Pay-as-you-go payment channels to a provider: open, top up, close.",
                  no_args_is_help=True)  # fmt: skip

ChannelId = Annotated[
    str, typer.Argument(help="The channel id `channel open` printed, or a unique prefix of it.")
]
DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|min|h|d)\s*$")
MS_PER = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
BARE_NUMBER = re.compile(r"^\s*\d+(\.\d+)?\s*$")


def lovelace_of(option: str, text: str) -> int:
    """An amount typed in ADA (a bare number) or with its unit, in lovelace."""
    try:
        return parse_lovelace(f"{text}ADA" if BARE_NUMBER.match(text) else text)
    except ValueError as exc:
        raise ConsumerError(f"{option}: {exc}", field=option) from exc


def duration_ms(option: str, text: str) -> int:
    """`90s`, `30min`, `1h`, `2d` or `500ms` in milliseconds (a positive whole number)."""
    match = DURATION.match(text)
    if match is None or int(match[1]) == 0:
        raise ConsumerError(
            f"{option}: expected a positive duration with its unit (ms, s, min, h, d), like "
            f"90s, 30min or 1h; got {text!r}", field=option,
        )  # fmt: skip
    return int(match[1]) * MS_PER[match[2]]


def channel_sdk(env: Env) -> "Channels":
    from consumer.sdk.channels import Channels

    key, context, deployment = on_chain(env)
    return Channels(key, context, env.ogmios_url, deployment, ChannelStore(env.state_dir))


@command(app, "open")
def open_(
    env: Env,
    provider: Annotated[str, typer.Option(help="The provider's id (its key hash, or a unique "
                                          "prefix) or payout address, as `offers search` "
                                          "lists it.")],
    deposit: Annotated[str, typer.Option(help="ADA the provider may claim with your IOUs, e.g. "
                                         "10 or 2.5ADA.")],
    close_period: Annotated[str, typer.Option(help="Once you start a close, how long the "
                                              "provider has for its last claim: 90s, 30min, "
                                              "1h, 2d.")] = "1h",
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Lock without asking.")] = False,
    unsigned_tx: UnsignedTx = None,
    as_json: Json = False,
) -> None:  # fmt: skip
    """Open a channel to a provider: lock a deposit it is paid from, IOU by IOU, as you use its
    service (its address and key come from its offer, whose signature is checked). With
    --unsigned-tx nothing is asked here: your wallet asks when it signs."""
    from consumer.sdk.channels import find_provider

    lovelace = lovelace_of("--deposit", deposit)
    period_ms = duration_ms("--close-period", close_period)
    sdk = channel_sdk(env)
    found = find_provider(market_reader(env), provider, env.market_identity, sdk.key.network)
    if not as_json:
        typer.echo("\n".join([
            f"channel to provider {found.provider_id} (its signed offer: checked)",
            f"  pays to     {found.address}",
            f"  deposit     {ada(lovelace)}: the most your IOUs can give it; the output's "
            "minimum is added and comes back at the close",
            f"  close       {close_period}: after you start a close, the provider has this "
            "long for its last claim, then `channel close` again takes the rest",
        ]))  # fmt: skip
    if unsigned_tx is not None:
        prepared = run_sync(sdk.prepare_open(found, lovelace, period_ms))
        defer(env, sdk.key, prepared, unsigned_tx, as_json,
              channel_id=prepared.facts["record"]["channel_id"])  # fmt: skip
        return
    if not yes:
        if as_json:
            raise ConsumerError("--json needs --yes: there is no one to ask")
        if not typer.confirm(f"lock {ada(lovelace)} in this channel?"):
            typer.echo("nothing locked")
            return
    report_open(as_json, "channel-open", {}, run_sync(sdk.open(found, lovelace, period_ms)))


def report_open(as_json: bool, kind: str, facts: dict[str, Any], result: Any) -> None:
    """What an open did, once in a block: `result` is the record kept and the transaction."""
    record, tx = result
    locked = tx.transaction_body.outputs[0].amount.coin
    emit(as_json, {"channel_id": record.channel_id, "provider_id": record.provider_id,
                   "provider_address": record.provider_address, "deposit": record.funded,
                   "locked": locked, "close_period_ms": record.close_period_ms,
                   "tx_id": record.open_tx_id, "fee": tx.transaction_body.fee},
         f"channel {record.channel_id} open: {ada(locked)} locked (transaction "
         f"{record.open_tx_id})")  # fmt: skip


@command(app, "top-up")
def top_up(
    env: Env,
    channel_id: ChannelId,
    amount: Annotated[str, typer.Option(help="ADA to add, e.g. 5 or 0.5ADA.")],
    unsigned_tx: UnsignedTx = None,
    as_json: Json = False,
) -> None:
    """Add funds to an open channel: its provider may claim that much more."""
    lovelace = lovelace_of("--amount", amount)
    sdk = channel_sdk(env)
    prepared = run_sync(sdk.prepare_top_up(channel_id, lovelace))
    if unsigned_tx is not None:
        defer(env, sdk.key, prepared, unsigned_tx, as_json, **prepared.facts)
        return
    report_top_up(as_json, prepared.kind, prepared.facts, run_sync(sdk.run(prepared)))


def report_top_up(as_json: bool, kind: str, facts: dict[str, Any], result: Any) -> None:
    """What a top-up did, once in a block: `result` is the record counted and the transaction."""
    record, tx = result
    lovelace, tx_id = facts["lovelace"], tx.id.payload.hex()
    emit(as_json, {"channel_id": record.channel_id, "added": lovelace, "deposit": record.funded,
                   "tx_id": tx_id, "fee": tx.transaction_body.fee},
         f"channel {record.channel_id} topped up by {ada(lovelace)}: its provider may claim "
         f"{ada(record.funded)} in all (transaction {tx_id})")  # fmt: skip


@command(app, "status")
def status(env: Env, channel_id: ChannelId, as_json: Json = False) -> None:
    """The channel as the chain has it now: deposit, claimed, what you signed, what is left."""
    from offchain.chain.time import iso

    now = channel_sdk(env).status(channel_id)
    lines = [
        f"channel {now.record.channel_id}: {now.state}",
        f"  provider  {now.record.provider_id} ({now.record.provider_address})",
        f"  deposit   {ada(now.deposit)} (what the provider may claim in all)",
        f"  claimed   {cell(now.claimed)}",
        f"  signed    {ada(now.signed)} in IOUs"
        + ("" if now.claimed is None else f" ({ada(now.signed - now.claimed)} not claimed yet)"),
        f"  left      {ada(now.left)} not signed",
        f"  on chain  {ada(now.lovelace)} at {now.utxo or '- (closed)'}",
    ]  # fmt: skip
    if now.closing_at is not None:
        lines.append(f"  closing   the provider may claim until {iso(now.closing_at)} chain "
                     f"time; then `unchained channel close {now.record.channel_id}` drains "
                     "the rest to you")  # fmt: skip
    emit(as_json, now.as_json(), "\n".join(lines))


@command(app, "close")
def close(
    env: Env, channel_id: ChannelId, unsigned_tx: UnsignedTx = None, as_json: Json = False
) -> None:
    """The close's next step: start it (the provider has the close period for its last
    claim), or once that period passed in chain time, take the rest back (drain)."""
    sdk = channel_sdk(env)
    prepared = run_sync(sdk.prepare_close(channel_id))
    if unsigned_tx is not None:
        defer(env, sdk.key, prepared, unsigned_tx, as_json, **prepared.facts)
        return
    report_close(as_json, prepared.kind, prepared.facts, run_sync(sdk.run(prepared)))


def report_close(as_json: bool, kind: str, facts: dict[str, Any], done: Any) -> None:
    """What a close's step did, once in a block (`Closed`)."""
    import dataclasses

    from offchain.chain.time import iso

    human = (
        f"closing: the provider may claim its last IOU until {iso(done.closing_at or 0)} chain "
        f"time; run `unchained channel close {done.channel_id}` after that to take the rest "
        f"(transaction {done.tx_id})"
        if done.how == "closing"
        else f"drained: {ada(done.returned)} back to you ({ada(done.fee)} fee) in transaction "
        f"{done.tx_id}"
    )  # fmt: skip
    emit(as_json, dataclasses.asdict(done), human)


def cell(value: int | None) -> str:
    """An amount in ADA, `-` where there is none (a closed channel's claims)."""
    return "-" if value is None else ada(value)


LIST_COLUMNS = ("channel", "provider", "state", "deposit", "claimed", "signed", "left", "opened")


@command(app, "list")
def list_channels(
    env: Env,
    local: Annotated[bool, typer.Option("--local", help="Only this state directory's records "
                                        "(no chain read).")] = False,
    as_json: Json = False,
) -> None:  # fmt: skip
    """Your channels, oldest first, from this state directory, each read from the chain
    (`--local`: the records alone)."""
    store = ChannelStore(env.state_dir)
    rows = [local_row(store, r) for r in store.all()] if local else [
        s.as_json() for s in channel_sdk(env).statuses()]  # fmt: skip
    if as_json:
        emit(True, rows, "")
        return
    from consumer.cli.table import render

    lines = [[row["channel_id"][:16], row["provider_id"][:16], row["state"] or "-",
              cell(row["deposit"]), cell(row["claimed"]), cell(row["signed"]),
              cell(row["left"]), local_time(row["created_ms"])] for row in rows]  # fmt: skip
    typer.echo(render(LIST_COLUMNS, lines))


def local_row(store: ChannelStore, record: ChannelRecord) -> dict[str, Any]:
    """A record as `list --local` shows it: what this renter funded and signed, no chain."""
    signed = store.signed(record.channel_id)
    return {
        "channel_id": record.channel_id, "state": None, "provider_id": record.provider_id,
        "provider_address": record.provider_address, "deposit": record.funded,
        "claimed": None, "signed": signed, "left": max(record.funded - signed, 0),
        "created_ms": record.created_ms, "close_period_ms": record.close_period_ms,
        "open_tx_id": record.open_tx_id, "closed_tx_id": record.closed_tx_id,
    }  # fmt: skip
