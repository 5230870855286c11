"""The canonical signed payloads: the bytes a provider signs and every validator checks.

A payload is `serialise_data` of a ClaimPayload or Acceptance (contracts/PROTOCOL.md): the domain,
network id, script hash and the escrows' out-refs make a signature worthless on any other
escrow, network or script version; an Acceptance also names the bond script it binds. A
receipt is a ClaimPayload of one escrow whose note binds the job's result and evidence hashes.
Provider, market, consumer and tests all sign and verify through this module, so there is one
definition of the bytes. An IOU's payload is written directly and signatures are PyNaCl's: a
client that only signs IOUs (`unchained endpoint call`) imports neither pycardano nor the
ledger's Plutus types, which take a second.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

if TYPE_CHECKING:
    from pycardano import ScriptHash, TransactionInput

CLAIM_DOMAIN = b"UNCHAINED/claim/v1"
ACCEPT_DOMAIN = b"UNCHAINED/accept/v1"
IOU_DOMAIN = b"UNCHAINED/iou/v1"
HASH_BYTES = 32  # a receipt's result and evidence hashes, an escrow's job id: sha256
SIGNATURE_BYTES = 64
VKEY_BYTES = 32


class PayloadSigner(Protocol):
    """A key that signs payloads: pycardano's signing keys (plain or extended), and
    `consumer.sdk.request_key.RequestKey`."""

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature (64 bytes) over `data`."""
        ...


def claim_payload(
    network_id: int,
    settle_hash: ScriptHash,
    note: bytes,
    claims: Iterable[tuple[TransactionInput, int]],
) -> bytes:
    """What a provider signs to be paid `units` for each escrow of `claims` in one batch,
    settled by the script `settle_hash` (the escrows in descending ledger order, as the
    script lists them)."""
    from pycardano import IndefiniteList

    from offchain.protocol.ledger.types import ClaimPayload, TxOutRef
    from offchain.protocol.tx.tx_reader import ledger_order

    flat: list[TxOutRef | int] = []
    for escrow, units in sorted(claims, key=lambda claim: ledger_order(claim[0]), reverse=True):
        flat += [TxOutRef.of(escrow), units]
    return ClaimPayload(
        CLAIM_DOMAIN, network_id, settle_hash.payload, note, IndefiniteList(flat)
    ).to_cbor()


def receipt_note(result_hash: bytes, evidence_hash: bytes) -> bytes:
    """A receipt's note: what it binds beside the units (sha256 of both hashes)."""
    return hashlib.sha256(result_hash + evidence_hash).digest()


def receipt_payload(
    network_id: int,
    settle_hash: ScriptHash,
    escrow: TransactionInput,
    units: int,
    result_hash: bytes,
    evidence_hash: bytes,
) -> bytes:
    """What the provider signs to be paid `units` for the job locked at `escrow`: a claim on
    that escrow alone, usable on chain as it is, that names the job's result and evidence."""
    note = receipt_note(result_hash, evidence_hash)
    return claim_payload(network_id, settle_hash, note, [(escrow, units)])


def acceptance_payload(
    network_id: int,
    escrow_hash: ScriptHash,
    escrow: TransactionInput,
    job_id: bytes,
    bond_hash: ScriptHash,
) -> bytes:
    """What the provider signs when it takes the job at `escrow`: a bond of script
    `bond_hash` backs it, and no bond of another version can be slashed with it."""
    from offchain.protocol.ledger.types import Acceptance, TxOutRef

    acceptance = Acceptance(
        ACCEPT_DOMAIN,
        network_id,
        escrow_hash.payload,
        TxOutRef.of(escrow),
        job_id,
        bond_hash.payload,
    )
    return acceptance.to_cbor()


def iou_payload(
    network_id: int, channel_hash: ScriptHash | bytes, channel: bytes, amount: int
) -> bytes:
    """What a renter signs to let channel `channel` (its terms hash) of the channel script
    `channel_hash` (a ScriptHash or its bytes) pay its provider `amount` lovelace in all: the
    CBOR of Iou(IOU_DOMAIN, network_id, channel_hash, channel, amount), written directly because
    a provider checks one per request (pycardano's encoder costs a millisecond; the tests hold
    the two byte for byte)."""
    if not 0 <= network_id < 2**64 or not 0 <= amount < 2**64:
        raise ValueError("an IOU's network id and amount are unsigned 64-bit integers")
    script = channel_hash if isinstance(channel_hash, bytes) else channel_hash.payload
    fields = (
        _cbor_bytes(IOU_DOMAIN)
        + _cbor_head(0, network_id)
        + _cbor_bytes(script)
        + _cbor_bytes(channel)
        + _cbor_head(0, amount)
    )
    return IOU_OPEN + fields + IOU_CLOSE


IOU_OPEN = bytes([0xD8, 0x79, 0x9F])  # tag 121 (constructor 0), an indefinite list: pycardano's
IOU_CLOSE = bytes([0xFF])


def _cbor_head(major: int, value: int) -> bytes:
    """A CBOR item head in its shortest form (RFC 8949, preferred serialisation)."""
    if value < 24:
        return bytes([major << 5 | value])
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if value < 1 << (8 * size):
            return bytes([major << 5 | extra]) + value.to_bytes(size, "big")
    raise ValueError("a CBOR head holds at most 64 bits")


def _cbor_bytes(data: bytes) -> bytes:
    """A definite byte string (Plutus Data splits only strings over 64 bytes; ours are not)."""
    if len(data) > 64:
        raise ValueError("IOU byte strings are at most 64 bytes")
    return _cbor_head(2, len(data)) + data


def sign(key: PayloadSigner, payload: bytes) -> bytes:
    """An ed25519 signature over `payload`, as `verify_ed25519_signature` checks it on chain."""
    return key.sign(payload)


def verify(vkey: bytes, payload: bytes, signature: bytes) -> bool:
    """Whether `signature` is the holder of the 32-byte `vkey` signing `payload`."""
    if len(vkey) != VKEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        VerifyKey(vkey).verify(payload, signature)
    except BadSignatureError:
        return False
    return True
