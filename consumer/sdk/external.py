"""What an external wallet hands back for the unsigned lock, in the forms wallets give it:
the signed transaction as CBOR hex, the same inside a cardano-cli TextEnvelope (`cborHex`),
or only a witness set (what CIP-30 `signTx` returns), which is merged into the unsigned lock
the consumer built. Whether the result is the right lock, rightly signed, is checked after."""

from __future__ import annotations

import json

from pycardano import NonEmptyOrderedSet, Transaction, TransactionWitnessSet

from consumer.sdk.errors import ConsumerError

FORMS = "CBOR hex, a cardano-cli TextEnvelope (cborHex) or a CIP-30 witness set"


def signed_cbor(text: str) -> bytes:
    """The CBOR in a file's text: bare hex or a TextEnvelope's `cborHex`."""
    text = text.strip()
    if text.startswith("{"):
        try:
            text = str(json.loads(text)["cborHex"])
        except (ValueError, KeyError, TypeError) as exc:
            message = f"a JSON file must be a TextEnvelope with cborHex ({FORMS})"
            raise ConsumerError(message) from exc
    try:
        return bytes.fromhex(text)
    except ValueError as exc:
        raise ConsumerError(f"not a signed transaction: expected {FORMS}") from exc


def signed_lock(cbor: bytes, unsigned_hex: str | None) -> Transaction:
    """The signed lock in `cbor`: a whole transaction, or a witness set whose key witnesses are
    added to the unsigned lock `unsigned_hex` (CBOR hex, as written for the wallet)."""
    try:
        return Transaction.from_cbor(cbor)
    except Exception:  # pycardano raises several kinds for other bytes
        pass
    try:
        witnesses = TransactionWitnessSet.from_cbor(cbor)
    except Exception as exc:
        raise ConsumerError(f"not a signed transaction: expected {FORMS}") from exc
    if unsigned_hex is None:
        raise ConsumerError(
            "a witness set alone needs the unsigned lock this state directory recorded, and "
            "there is none: pass the whole signed transaction"
        )
    unsigned = Transaction.from_cbor(bytes.fromhex(unsigned_hex))
    merged = unsigned.transaction_witness_set
    added = [*(merged.vkey_witnesses or []), *(witnesses.vkey_witnesses or [])]
    merged.vkey_witnesses = NonEmptyOrderedSet(added) if added else None
    return Transaction(unsigned.transaction_body, merged, unsigned.valid, unsigned.auxiliary_data)
