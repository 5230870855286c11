"""The provider's signatures: the Acceptance it gives when it takes a job, and the UsageReceipt
that pays it, both over the canonical payloads of `offchain.protocol` (one definition of the
bytes) and both for one escrow's out-ref only. Neither is signed before the escrow on chain
passes the escrow check for the job and this provider's offer: a signature for an escrow that
cannot settle as agreed is a bond the consumer may slash.

A receipt commits to what the runner measured: billable units from the metering record, the
output archive's sha256 as the result hash, the record's digest as the evidence hash.
"""

from __future__ import annotations

import dataclasses

from pycardano import Address, ChainContext, PaymentSigningKey, UTxO

from offchain.core.errors import UnchainedError
from offchain.protocol.checks.escrow_check import check_acceptable, check_settleable
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.offer import Offer
from offchain.protocol.job.receipt import EMPTY_HASH, Receipt
from offchain.protocol.ledger.payloads import acceptance_payload, sign
from offchain.protocol.tx.deployment import Deployment
from provider.sandbox.runner import RunResult


class ReceiptError(UnchainedError, ValueError):
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
    output = bytes.fromhex(result.output.sha256) if result.output else EMPTY_HASH
    record = result.record
    return ReceiptFields(record.billable_units, output, bytes.fromhex(record.digest()))


@dataclasses.dataclass(frozen=True)
class EscrowJob:
    """One job at one escrow as this provider takes it. Its offer is built from the key and
    the payout address, so the key that signs and the address it is paid at are those the
    escrow is checked against."""

    context: ChainContext
    deployment: Deployment
    escrow: UTxO
    spec: JobSpec
    price_per_unit: int  # what this provider asks per second of the spec's bundle
    key: PaymentSigningKey
    payout: Address  # the provider's payout address (`provider.keys.payout_address`)

    @property
    def offer(self) -> Offer:
        """This provider's offer for the spec: its key, its payout address, its price."""
        vkey = self.key.to_verification_key().payload
        return Offer(vkey, self.payout, self.price_per_unit, self.spec.resources)


def accept(job: EscrowJob, bond: UTxO | None) -> bytes:
    """The signed Acceptance of the job at the escrow, backed by `bond` (None: no bond), once
    the escrow is safe to accept (`check_acceptable`: EscrowRefused or BondRefused if not)."""
    datum = check_acceptable(job.context, job.deployment, job.escrow, job.spec, job.offer, bond)
    payload = acceptance_payload(
        job.deployment.network_id,
        job.deployment.escrow_hash,
        job.escrow.input,
        datum.job_id,
        job.deployment.bond_hash,
    )
    return sign(job.key, payload)


def receipt_for(job: EscrowJob, result: RunResult) -> Receipt:
    """The signed receipt that settles the escrow for `result`'s run, once the escrow is
    still settleable on the terms of the job (`check_settleable`). It never claims more units
    than the escrow pays for: the consumer agreed to no more (the evidence still shows the
    whole run)."""
    datum = check_settleable(job.context, job.deployment, job.escrow, job.spec, job.offer)
    fields = receipt_fields(result)
    units = min(fields.units, datum.max_units)
    return Receipt.sign(
        job.key, job.deployment.network_id, job.deployment.settle_hash, job.escrow.input, units,
        fields.result_hash, fields.evidence_hash,
    )  # fmt: skip
