"""`--unsigned-tx FILE`, taken by every renter command that signs a transaction: instead of
signing with `--key`, the command writes the transaction unsigned for a wallet and records it
pending in the state directory (`consumer.sdk.pending`); `unchained tx submit TXID SIGNED`
finishes it. Light at import: typer reads the option in the command's module."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from consumer.cli.main import Env
    from consumer.sdk.keys import ConsumerKey
    from consumer.sdk.pending import Prepared

UnsignedTx = Annotated[
    Path | None,
    typer.Option(
        help="Write the transaction unsigned (CBOR hex) here for your wallet instead of signing "
        "with --key (a .vkey is enough then); `unchained tx submit TXID SIGNED` submits what "
        "the wallet signed and finishes the command."
    ),
]


def defer(
    env: "Env", key: "ConsumerKey", prepared: "Prepared", path: Path, as_json: bool,
    **shown: Any,
) -> None:  # fmt: skip
    """Write `prepared` unsigned to `path`, record it pending, and say what to run next
    (`shown`: the command's own facts, in the JSON)."""
    from consumer.cli.main import emit
    from consumer.sdk.pending import PendingStore, describe

    pending = PendingStore(env.state_dir).defer(prepared, key, path)
    emit(as_json, {**shown, "kind": pending.kind, "tx_id": pending.tx_id,
                   "fee": prepared.tx.transaction_body.fee, "unsigned_tx": str(path)},
         f"unsigned {describe(pending)} written to {path} (transaction {pending.tx_id}): sign "
         f"it with your wallet, then `unchained tx submit {pending.tx_id[:16]} "
         "SIGNED_FILE`")  # fmt: skip
