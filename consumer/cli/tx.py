"""`unchained tx ...`: transactions your wallet signs outside this process. Each renter command
that signs a transaction (`job submit`, `job refund`, `job slash`, `job cancel`, `channel
open`, `channel top-up`, `channel close`) takes `--unsigned-tx FILE`: it writes the
transaction unsigned and records it pending (`consumer.sdk.pending`). `tx submit TXID SIGNED`
checks what the wallet gave back (the same transaction, a valid witness of your key), submits
it, waits for its block and finishes the command as if it had signed it itself; `tx pending`
lists them, `tx drop` forgets one the wallet will not sign. (No `from
__future__ import annotations`: typer reads these annotations.)"""

from pathlib import Path
from typing import Annotated, Any

import typer

from consumer.cli.main import Env, Json, command, emit, opened, run_sync

app = typer.Typer(help="Transactions signed by your wallet: submit them, list those pending.",
                  no_args_is_help=True)  # fmt: skip

SIGNED_HELP = ("What your wallet signed: the transaction as CBOR hex, a cardano-cli TextEnvelope "
               "(cborHex) or a CIP-30 witness set.")  # fmt: skip


@command(app, "submit")
def submit(
    env: Env,
    tx_id: Annotated[str, typer.Argument(
        metavar="TXID", help="The pending transaction's id (or a unique prefix of it), as the "
        "command that wrote it printed.")],
    signed: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=SIGNED_HELP)],
    as_json: Json = False,
) -> None:  # fmt: skip
    """Submit a transaction your wallet signed (from a command's --unsigned-tx): checked to be
    the one built, with a valid signature of your key; then finish that command."""
    finish_pending(env, tx_id, signed, as_json)


def finish_pending(env: Env, given: str, signed: Path, as_json: bool) -> None:
    """Check the wallet's answer in `signed` against the pending transaction `given` names,
    submit it, wait for its block, do its command's bookkeeping and report as that command
    does. A refusal before the submit changes nothing."""
    from consumer.sdk.external import signed_cbor
    from consumer.sdk.pending import PendingStore

    store = PendingStore(env.state_dir)
    text = signed.read_bytes().decode(errors="replace")  # not text: not hex either
    pending, tx = store.accept(given, signed_cbor(text))

    async def go() -> Any:
        if pending.kind.startswith("channel-"):
            from consumer.cli.channel import channel_sdk

            channels = channel_sdk(env)
            await store.submit(env.ogmios_url, pending, tx)
            return channels.finish(pending.kind, pending.facts, tx)
        async with opened(env) as consumer:
            if pending.kind == "lock":  # its escrow is reported in a signed request
                consumer.key.can_sign("report the escrow to the market")  # before the submit
            await store.submit(env.ogmios_url, pending, tx)
            return await consumer.finish(pending.kind, pending.facts, tx)

    result = run_sync(go())
    reporters()[pending.kind](as_json, pending.kind, pending.facts, result)


def reporters() -> dict[str, Any]:
    """Each kind's report, the one its own command prints once signed here."""
    from consumer.cli.channel import report_close, report_open, report_top_up
    from consumer.cli.main import report_cancel, report_lock, report_money_back

    return {"lock": report_lock, "refund": report_money_back, "slash": report_money_back,
            "cancel": report_cancel,
            "channel-open": report_open, "channel-top-up": report_top_up,
            "channel-close": report_close, "channel-drain": report_close}  # fmt: skip


@command(app, "drop")
def drop(
    env: Env,
    tx_id: Annotated[str, typer.Argument(
        metavar="TXID", help="The pending transaction's id (or a unique prefix of it).")],
    as_json: Json = False,
) -> None:  # fmt: skip
    """Forget a pending transaction your wallet will not sign: the coins it spends are free
    for the next command (nothing was on chain, so nothing is lost)."""
    from consumer.sdk.pending import PendingStore, describe

    dropped = PendingStore(env.state_dir).drop(tx_id)
    emit(as_json, {"tx_id": dropped.tx_id, "kind": dropped.kind},
         f"dropped the pending {describe(dropped)} (transaction {dropped.tx_id})")  # fmt: skip


@command(app, "pending")
def pending(
    env: Env,
    every: Annotated[bool, typer.Option("--all", help="Those submitted too.")] = False,
    as_json: Json = False,
) -> None:
    """The transactions built here for your wallet and not submitted yet, oldest first."""
    from consumer.cli.table import render
    from consumer.sdk.pending import PendingStore, describe
    from consumer.sdk.store import local_time

    found = [p for p in PendingStore(env.state_dir).all() if every or p.submitted_ms is None]
    rows = [{"tx_id": p.tx_id, "kind": p.kind, "what": describe(p), "created_ms": p.created_ms,
             "submitted_ms": p.submitted_ms} for p in found]  # fmt: skip
    lines = [[p.tx_id[:16], describe(p), local_time(p.created_ms),
              local_time(p.submitted_ms) if p.submitted_ms else "-"] for p in found]  # fmt: skip
    emit(as_json, rows, render(("transaction", "what", "built", "submitted"), lines))
