"""pycardano mirrors of every datum, redeemer and signed record in contracts/PROTOCOL.md.

Constructor ids and field order are the protocol: a class here encodes to exactly the Data the
validators read, so a field added or moved on one side must be moved on the other.
They mirror contracts/onchain.py rather than import it: that module imports OpShin (seconds
more at every client's start) and names the ledger types' fields as OpShin's api_v3 does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from typing import Union

from cbor2 import CBORTag
from pycardano import IndefiniteList, PlutusData, TransactionId, TransactionInput

# --- ledger types (Plutus V3 encoding) -------------------------------------------------------


@dataclass
class PubKeyCredential(PlutusData):
    CONSTR_ID = 0
    hash: bytes


@dataclass
class ScriptCredential(PlutusData):
    CONSTR_ID = 1
    hash: bytes


# pycardano decodes alternatives only when they are spelled typing.Union, not `A | B`.
Credential = Union[PubKeyCredential, ScriptCredential]  # noqa: UP007


@dataclass
class StakingHash(PlutusData):
    CONSTR_ID = 0
    credential: Credential


@dataclass
class StakingPtr(PlutusData):
    CONSTR_ID = 1
    slot: int
    tx_index: int
    cert_index: int


@dataclass
class SomeStakingCredential(PlutusData):
    CONSTR_ID = 0
    staking: Union[StakingHash, StakingPtr]  # noqa: UP007


@dataclass
class NoStakingCredential(PlutusData):
    CONSTR_ID = 1


@dataclass
class PlutusAddress(PlutusData):
    """The ledger's Address as scripts see it: payment credential and optional stake part."""

    CONSTR_ID = 0
    payment: Credential
    stake: Union[SomeStakingCredential, NoStakingCredential]  # noqa: UP007


@dataclass
class TxOutRef(PlutusData):
    """V3 TxOutRef: the transaction id is bare bytes (no wrapper constructor)."""

    CONSTR_ID = 0
    tx_id: bytes
    index: int

    @classmethod
    def of(cls, ref: TransactionInput) -> TxOutRef:
        return cls(ref.transaction_id.payload, ref.index)

    def to_input(self) -> TransactionInput:
        """The out-ref as the rest of the code holds one (`of` reads it back)."""
        return TransactionInput(TransactionId(self.tx_id), self.index)


@dataclass
class Just(PlutusData):
    CONSTR_ID = 0
    value: int


@dataclass
class Nothing(PlutusData):
    CONSTR_ID = 1


# --- escrow ------------------------------------------------------------------------------------


@dataclass
class EscrowDatum(PlutusData):
    CONSTR_ID = 0
    consumer: PlutusAddress
    provider: PlutusAddress
    provider_vkey: bytes  # 32-byte ed25519 verification key
    price_per_unit: int  # lovelace
    max_units: int
    deadline: int  # POSIX ms
    settle_window: int  # ms
    job_id: bytes  # 32 bytes
    fee_allowance: int  # lovelace
    # POSIX ms; 0: none (a deadline-less or started escrow), and then the field is left out of
    # the Data: such an escrow's datum is the nine fields it always had (PROTOCOL.md).
    start_deadline: int = 0

    @property
    def close(self) -> int:
        """The end of the settle window: settle before it, refund after it."""
        return self.deadline + self.settle_window

    @property
    def started(self) -> EscrowDatum:
        """The datum a Start continues the escrow with: the same, with no start deadline."""
        return dataclasses.replace(self, start_deadline=0)

    def to_shallow_primitive(self) -> CBORTag:
        tag = super().to_shallow_primitive()
        if self.start_deadline == 0:
            return CBORTag(tag.tag, IndefiniteList(list(tag.value)[:-1]))
        return tag


class PayoutKind(IntEnum):
    SETTLE = 0  # retired: settle payouts carry no tag now (PROTOCOL.md); 0 is never reused
    REFUND = 1
    CANCEL = 2
    DRAIN = 3  # a channel's rest to its renter after the close period (the Drain redeemer's id)
    END = 4  # a channel ended by its provider, the rest to its renter (ProviderEnd's id)


@dataclass
class Payout(PlutusData):
    """The inline datum of an escrow's payout output: ties it to one escrow and one action."""

    CONSTR_ID = 0
    kind: int
    escrow: TxOutRef


@dataclass
class SlashPayout(PlutusData):
    """The inline datum of a slash's payout: names the escrow and the bond it takes from, so
    no output counts for two slashes, whatever the number of bond versions."""

    CONSTR_ID = 1
    escrow: TxOutRef
    bond: TxOutRef


# Refund and Cancel name `own_input`, the spent escrow's index among the transaction's inputs
# in ledger order: the validator checks it instead of searching.


@dataclass
class Settle(PlutusData):
    """Spend an escrow in a batch: the settle script's run (one per transaction) checks it, so
    the spend names nothing and costs the same at any index."""

    CONSTR_ID = 0


@dataclass
class Refund(PlutusData):
    CONSTR_ID = 1
    own_input: int
    consumer_output: int


@dataclass
class Cancel(PlutusData):
    CONSTR_ID = 2
    own_input: int
    consumer_output: int


@dataclass
class Start(PlutusData):
    """The provider shows the job started before the start deadline: output `output` continues
    the escrow (same address and value, `EscrowDatum.started`)."""

    CONSTR_ID = 3
    own_input: int
    output: int


@dataclass
class SettleClaim(PlutusData):
    """A claim on several escrows of a batch, signed by `vkey`, their provider key."""

    CONSTR_ID = 0
    note: bytes
    signature: bytes
    vkey: bytes


@dataclass
class SettleReceipt(PlutusData):
    """An escrow's own receipt: a claim on it alone, signed by its provider key."""

    CONSTR_ID = 0
    note: bytes
    signature: bytes


@dataclass
class BatchSettle(PlutusData):
    """The settle script's redeemer: `items` holds (units, signer, payee) for each escrow
    input in ledger order, flat; signer is a claim's index or -1 (the next receipt), payee a
    provider output's index or -1 (owed nothing); the consumers' refunds start at output
    `first_refund`."""

    CONSTR_ID = 0
    items: list[int]
    claims: list[SettleClaim]
    receipts: list[SettleReceipt]
    first_refund: int


# --- signed payloads ------------------------------------------------------------------------


@dataclass
class ClaimPayload(PlutusData):
    """A provider's claim on escrows: `claims` is flat, each out-ref followed by its units, in
    descending ledger order (the order the settle script builds it in)."""

    CONSTR_ID = 0
    domain: bytes
    network_id: int
    settle_hash: bytes
    note: bytes
    # serialise_data writes a non-empty list indefinite-length, as IndefiniteList encodes
    claims: IndefiniteList


@dataclass
class Acceptance(PlutusData):
    CONSTR_ID = 1
    domain: bytes
    network_id: int
    escrow_hash: bytes
    escrow: TxOutRef
    job_id: bytes
    bond_hash: bytes  # the bond script that backs the acceptance


# --- bond ------------------------------------------------------------------------------------


@dataclass
class BondDatum(PlutusData):
    CONSTR_ID = 0
    provider: PlutusAddress
    provider_vkey: bytes
    # POSIX ms the notice began: the BeginUnbond's validity upper bound, never earlier than
    # its inclusion
    unbonding_since: Union[Just, Nothing]  # noqa: UP007


@dataclass
class TopUp(PlutusData):
    CONSTR_ID = 0
    bond_output: int


@dataclass
class BeginUnbond(PlutusData):
    CONSTR_ID = 1
    bond_output: int


@dataclass
class Withdraw(PlutusData):
    CONSTR_ID = 2


@dataclass
class Slash(PlutusData):
    CONSTR_ID = 3
    escrow_input: int
    acceptance_signature: bytes
    consumer_output: int
    bond_output: int


# --- payment channels ----------------------------------------------------------------------


@dataclass
class ChannelTerms(PlutusData):
    """What a channel never changes; blake2b_224 of its CBOR is the channel's id (`terms`)."""

    CONSTR_ID = 0
    renter: PlutusAddress
    provider: PlutusAddress
    provider_vkey: bytes  # 32 bytes: signs an end or a mutual close
    close_period_ms: int
    nonce: TxOutRef  # an input the open spent: no two channels share an id


@dataclass
class ChannelDatum(PlutusData):
    CONSTR_ID = 0
    renter_vkey: bytes  # 32 bytes: signs IOUs
    payee: bytes  # blake2b_224 of terms.provider's CBOR: where claims pay
    terms: bytes  # blake2b_224 of the ChannelTerms' CBOR: the channel id
    claimed: int  # lovelace paid to the provider so far (the last IOU claimed)
    closing_at: int  # -1 while open, else POSIX ms from which the renter may drain


@dataclass
class Iou(PlutusData):
    """What a renter signs: channel `channel` may pay its provider `amount` lovelace in all."""

    CONSTR_ID = 0
    domain: bytes
    network_id: int
    channel_hash: bytes
    channel: bytes
    amount: int


@dataclass
class ChannelClaim(PlutusData):
    CONSTR_ID = 0


@dataclass
class ChannelTopUp(PlutusData):
    CONSTR_ID = 1
    own_input: int
    output: int
    terms: ChannelTerms


@dataclass
class StartClose(PlutusData):
    CONSTR_ID = 2
    own_input: int
    output: int
    terms: ChannelTerms


@dataclass
class Drain(PlutusData):
    CONSTR_ID = 3
    own_input: int
    renter_output: int
    terms: ChannelTerms


@dataclass
class ProviderEnd(PlutusData):
    CONSTR_ID = 4
    own_input: int
    renter_output: int
    terms: ChannelTerms


@dataclass
class MutualClose(PlutusData):
    CONSTR_ID = 5
    terms: ChannelTerms


@dataclass
class BatchClaim(PlutusData):
    """The claim script's redeemer: per channel input in ledger order, its provider output
    and its renter's IOU signature; continuing outputs start at `first_continuing`."""

    CONSTR_ID = 0
    payees: list[int]
    signatures: list[bytes]
    first_continuing: int
