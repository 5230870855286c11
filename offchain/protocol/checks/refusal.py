"""Why a UTxO read from the chain must not be relied on, and the checks every such reading
shares: anyone can lock anything at a script address, so its place, datum and value prove
nothing until checked.

Each refusal carries a `Refusal` code (for code: the market maps it to an answer, tests assert
it) and a message for people naming the UTxO and what was wrong.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from pycardano import Network, PlutusData, ScriptHash, UTxO

from offchain.core.errors import UnchainedError
from offchain.protocol.api.signed_request import KEY_HASH_BYTES
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.payloads import VKEY_BYTES
from offchain.protocol.ledger.types import PlutusAddress, StakingHash
from offchain.protocol.tx.tx_reader import plutus_cbor
from offchain.protocol.tx.txbuild import out_ref

D = TypeVar("D", bound=PlutusData)


class Refusal(StrEnum):
    """Every reason a check refuses an escrow, a bond or a channel."""

    NOT_AT_SCRIPT = "not at this deployment's script"
    DATUM_HASH = "datum hash instead of an inline datum"
    NO_DATUM = "no datum"
    MALFORMED_DATUM = "datum of the wrong shape"
    TOKENS = "native tokens in the value"
    REFERENCE_SCRIPT = "a reference script, whose bytes every spend pays for"
    KEY_LENGTH = "provider key is not 32 bytes"
    JOB_ID_LENGTH = "job id is not 32 bytes"
    RANGE = "a number out of range"
    ADDRESS = "an address nobody can be paid at"
    OTHER_KEY = "another provider's key"
    OTHER_ADDRESS = "another payout address"
    OTHER_PRICE = "not the offered price"
    BUNDLE = "more than the offered bundle"
    UNITS = "max units below the max duration"
    UNDERFUNDED = "locked lovelace below price x max units + fee allowance + return deposit"
    JOB_ID = "job id is not the spec's digest"
    CLOSED = "deadline + settle window has passed"
    NO_TIME = "too little time left to start, run and settle"
    TOO_SMALL = "bond below the minimum"
    NOTICE_ENDS = "unbonding notice ends before the close"
    OTHER_TERMS = "not the channel's terms"
    CLOSING = "the channel is closing"
    DEPOSIT = "channel deposit below the minimum"
    CLOSE_PERIOD = "close period too short to claim in"


class Refused(UnchainedError):
    """A UTxO that fails a check: `reason` says which, the message says how."""

    what = "UTxO"  # what the UTxO was read as, for the message

    def __init__(self, utxo: UTxO, reason: Refusal, detail: str) -> None:
        super().__init__(f"{self.what} {out_ref(utxo)} refused: {reason}: {detail}")
        self.utxo, self.reason, self.detail = utxo, reason, detail


def script_datum(utxo: UTxO, kind: type[D], script: ScriptHash, error: type[Refused]) -> D:
    """The inline datum of `utxo`, decoded as `kind`, if it sits at `script` and holds nothing
    but lovelace; `error` names the first thing that is not so."""
    output = utxo.output
    if output.address.payment_part != script:
        raise error(utxo, Refusal.NOT_AT_SCRIPT, f"its payment credential is not {script}")
    if output.amount.multi_asset:
        raise error(utxo, Refusal.TOKENS, "whoever spends it takes them; lovelace only")
    if output.script is not None:  # the scripts keep it on every continuing output
        raise error(utxo, Refusal.REFERENCE_SCRIPT, "the fee of each spend would pay for it")
    if output.datum_hash is not None and output.datum is None:
        raise error(utxo, Refusal.DATUM_HASH, f"{output.datum_hash}: scripts need it inline")
    if output.datum is None:
        raise error(utxo, Refusal.NO_DATUM, f"no {kind.__name__}")
    raw = plutus_cbor(output.datum)
    try:
        datum = kind.from_cbor(raw)
    except Exception as exc:  # pycardano raises several kinds for data of another shape
        raise error(utxo, Refusal.MALFORMED_DATUM, f"not a {kind.__name__}: {exc}") from exc
    return datum


def check_vkey(utxo: UTxO, vkey: bytes, error: type[Refused]) -> None:
    """A provider key the validators can verify a signature with, or `error`."""
    if len(vkey) != VKEY_BYTES:
        raise error(utxo, Refusal.KEY_LENGTH, f"{vkey.hex()} is {len(vkey)} bytes")


def check_address(utxo: UTxO, field: str, address: PlutusAddress, error: type[Refused]) -> None:
    """An address an output can be built for: 28-byte credentials (a payout to anything else
    cannot be made, and the escrow could be neither settled nor refunded)."""
    problem = _address_problem(address)
    if problem:
        raise error(utxo, Refusal.ADDRESS, f"{field}: {problem}")


def _address_problem(address: PlutusAddress) -> str | None:
    hashes = [address.payment.hash]
    staking = getattr(address.stake, "staking", None)
    if isinstance(staking, StakingHash):
        hashes.append(staking.credential.hash)
    if any(len(h) != KEY_HASH_BYTES for h in hashes):  # a script's hash is as long
        return f"its credentials must be {KEY_HASH_BYTES}-byte hashes"
    try:
        bytes(from_plutus(address, Network.TESTNET))
    except Exception as exc:  # pycardano refuses an unencodable address in several ways
        return f"cannot be encoded: {exc}"
    return None
