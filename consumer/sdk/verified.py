"""What the renter checks of any job's results, escrowed or paid over a channel, before it
keeps or unpacks a byte: the receipt is the provider's (`signed_receipt`: a well-formed
Receipt for that out-ref, signed by the provider key the renter itself recorded, for this
deployment's network and settle script) and the archive is the one it signed for
(`kept_archive`: the download's sha256 is the receipt's result hash). One place, so both paths
refuse the same things with the same words."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pycardano import TransactionInput

from consumer.sdk.archive import unpack_archive
from consumer.sdk.errors import ResultMismatch
from offchain.protocol.job.receipt import Receipt, ReceiptFormatError
from offchain.protocol.tx.deployment import Deployment

RESULT_FILE = "result.tar"
RECEIPT_FILE = "receipt.json"


def signed_receipt(
    ref: TransactionInput, body: Mapping[str, Any], vkey: bytes, deployment: Deployment,
    prefix: str = "", whose: str = "the provider key",
) -> Receipt:  # fmt: skip
    """The receipt for `ref` in `body` (its fields named `prefix` + field), once `vkey`
    (`whose` key it is, in a refusal) is seen to have signed it; ResultMismatch otherwise:
    nothing is downloaded or unpacked."""
    try:
        receipt = Receipt.from_body(ref, body, prefix=prefix)
    except ReceiptFormatError as exc:
        raise ResultMismatch(f"no valid receipt was served: {exc}") from exc
    if not receipt.signed_by(vkey, deployment.network_id, deployment.settle_hash):
        raise ResultMismatch(
            f"the receipt is not signed by {whose} {vkey.hex()}: nothing was "
            "downloaded or unpacked",
            provider_vkey=vkey.hex(),
        )
    return receipt


def kept_archive(
    partial: Path, arrived: str, receipt: Receipt, into: Path, unpack: bool, kept: str
) -> tuple[Path, Path | None]:
    """The downloaded `partial` (sha256 `arrived`, hex) kept as `into/result.tar`, `kept` (the
    receipt as kept beside it) written to `into/receipt.json`, then unpacked into `into/out`
    (with `unpack`: an archive refused there leaves both verified files), once it is the
    archive `receipt` names; ResultMismatch otherwise, the download removed."""
    expected = receipt.result_hash.hex()
    if arrived != expected:
        partial.unlink()
        raise ResultMismatch(
            f"the result archive is not the one the provider signed for: expected sha256 "
            f"{expected}, arrived {arrived}; nothing was unpacked (removed the download)",
            expected=expected, arrived=arrived,
        )  # fmt: skip
    archive = into / RESULT_FILE
    partial.replace(archive)
    (into / RECEIPT_FILE).write_text(kept)
    return archive, unpack_archive(archive, into / "out") if unpack else None
