"""Decode a submitted transaction, keeping the original bytes the ledger hashes.

The ledger hashes what was sent, not a re-encoding: the tx id is the hash of the body's
original bytes, and the script-integrity hash covers the redeemers' and datums' original
bytes. So besides pycardano's `Transaction`, we keep byte spans of those parts.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib

from pycardano import RedeemerMap, Transaction

from devnet.errors import INVALID_PARAMS, LedgerError

ERAS_WITH_TRANSACTIONS = ("shelley", "allegra", "mary", "alonzo", "babbage", "conway")


@dataclasses.dataclass(frozen=True)
class DecodedTx:
    tx: Transaction
    cbor: bytes
    body_cbor: bytes
    witness_fields: dict[int, bytes]  # witness-set key -> original bytes of its value
    id: bytes

    @property
    def id_hex(self) -> str:
        return self.id.hex()

    @property
    def size(self) -> int:
        return len(self.cbor)

    @functools.cached_property
    def declared_ex_units(self) -> tuple[int, int]:
        """Total (memory, steps) the redeemers declare, in either redeemer encoding."""
        redeemers = self.tx.transaction_witness_set.redeemer
        if isinstance(redeemers, RedeemerMap):
            units = [value.ex_units for value in redeemers.values()]
        else:
            units = [redeemer.ex_units for redeemer in redeemers or ()]
        return sum(u.mem for u in units), sum(u.steps for u in units)


def decode_tx(cbor: bytes) -> DecodedTx:
    """Decode transaction CBOR, or raise LedgerError saying why it is not a transaction."""
    try:
        spans = array_item_spans(cbor, 0)
        if len(spans) != 4:
            raise ValueError(f"a transaction is a 4-element array, got {len(spans)} elements")
        if skip_item(cbor, 0) != len(cbor):
            raise ValueError("trailing bytes after the transaction")
        body_start, body_end = spans[0]
        wit_start = spans[1][0]
        witness_fields = map_value_spans(cbor, wit_start)
        tx = Transaction.from_cbor(cbor)
    except LedgerError:
        raise
    except Exception as exc:
        reason = f"not a valid Conway transaction: {exc}"
        raise LedgerError(
            INVALID_PARAMS,
            "Invalid transaction; it failed to deserialize in any known era. " + reason,
            dict.fromkeys(ERAS_WITH_TRANSACTIONS, reason),
        ) from exc
    body = cbor[body_start:body_end]
    return DecodedTx(
        tx=tx,
        cbor=cbor,
        body_cbor=body,
        witness_fields={k: cbor[s:e] for k, (s, e) in witness_fields.items()},
        id=hashlib.blake2b(body, digest_size=32).digest(),
    )


# --- a minimal CBOR walker that reports where items start and end (shared by the rules) ---


def read_head(data: bytes, pos: int) -> tuple[int, int | None, int]:
    """Read an item head: (major type, argument or None for indefinite, position after head)."""
    initial = data[pos]
    major, info = initial >> 5, initial & 0x1F
    pos += 1
    if info < 24:
        return major, info, pos
    if info in (24, 25, 26, 27):
        width = 1 << (info - 24)
        if pos + width > len(data):
            raise ValueError("truncated CBOR")
        return major, int.from_bytes(data[pos : pos + width], "big"), pos + width
    if info == 31 and major in (2, 3, 4, 5, 7):
        return major, None, pos
    raise ValueError(f"malformed CBOR head byte {initial:#x}")


def skip_item(data: bytes, pos: int) -> int:
    """Position just after the item starting at `pos`."""
    major, arg, pos = read_head(data, pos)
    if major in (0, 1, 7):
        return pos
    if major in (2, 3):
        if arg is None:
            while data[pos] != 0xFF:
                pos = skip_item(data, pos)
            return pos + 1
        if pos + arg > len(data):
            raise ValueError("truncated CBOR string")
        return pos + arg
    if major == 6:
        return skip_item(data, pos)
    per_entry = 2 if major == 5 else 1
    if arg is None:
        while data[pos] != 0xFF:
            pos = skip_item(data, pos)
        return pos + 1
    for _ in range(arg * per_entry):
        pos = skip_item(data, pos)
    return pos


def array_item_spans(data: bytes, pos: int) -> list[tuple[int, int]]:
    return [item for (item,) in _entry_spans(data, pos, 4, "array")]


def map_item_spans(data: bytes, pos: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The spans of a map's entries: (key, value) each."""
    return [(key, value) for key, value in _entry_spans(data, pos, 5, "map")]


def _entry_spans(data: bytes, pos: int, major: int, kind: str) -> list[list[tuple[int, int]]]:
    """The spans of an array's items (one each) or a map's entries (key and value), definite
    or indefinite."""
    found, count, pos = read_head(data, pos)
    if found != major:
        raise ValueError(f"expected a CBOR {kind}")
    entries = []
    while (count is None and data[pos] != 0xFF) or (count is not None and len(entries) < count):
        entry = []
        for _ in range(2 if major == 5 else 1):
            end = skip_item(data, pos)
            entry.append((pos, end))
            pos = end
        entries.append(entry)
    return entries


def map_value_spans(data: bytes, pos: int) -> dict[int, tuple[int, int]]:
    major, count, pos = read_head(data, pos)
    if major != 5:
        raise ValueError("expected a CBOR map for the witness set")
    values: dict[int, tuple[int, int]] = {}
    seen = 0
    while (count is None and data[pos] != 0xFF) or (count is not None and seen < count):
        key_major, key, value_pos = read_head(data, pos)
        if key_major != 0 or key is None:
            raise ValueError("witness-set keys must be unsigned integers")
        end = skip_item(data, value_pos)
        values[key] = (value_pos, end)
        pos = end
        seen += 1
    return values
