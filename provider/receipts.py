"""The provider's signatures: the Acceptance it gives when it takes a job, and the UsageReceipt
that pays it, both over the canonical payloads of `offchain.protocol` (one definition of the
bytes) and both for one escrow's out-ref only.

A receipt commits to what the runner measured: billable units from the metering record, the
output archive's sha256 as the result hash, the record's digest as the evidence hash.
"""

from __future__ import annotations

import dataclasses
import hashlib

from pycardano import PaymentSigningKey, UTxO

from offchain.protocol.deployment import Deployment
from offchain.protocol.escrow import SignedReceipt, escrow_datum, signed_receipt
from offchain.protocol.payloads import acceptance_payload, sign
from offchain.protocol.txbuild import BuildError, out_ref
from offchain.protocol.types import EscrowDatum
from provider.runner import RunResult

NO_OUTPUT_HASH = hashlib.sha256(b"").digest()  # the run left no archive (/out was over its limit)


class ReceiptError(ValueError):
    """No receipt or acceptance can be signed for this escrow or run; the message says why."""


@dataclasses.dataclass(frozen=True)
class ReceiptFields:
    """What a receipt claims for one run, before it is bound to an escrow and signed."""

    units: int
    result_hash: bytes
    evidence_hash: bytes

    def as_json(self) -> dict[str, int | str]:
        return {
            "units": self.units,
            "result_hash": self.result_hash.hex(),
            "evidence_hash": self.evidence_hash.hex(),
        }


def receipt_fields(result: RunResult) -> ReceiptFields:
    """Units, result hash and evidence hash of a run; a run that never started bills nothing
    and has no receipt."""
    if result.record is None:
        raise ReceiptError(f"job {result.job_id} never started ({result.error}): nothing to bill")
    output = bytes.fromhex(result.output.sha256) if result.output else NO_OUTPUT_HASH
    record = result.record
    return ReceiptFields(record.billable_units, output, bytes.fromhex(record.digest()))


def own_escrow(deployment: Deployment, escrow: UTxO, key: PaymentSigningKey) -> EscrowDatum:
    """The escrow's datum, if it is an escrow of this deployment naming this provider's key."""
    try:
        datum = escrow_datum(deployment, escrow)
    except BuildError as exc:
        raise ReceiptError(str(exc)) from exc
    vkey = key.to_verification_key().payload
    if datum.provider_vkey != vkey:
        raise ReceiptError(
            f"escrow {out_ref(escrow)} pays provider key {datum.provider_vkey.hex()}, "
            f"not this provider's {vkey.hex()}"
        )
    return datum


def accept(deployment: Deployment, escrow: UTxO, key: PaymentSigningKey) -> bytes:
    """The signed Acceptance of the job at `escrow`: the provider's bond backs it."""
    datum = own_escrow(deployment, escrow, key)
    payload = acceptance_payload(
        deployment.network_id,
        deployment.escrow_hash,
        escrow.input,
        datum.job_id,
        deployment.bond_hash,
    )
    return sign(key, payload)


def receipt_for(
    result: RunResult, escrow: UTxO, deployment: Deployment, key: PaymentSigningKey
) -> SignedReceipt:
    """The signed receipt that settles `escrow` for `result`'s run. It never claims more
    units than the escrow pays for: the consumer agreed to no more (the evidence still shows
    the whole run)."""
    datum = own_escrow(deployment, escrow, key)
    fields = receipt_fields(result)
    units = min(fields.units, datum.max_units)
    return signed_receipt(deployment, key, escrow, units, fields.result_hash, fields.evidence_hash)


def receipt_json(receipt: SignedReceipt, deployment: Deployment) -> dict[str, int | str]:
    """A signed receipt as JSON: with the escrow's datum on chain, all a verifier needs."""
    fields = ReceiptFields(receipt.units, receipt.result_hash, receipt.evidence_hash)
    return {
        "escrow": out_ref(receipt.escrow),
        "network_id": deployment.network_id,
        "escrow_hash": deployment.escrow_hash.payload.hex(),
        **fields.as_json(),
        "signature": receipt.signature.hex(),
    }
