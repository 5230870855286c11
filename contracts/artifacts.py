"""Load the committed validator artifacts and apply their Data parameters, without a compiler.

Every chain command (consumer, provider, market) needs the parameterised scripts, and importing
the OpShin compiler or the `uplc` library for that took seconds per command. Applying a
parameter only wraps the committed term as `[term (con data p)]`, so it is done here on the
flat bits directly: the committed program's term is skipped over to find its end, the apply
tags go before it and the constants after it. `contracts.scripts` builds the artifacts;
tests/contracts/test_build.py checks this against opshin's own `apply_parameters`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import cbor2
from pycardano import PlutusV3Script

BUILD_DIR = Path(__file__).resolve().parent / "build"
SCRIPT_FILE = "script.cbor"
HASH_FILE = "script.hash"
BLUEPRINT_FILE = "plutus.json"

# Flat term tags (4 bits) and constant type tags (4 bits), from the Plutus Core specification.
APPLY, CONSTANT = "0011", "0100"
DATA_TYPE = "1" + "1000" + "0"  # the type list [data]
TYPE_PROTO_LIST, TYPE_PROTO_PAIR, TYPE_APPLY = 5, 6, 7


class _Bits:
    """A cursor over a flat bit string (of '0'/'1') that copies what it reads to `out`, which
    starts at bit `at_out` of its program: a bytestring's filler is rewritten for its new
    position (a term moved by a number of bits that is not a multiple of 8 needs new ones)."""

    def __init__(self, bits: str, at_out: int) -> None:
        self.bits, self.at, self.out, self.at_out = bits, 0, [], at_out

    def take(self, n: int) -> int:
        piece = self.bits[self.at : self.at + n]
        self.at += n
        self.write(piece)
        return int(piece, 2)

    def write(self, piece: str) -> None:
        self.out.append(piece)
        self.at_out += len(piece)

    def natural(self) -> int:
        value, shift = 0, 0
        while True:
            more, word = self.take(1), self.take(7)
            value |= word << shift
            shift += 7
            if not more:
                return value

    def bytestring(self) -> None:
        self.at = self.bits.index("1", self.at) + 1  # the old filler 0*1 up to a byte boundary
        self.write(_filler(self.at_out))
        while size := self.take(8):
            self.take(8 * size)

    def items(self, skip: Callable[[], object]) -> None:
        while self.take(1):
            skip()

    def term(self) -> None:
        tag = self.take(4)
        if tag == 0:  # variable
            self.natural()
        elif tag in (1, 2, 5):  # delay, lambda, force
            self.term()
        elif tag == 3:  # apply
            self.term()
            self.term()
        elif tag == 4:  # constant
            types: list[int] = []
            self.items(lambda: types.append(self.take(4)))
            self.value(types)
        elif tag == 7:  # builtin
            self.take(7)
        elif tag == 8:  # constr
            self.natural()
            self.items(self.term)
        elif tag == 9:  # case
            self.term()
            self.items(self.term)
        elif tag != 6:  # error has no body
            raise ValueError(f"unknown flat term tag {tag}")

    def value(self, types: list[int]) -> list[int]:
        """Skip one constant of the type at the head of `types`; returns the rest."""
        head, rest = types[0], types[1:]
        if head == 0:  # integer (zigzag natural)
            self.natural()
        elif head in (1, 2, 8):  # bytestring, string (UTF-8), data (CBOR)
            self.bytestring()
        elif head == 4:  # bool
            self.take(1)
        elif head == TYPE_APPLY and rest[0] == TYPE_PROTO_LIST:
            element = rest[1:]
            self.items(lambda: self.value(element))
            return _after(element)
        elif head == TYPE_APPLY and rest[:2] == [TYPE_APPLY, TYPE_PROTO_PAIR]:
            second = self.value(rest[2:])
            return self.value(second)
        elif head != 3:  # unit has no body
            raise ValueError(f"unsupported flat constant type {types}")
        return rest


def _after(types: list[int]) -> list[int]:
    """What follows one whole type at the head of `types`."""
    head, rest = types[0], types[1:]
    if head != TYPE_APPLY:
        return rest
    if rest[0] == TYPE_PROTO_LIST:
        return _after(rest[1:])
    return _after(_after(rest[2:]))  # pair a b


def _filler(at: int) -> str:
    """Flat's padding from bit `at` to the next byte boundary: 0*1, at least one bit."""
    return "0" * (7 - at % 8) + "1"


def _flat_bytestring(data: bytes, at: int) -> str:
    """A flat bytestring starting at bit `at`: the filler, chunks of up to 255 bytes, 0."""
    filler = _filler(at)
    chunks = "".join(
        f"{len(chunk):08b}" + "".join(f"{b:08b}" for b in chunk)
        for chunk in (data[i : i + 255] for i in range(0, len(data), 255))
    )
    return filler + chunks + "00000000"


def _data_cbor(value: int | bytes) -> bytes:
    """Plutus Data I or B as CBOR (a long bytestring would need chunks: none here is long)."""
    if isinstance(value, bytes) and len(value) >= 64:
        raise ValueError("a bytes parameter of 64 bytes or more is not supported")
    return cbor2.dumps(value)


@functools.cache
def _committed(name: str) -> str:
    """The committed program as flat bits."""
    flat = cbor2.loads(bytes.fromhex((BUILD_DIR / name / SCRIPT_FILE).read_text().strip()))
    return "".join(f"{b:08b}" for b in flat)


def apply_parameters(name: str, *parameters: int | bytes) -> PlutusV3Script:
    """The committed script `name` with Data parameters (I or B) applied in order, as opshin's
    validator wrapper expects them: `[[term p1] p2]...`."""
    cursor = _Bits(_committed(name), 0)
    for _ in range(3):  # version: major.minor.patch
        cursor.natural()
    cursor.write(APPLY * len(parameters))
    cursor.term()
    bits = "".join(cursor.out)
    for value in parameters:
        bits += CONSTANT + DATA_TYPE
        bits += _flat_bytestring(_data_cbor(value), len(bits))
    bits += _filler(len(bits))  # the program's padding
    flat = int(bits, 2).to_bytes(len(bits) // 8, "big")
    return PlutusV3Script(cbor2.dumps(flat))


def settle_script(network_id: int, reference: bool = False) -> PlutusV3Script:
    """The batch settle script for a network (0 testnets, 1 mainnet): the hand-written one,
    or with `reference` its OpShin reference (tests run both on the same vectors)."""
    return apply_parameters("settle_reference" if reference else "settle", network_id)


def escrow_script(settle_hash: bytes, refund_window_ms: int) -> PlutusV3Script:
    """The escrow validator settled by the script `settle_hash`, where only the consumer may
    refund for `refund_window_ms` after an escrow's close."""
    if len(settle_hash) != 28:
        raise ValueError("settle_hash must be a 28-byte script hash")
    if refund_window_ms < 0:
        raise ValueError("refund_window_ms must not be negative")
    return apply_parameters("escrow", settle_hash, refund_window_ms)


def bond_script(
    network_id: int, escrow_hash: bytes, notice_ms: int, slash_share_bps: int
) -> PlutusV3Script:
    """The bond validator tied to one escrow script, notice period and slash share."""
    if len(escrow_hash) != 28:
        raise ValueError("escrow_hash must be a 28-byte script hash")
    if not 0 <= slash_share_bps <= 10_000:
        raise ValueError("slash_share_bps must be within 0..10000")
    return apply_parameters("bond", network_id, escrow_hash, notice_ms, slash_share_bps)


def claim_script(network_id: int, reference: bool = False) -> PlutusV3Script:
    """The batch channel claim script for a network (0 testnets, 1 mainnet): the
    hand-written one, or with `reference` its OpShin reference (tests run both)."""
    return apply_parameters("claim_reference" if reference else "claim", network_id)


def channel_script(claim_hash: bytes) -> PlutusV3Script:
    """The channel validator whose claims the script `claim_hash` checks."""
    if len(claim_hash) != 28:
        raise ValueError("claim_hash must be a 28-byte script hash")
    return apply_parameters("channel", claim_hash)
