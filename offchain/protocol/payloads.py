"""The canonical signed payloads: the bytes a provider signs and every validator checks.

A payload is `serialise_data` of a Receipt or Acceptance (contracts/PROTOCOL.md): the domain,
network id, escrow script hash and the escrow's out-ref make a signature worthless on any
other escrow, network or script version; an Acceptance also names the bond script it binds.
Provider, market, consumer and tests all sign and verify through this module, so there is one
definition of the bytes.
"""

from __future__ import annotations

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from pycardano import ExtendedSigningKey, ScriptHash, SigningKey, TransactionInput

from offchain.protocol.types import Acceptance, Receipt, TxOutRef

RECEIPT_DOMAIN = b"UNCHAINED/receipt/v1"
ACCEPT_DOMAIN = b"UNCHAINED/accept/v1"
HASH_BYTES = 32  # a receipt's result and evidence hashes, an escrow's job id: sha256
SIGNATURE_BYTES = 64
VKEY_BYTES = 32


def receipt_payload(
    network_id: int,
    escrow_hash: ScriptHash,
    escrow: TransactionInput,
    units: int,
    result_hash: bytes,
    evidence_hash: bytes,
) -> bytes:
    """What the provider signs to be paid `units` for the job locked at `escrow`."""
    receipt = Receipt(
        RECEIPT_DOMAIN,
        network_id,
        escrow_hash.payload,
        TxOutRef.of(escrow),
        units,
        result_hash,
        evidence_hash,
    )
    return receipt.to_cbor()


def acceptance_payload(
    network_id: int,
    escrow_hash: ScriptHash,
    escrow: TransactionInput,
    job_id: bytes,
    bond_hash: ScriptHash,
) -> bytes:
    """What the provider signs when it takes the job at `escrow`: a bond of script
    `bond_hash` backs it, and no bond of another version can be slashed with it."""
    acceptance = Acceptance(
        ACCEPT_DOMAIN,
        network_id,
        escrow_hash.payload,
        TxOutRef.of(escrow),
        job_id,
        bond_hash.payload,
    )
    return acceptance.to_cbor()


def sign(key: SigningKey | ExtendedSigningKey, payload: bytes) -> bytes:
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
