"""A provider's signed usage receipt: the one type, encoded and decoded in this one place.

The provider signs it (`Receipt.sign`, the one place a receipt is signed), journals it and
hands it to the market, the market stores and serves it and settles it, the consumer checks
and keeps it: each reads and writes the same fields here, and signs or checks the same
canonical payload (`payload`: a `types.ClaimPayload` on this escrow alone, whose note binds the
result and evidence hashes; the settle script takes it as it is, see `claim.Claim`).

- `body`: what the provider hands the market for an escrow it already names (units, result
  and evidence hashes, signature); the provider's journal and the market's job row hold it;
- `record`: the self-contained form (the escrow's out-ref and the deployment's network and
  settle script beside the body), with the escrow's datum on chain all a verifier needs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from pycardano import PaymentSigningKey, ScriptHash, TransactionInput

from offchain.chain.utxo import format_out_ref, parse_out_ref
from offchain.core.errors import UnchainedError
from offchain.protocol.ledger.payloads import (
    HASH_BYTES,
    SIGNATURE_BYTES,
    receipt_payload,
    sign,
    verify,
)
from offchain.protocol.tx.deployment import Deployment

BODY_FIELDS = ("units", "result_hash", "evidence_hash", "signature")
# The hash a receipt names for what does not exist, sha256 of no bytes: a zero-unit receipt's
# result and evidence (a job refused, or failed before it ran: no archive, no metering record),
# and the result of a run that left no archive (its /out was over its limit).
EMPTY_HASH = hashlib.sha256(b"").digest()


class ReceiptFormatError(UnchainedError, ValueError):
    """JSON that is not a receipt; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Receipt:
    """What a provider signed to be paid `units` for the job at `escrow`."""

    escrow: TransactionInput
    units: int
    result_hash: bytes
    evidence_hash: bytes
    signature: bytes

    @classmethod
    def sign(
        cls,
        key: PaymentSigningKey,
        network_id: int,
        settle_hash: ScriptHash,
        escrow: TransactionInput,
        units: int,
        result_hash: bytes,
        evidence_hash: bytes,
    ) -> Receipt:
        """The receipt `key` signs for `units` of the job at `escrow` of this deployment
        (whose settle script is `settle_hash`)."""
        unsigned = cls(escrow, units, result_hash, evidence_hash, b"")
        signature = sign(key, unsigned.payload(network_id, settle_hash))
        return dataclasses.replace(unsigned, signature=signature)

    def payload(self, network_id: int, settle_hash: ScriptHash) -> bytes:
        """The bytes signed: the on-chain ClaimPayload this is, for this deployment's escrows."""
        return receipt_payload(
            network_id, settle_hash, self.escrow, self.units, self.result_hash,
            self.evidence_hash,
        )  # fmt: skip

    def signed_by(self, vkey: bytes, network_id: int, settle_hash: ScriptHash) -> bool:
        """Whether `vkey` signed this receipt for this escrow of this deployment."""
        return verify(vkey, self.payload(network_id, settle_hash), self.signature)

    def body(self) -> dict[str, int | str]:
        return {
            "units": self.units,
            "result_hash": self.result_hash.hex(),
            "evidence_hash": self.evidence_hash.hex(),
            "signature": self.signature.hex(),
        }

    def record(self, deployment: Deployment) -> dict[str, int | str]:
        return {
            "escrow": format_out_ref(self.escrow),
            "network_id": deployment.network_id,
            "settle_hash": deployment.settle_hash.payload.hex(),
            **self.body(),
        }

    @classmethod
    def from_body(
        cls, escrow: TransactionInput, data: Mapping[str, Any], prefix: str = ""
    ) -> Receipt:
        """The receipt for `escrow` in `data`'s body fields, each named `prefix` + field (the
        market serves them as receipt_units, ...); ReceiptFormatError naming a bad one."""
        units = _field(data, prefix, "units")
        if not isinstance(units, int) or isinstance(units, bool) or units < 0:
            raise ReceiptFormatError(f"{prefix}units: a non-negative integer, got {units!r}")
        return cls(
            escrow, units,
            _hex(data, prefix, "result_hash", HASH_BYTES),
            _hex(data, prefix, "evidence_hash", HASH_BYTES),
            _hex(data, prefix, "signature", SIGNATURE_BYTES),
        )  # fmt: skip

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Receipt:
        """A receipt from its self-contained record (`record`'s output)."""
        try:
            escrow = parse_out_ref(str(_field(data, "", "escrow")))
        except ValueError as exc:
            raise ReceiptFormatError(f"escrow: {exc}") from exc
        return cls.from_body(escrow, data)


def _field(data: Mapping[str, Any], prefix: str, name: str) -> Any:
    try:
        return data[prefix + name]
    except KeyError:
        raise ReceiptFormatError(f"{prefix}{name}: required field is missing") from None


def _hex(data: Mapping[str, Any], prefix: str, name: str, size: int) -> bytes:
    value = _field(data, prefix, name)
    try:
        raw = bytes.fromhex(value)
    except (TypeError, ValueError):
        raw = b""
    if len(raw) != size:
        raise ReceiptFormatError(f"{prefix}{name}: {size} bytes in hex, got {value!r}")
    return raw
