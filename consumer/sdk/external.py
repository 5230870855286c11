"""What an external wallet hands back for an unsigned transaction, in the forms wallets give
it: the signed transaction as CBOR hex, the same inside a cardano-cli TextEnvelope (`cborHex`),
or only a witness set (what CIP-30 `signTx` returns), which is merged into the unsigned
transaction the renter built. Whether the result is the right transaction, rightly signed, is
checked after (`consumer.sdk.pending`)."""

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


def whole_or_witnesses(cbor: bytes) -> Transaction | TransactionWitnessSet:
    """What `cbor` is: a whole transaction or a witness set alone."""
    try:
        return Transaction.from_cbor(cbor)
    except Exception:  # pycardano raises several kinds for other bytes
        pass
    try:
        return TransactionWitnessSet.from_cbor(cbor)
    except Exception as exc:
        raise ConsumerError(f"not a signed transaction: expected {FORMS}") from exc


def signed_tx(cbor: bytes, unsigned_hex: str) -> Transaction:
    """The signed transaction in `cbor`: a whole transaction, or a witness set whose key
    witnesses are added to the unsigned one `unsigned_hex` (CBOR hex, as written for the
    wallet; witnesses it holds already, a co-signer's, are kept)."""
    given = whole_or_witnesses(cbor)
    if isinstance(given, Transaction):
        return given
    return merged(given, unsigned_hex)


def merged(witnesses: TransactionWitnessSet, unsigned_hex: str) -> Transaction:
    """The transaction `unsigned_hex` with the key witnesses of `witnesses` added."""
    unsigned = Transaction.from_cbor(bytes.fromhex(unsigned_hex))
    kept = unsigned.transaction_witness_set
    added = [*(kept.vkey_witnesses or []), *(witnesses.vkey_witnesses or [])]
    kept.vkey_witnesses = NonEmptyOrderedSet(added) if added else None
    return Transaction(unsigned.transaction_body, kept, unsigned.valid, unsigned.auxiliary_data)
