"""A transaction as the protocol reads it, for everyone who follows the chain (the market's
follower and chain index, the provider's payout watcher, the cancel check), so that what a
redeemer indexes and which type each datum and redeemer is are said once.

Spend redeemers index the inputs in ledger order (sorted by transaction id, then index) and
withdraw redeemers the reward accounts in ledger order, whatever order a body lists them in.
Each script's redeemers and datums are read as the protocol types of `types.py`: pycardano
checks a type's CONSTR_ID when it decodes, so no constructor number is written here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

import cbor2
from pycardano import (
    Address,
    PlutusData,
    RawPlutusData,
    RedeemerMap,
    RedeemerTag,
    Transaction,
    TransactionInput,
    TransactionOutput,
)
from pycardano.serialization import RawCBOR

from offchain.protocol.ledger.types import (
    BatchClaim,
    BatchSettle,
    BeginUnbond,
    BondDatum,
    Cancel,
    ChannelClaim,
    ChannelDatum,
    ChannelTopUp,
    Drain,
    EscrowDatum,
    MutualClose,
    Payout,
    ProviderEnd,
    Refund,
    Settle,
    Slash,
    SlashPayout,
    Start,
    StartClose,
    TopUp,
    Withdraw,
)

if TYPE_CHECKING:  # deployment imports the builders, which read datums here
    from offchain.protocol.tx.deployment import Deployment

D = TypeVar("D", bound=PlutusData)
Tag = Payout | SlashPayout


class Script(StrEnum):
    """The protocol's scripts, by the names the chain index stores."""

    ESCROW = "escrow"
    BOND = "bond"
    SETTLE = "settle"
    CHANNEL = "channel"
    CLAIM = "claim"  # the channels' batch claim (withdraw-zero)


# Each script's redeemers by purpose; data under any other purpose is none of ours.
REDEEMERS: dict[tuple[RedeemerTag, Script], tuple[type[PlutusData], ...]] = {
    (RedeemerTag.SPEND, Script.ESCROW): (Settle, Refund, Cancel, Start),
    (RedeemerTag.SPEND, Script.BOND): (TopUp, BeginUnbond, Withdraw, Slash),
    (RedeemerTag.WITHDRAWAL, Script.SETTLE): (BatchSettle,),
    (RedeemerTag.SPEND, Script.CHANNEL): (
        ChannelClaim, ChannelTopUp, StartClose, Drain, ProviderEnd, MutualClose,
    ),
    (RedeemerTag.WITHDRAWAL, Script.CLAIM): (BatchClaim,),
}  # fmt: skip
TAGS: tuple[type[Tag], ...] = (Payout, SlashPayout)
# An inline datum by the script its output sits at; anywhere else it may be a payout tag.
DATUMS: dict[Script | None, tuple[type[PlutusData], ...]] = {
    Script.ESCROW: (EscrowDatum,),
    Script.BOND: (BondDatum,),
    Script.CHANNEL: (ChannelDatum,),
    None: TAGS,
}


def ledger_order(ref: TransactionInput) -> tuple[bytes, int]:
    """Sort key of inputs as the ledger orders them: what scripts see, spends index."""
    return ref.transaction_id.payload, ref.index


def account_order(reward_account: bytes) -> tuple[int, bool, bytes]:
    """Sort key of reward accounts as the ledger orders them (withdraw redeemers index them):
    by network, then credential, a script's before a key's (its header has bit 4 set)."""
    header = reward_account[0]
    return header & 0x0F, not header & 0x10, reward_account[1:]


def decode(data: bytes, kinds: Sequence[type[D]]) -> D | None:
    """`data` (CBOR) as the one of `kinds` whose constructor and fields it has; None for any
    other data (anyone can lock anything at a script, or redeem another script with it)."""
    for kind in kinds:
        try:
            return kind.from_cbor(data)
        except Exception:  # pycardano raises several kinds for another constructor or shape
            continue
    return None


def plutus_cbor(data: Any) -> bytes:
    """Plutus data as CBOR, however pycardano holds it: as read from chain (raw CBOR or raw
    Plutus data), as built (a protocol type), or as a bare primitive."""
    if isinstance(data, RawCBOR):
        return data.cbor
    return data.to_cbor() if isinstance(data, PlutusData | RawPlutusData) else cbor2.dumps(data)


def inline_datum(output: TransactionOutput) -> bytes | None:
    """The output's inline datum as CBOR; None without one."""
    return None if output.datum is None else plutus_cbor(output.datum)


def datum_as(raw: bytes, script: Script | None) -> PlutusData | None:
    """An inline datum read as what an output at `script` holds (at none of ours: a payout
    tag); None for anything else."""
    return decode(raw, DATUMS[script])


@dataclasses.dataclass(frozen=True)
class ScriptHashes:
    """A deployment's scripts by hash: which address or reward account is whose."""

    escrow: bytes
    bond: bytes
    settle: bytes
    channel: bytes
    claim: bytes

    @classmethod
    def of(cls, deployment: Deployment) -> ScriptHashes:
        return cls(
            deployment.escrow_hash.payload,
            deployment.bond_hash.payload,
            deployment.settle_hash.payload,
            deployment.channel_hash.payload,
            deployment.claim_hash.payload,
        )

    def at(self, address: Address) -> Script | None:
        """The script whose payment credential `address` has (an output at it)."""
        payment = address.payment_part
        return self._named(payment.payload) if payment is not None else None

    def rewarding(self, reward_account: bytes) -> Script | None:
        """The script whose stake credential a withdrawal's reward account is."""
        staking = Address.from_primitive(reward_account).staking_part
        return self._named(staking.payload) if staking is not None else None

    def _named(self, credential: bytes) -> Script | None:
        named = {
            self.escrow: Script.ESCROW, self.bond: Script.BOND, self.settle: Script.SETTLE,
            self.channel: Script.CHANNEL, self.claim: Script.CLAIM,
        }  # fmt: skip
        return named.get(credential)


@dataclasses.dataclass(frozen=True)
class TxRedeemer:
    """One redeemer: its purpose, the index it names in that purpose's list in ledger order
    (a spend's input, a withdrawal's reward account, ...) and its data as pycardano holds it."""

    purpose: RedeemerTag
    index: int
    data: Any

    @property
    def cbor(self) -> bytes:
        return plutus_cbor(self.data)

    def read(self, script: Script | None) -> PlutusData | None:
        """The data as one of `script`'s redeemers for this purpose; None for any other."""
        if script is None:
            return None
        return decode(self.cbor, REDEEMERS.get((self.purpose, script), ()))


class TxReader:
    """`tx` as the protocol reads it: its inputs and withdrawals in ledger order, its
    redeemers, each input's spend redeemer as a script's, and its outputs' payout tags."""

    def __init__(self, tx: Transaction) -> None:
        body = tx.transaction_body
        self.tx = tx
        # a set to the ledger, whatever a body built here lists twice
        self.inputs: list[TransactionInput] = sorted(set(body.inputs), key=ledger_order)
        accounts = (body.withdraws or {}).items()
        self.withdrawals: list[tuple[bytes, int]] = sorted(
            accounts, key=lambda a: account_order(a[0])
        )
        found = tx.transaction_witness_set.redeemer or []
        self.redeemers: list[TxRedeemer] = (
            [TxRedeemer(key.tag, key.index, value.data) for key, value in found.items()]
            if isinstance(found, RedeemerMap)
            else [TxRedeemer(r.tag, r.index, r.data) for r in found]
        )
        self._positions = {ref: index for index, ref in enumerate(self.inputs)}
        self._spends = {r.index: r for r in self.redeemers if r.purpose == RedeemerTag.SPEND}

    def spend(self, ref: TransactionInput, script: Script) -> PlutusData | None:
        """The redeemer spending `ref`, read as `script`'s (Settle, Refund or Cancel for the
        escrow; TopUp, BeginUnbond, Withdraw or Slash for the bond); None when the
        transaction spends `ref` by no redeemer, by another script's data, or not at all."""
        position = self._positions.get(ref)
        redeemer = self._spends.get(position) if position is not None else None
        return redeemer.read(script) if redeemer is not None else None

    @functools.cached_property
    def tags(self) -> dict[int, Tag]:
        """The payout tags of the outputs whose inline datum is one, by output index (read
        once: a batch settle has dozens of outputs)."""
        found = {}
        for index, output in enumerate(self.tx.transaction_body.outputs):
            raw = inline_datum(output)
            tag = datum_as(raw, None) if raw is not None else None
            if tag is not None:
                found[index] = tag
        return found

    def _withdrawal(self, kind: type[D]) -> D | None:
        """The first withdraw redeemer that reads as `kind` (a batch's), if any."""
        found = (
            decode(r.cbor, (kind,)) for r in self.redeemers if r.purpose == RedeemerTag.WITHDRAWAL
        )
        return next((batch for batch in found if batch is not None), None)

    @functools.cached_property
    def settled(self) -> dict[TransactionInput, int]:
        """The units a batch settle claimed for each escrow it settles (the inputs spent by
        Settle, in ledger order, pair with its items): the settle script paid each provider
        price x units of each. Empty for any other transaction."""
        batch = self._withdrawal(BatchSettle)
        if batch is None:
            return {}
        spent = [ref for ref in self.inputs if self._is_settle(ref)]
        return dict(zip(spent, batch.items[::3], strict=False))

    @functools.cached_property
    def continuing(self) -> dict[TransactionInput, int]:
        """The output that continues each channel a batch claim spends: the claim script pairs
        script input i (ledger order; key inputs skipped) with output first_continuing + i.
        Empty for any other transaction."""
        batch = self._withdrawal(BatchClaim)
        if batch is None:
            return {}
        spent = [self.inputs[index] for index in sorted(self._spends) if index < len(self.inputs)]
        return {ref: batch.first_continuing + i for i, ref in enumerate(spent)}

    def _is_settle(self, ref: TransactionInput) -> bool:
        redeemer = self._spends.get(self._positions[ref])
        return redeemer is not None and decode(redeemer.cbor, (Settle,)) is not None

    def slashed(self) -> set[TransactionInput]:
        """The escrows this transaction slashes: the input a Slash redeemer names (by its
        ledger index) that a SlashPayout tag names too. No escrow redeemer has Slash's
        constructor, so a spend redeemer reads as one without knowing its script."""
        named = {
            (tag.escrow.tx_id, tag.escrow.index)
            for tag in self.tags.values()
            if isinstance(tag, SlashPayout)
        }
        if not named:
            return set()
        slashes = (decode(r.cbor, (Slash,)) for r in self._spends.values())
        by_slash = {
            self.inputs[slash.escrow_input]
            for slash in slashes
            if slash is not None and 0 <= slash.escrow_input < len(self.inputs)
        }
        return {ref for ref in by_slash if ledger_order(ref) in named}
