"""A provider's claim on one or more of its escrows: one signature the settle script checks
for all of them (PROTOCOL.md, batch settle).

A receipt is a claim on its one escrow (`Claim.of_receipt`), so any receipt settles as it is.
A provider's daemon may also sign one claim over many of its receipted escrows: a batch then
checks one signature for them all instead of one each, and carries one group in its
redeemer. Such a claim settles only all of its escrows together, in one transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pycardano import PaymentSigningKey, ScriptHash, TransactionInput

from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.payloads import claim_payload, receipt_note, sign, verify


@dataclasses.dataclass(frozen=True)
class Claim:
    """`units` for each escrow, signed together; `note` is the provider's, bound by the
    signature and never read on chain (a receipt's names its result and evidence)."""

    units: Mapping[TransactionInput, int]
    note: bytes
    signature: bytes

    @classmethod
    def sign(
        cls,
        key: PaymentSigningKey,
        network_id: int,
        settle_hash: ScriptHash,
        units: Mapping[TransactionInput, int],
        note: bytes = b"",
    ) -> Claim:
        """The claim `key` signs on these escrows of the deployment settled by `settle_hash`."""
        unsigned = cls(dict(units), note, b"")
        return dataclasses.replace(
            unsigned, signature=sign(key, unsigned.payload(network_id, settle_hash))
        )

    @classmethod
    def of_receipt(cls, receipt: Receipt) -> Claim:
        """The claim a receipt is: its one escrow, its hashes as the note."""
        note = receipt_note(receipt.result_hash, receipt.evidence_hash)
        return cls({receipt.escrow: receipt.units}, note, receipt.signature)

    def payload(self, network_id: int, settle_hash: ScriptHash) -> bytes:
        return claim_payload(network_id, settle_hash, self.note, self.units.items())

    def signed_by(self, vkey: bytes, network_id: int, settle_hash: ScriptHash) -> bool:
        """Whether `vkey` signed this claim for this deployment."""
        return verify(vkey, self.payload(network_id, settle_hash), self.signature)
