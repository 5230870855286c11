"""Pieces every protocol builder shares: wallets, payout outputs, fee inputs, chain clock, and
the split of building from signing.

Builders return unsigned transactions (pycardano's build / build_witness_set); `sign_tx` adds
a party's witness, so a CIP-30 wallet or a hardware key can sign instead, the market never
holds a key, and the two signers of a cancel can sign in their own processes.
Redeemers carry output (and for Slash, input) indices, so builders place outputs themselves
and, where an input index matters, pick the fee-paying inputs before building rather than
leaving the choice to pycardano's selector.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Collection, Sequence
from typing import TypeVar

import cbor2
from pycardano import (
    Address,
    ChainContext,
    ExtendedSigningKey,
    Network,
    NonEmptyOrderedSet,
    PaymentSigningKey,
    PlutusData,
    PlutusScript,
    ScriptHash,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    VerificationKey,
    VerificationKeyHash,
    VerificationKeyWitness,
    min_lovelace_post_alonzo,
)
from pycardano.exception import InvalidTransactionException, UTxOSelectionException
from pycardano.plutus import Datum
from pycardano.serialization import RawCBOR, default_encoder
from typeguard import suppress_type_checks

from offchain.chain.context import queries
from offchain.chain.time import ChainTime, iso
from offchain.chain.utxo import format_out_ref
from offchain.core.errors import UnchainedError
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.ledger.types import Payout, PayoutKind, TxOutRef
from offchain.protocol.tx.tx_reader import ledger_order, plutus_cbor

D = TypeVar("D", bound=PlutusData)
FEE_RESERVE = 10 * ADA  # plain ADA a submitter brings: fee, collateral, min-UTxO top-ups
TTL_MS = 15 * 60 * 1000  # how long a built transaction stays valid (at most)
# Declared execution units over the evaluated ones. Scripts here read nothing the balancing
# changes (fee, change), so evaluation is exact; pycardano's 20% would cost fees and batch size.
EXECUTION_MARGIN = 0.02
# Bytes a batch keeps free under the ledger's maximum transaction size. pycardano checks the
# size while balancing, before the evaluated execution units replace its placeholders: a batch
# of 127 escrows passed that check and came out 1-3 bytes over 16,384 (126 fit at 16,262).
# `build` now checks the signed size itself, exactly; the margin keeps a batch clear of a
# limit it would otherwise touch at its last item, whatever a later byte costs (a rebuilt
# batch's units, a second signer). One-off transactions (a deploy's scripts) use the limit.
SIZE_MARGIN = 128


class BuildError(UnchainedError):
    """The transaction cannot be built (yet): the message says what is missing."""


class TooBig(BuildError):
    """The signed transaction would not fit the ledger's maximum size, less `margin` bytes to
    spare: a batch builder takes fewer items (`fitting`)."""

    def __init__(self, size: int, limit: int, margin: int = 0) -> None:
        super().__init__(f"the transaction would take {size} bytes signed, over the "
                         f"{limit} the ledger takes less a margin of {margin}")  # fmt: skip
        self.size, self.limit, self.margin = size, limit, margin

    def fitting(self, items: int) -> int:
        """How many of `items` (alike in size) fit: a proportional guess, at least one fewer."""
        return max(1, min(items - 1, items * (self.limit - self.margin) // self.size))


@dataclasses.dataclass(frozen=True)
class Wallet:
    """A key and the address it spends from (and receives change at)."""

    key: PaymentSigningKey
    address: Address

    @classmethod
    def of(cls, key: PaymentSigningKey, network: Network) -> Wallet:
        """The wallet of `key` on `network` (a deployment's: `Deployment.network`)."""
        return cls(key, Address(key.to_verification_key().hash(), network=network))

    @property
    def vkey(self) -> bytes:
        return self.key.to_verification_key().payload

    @property
    def key_hash(self) -> VerificationKeyHash:
        return self.key.to_verification_key().hash()

    def sign(self, tx: Transaction) -> Transaction:
        """`tx` with this wallet's witness added."""
        return sign_tx(tx, self.key)


@dataclasses.dataclass(frozen=True)
class Clock:
    """The chain tip and its time: what validity ranges are computed from."""

    time: ChainTime
    tip_slot: int

    @classmethod
    def now(cls, context: ChainContext) -> Clock:
        return cls(queries(context).chain_time(), context.last_block_slot)

    @property
    def tip_ms(self) -> int:
        return self.time.slot_to_posix_ms(self.tip_slot)

    def first_slot_after(self, posix_ms: int) -> int:
        """The first slot that a script sees as strictly later than `posix_ms`."""
        return self.time.posix_ms_to_slot(posix_ms) + 1

    def first_slot_at(self, posix_ms: int) -> int:
        """The first slot that a script sees as `posix_ms` or later."""
        slot = self.time.posix_ms_to_slot(posix_ms)
        return slot if self.time.slot_to_posix_ms(slot) == posix_ms else slot + 1

    def ttl_until(self, posix_ms: int) -> int:
        """A ttl (exclusive upper slot) whose POSIX time is <= `posix_ms`, at most TTL_MS away."""
        return self.time.posix_ms_to_slot(min(posix_ms, self.tip_ms + TTL_MS))

    def iso_slot(self, slot: int) -> str:
        return iso(self.time.slot_to_posix_ms(slot))


def new_builder(context: ChainContext) -> TransactionBuilder:
    builder = TransactionBuilder(context)
    builder.execution_memory_buffer = builder.execution_step_buffer = EXECUTION_MARGIN
    return builder


def script_source(builder: TransactionBuilder, ref: UTxO) -> UTxO | PlutusScript:
    """The reference UTxO on first use, the script itself after that: pycardano charges a
    reference script's bytes once per mention, the ledger once per transaction."""
    script = ref.output.script
    assert script is not None
    return script if ref in builder.reference_inputs else ref


def at_least_min_utxo(context: ChainContext, output: TransactionOutput, owed: int) -> int:
    """`owed`, raised to the output's min-UTxO (the top-up comes from the fee budget)."""
    if output.script is None and output.datum_hash is None:  # tokens are not priced here either
        if output.datum is None:
            per_byte = context.protocol_param.coins_per_utxo_byte
            return max(owed, _plain_min_utxo(bytes(output.address), per_byte))
        return max(owed, datum_min_utxo(context, output.address, datum_cbor(output.datum)))
    probe = TransactionOutput(output.address, 2**40, datum=output.datum, script=output.script)
    return max(owed, min_lovelace_post_alonzo(probe, context))


MIN_UTXO_OVERHEAD = 160  # the ledger's constant bytes per output (Babbage's min-UTxO rule)
MIN_UTXO_PROBE = 2**40  # the coin an output is priced with: the largest a lock ever holds


def datum_cbor(datum: Datum) -> bytes:
    """An inline datum's bytes as an output carries them, encoded as pycardano's `to_cbor`
    does (a protocol type validated first) by cbor2's C encoder."""
    return cbor2.dumps(datum, default=default_encoder)


def datum_min_utxo(context: ChainContext, address: Address, encoded: bytes) -> int:
    """The min-UTxO of an ADA-only output to `address` whose inline datum is `encoded` (its
    `datum_cbor`). The output's size depends on the address and the datum's length alone, so
    each (address, length) is priced once per byte price: a caller that has the datum's bytes
    already (a quote hashes them) encodes nothing more here."""
    per_byte = context.protocol_param.coins_per_utxo_byte
    return _datum_min_utxo(bytes(address), len(encoded), per_byte)


@functools.lru_cache(maxsize=4096)
def _datum_min_utxo(address: bytes, datum_bytes: int, coins_per_utxo_byte: int) -> int:
    filler = RawCBOR(bytes(datum_bytes))  # written as is: only its length counts
    probe = TransactionOutput(
        Address.from_primitive(address), MIN_UTXO_PROBE, datum=filler, post_alonzo=True
    )
    return (MIN_UTXO_OVERHEAD + len(probe.to_cbor())) * coins_per_utxo_byte


@functools.lru_cache(maxsize=1024)
def _plain_min_utxo(address: bytes, coins_per_utxo_byte: int) -> int:
    """The min-UTxO of an ADA-only output to `address` (no datum, no script): it depends on the
    address and the price of a byte alone, and serializing an output is most of what a quote
    costs, so each address is priced once per parameter value."""
    probe = TransactionOutput(Address.from_primitive(address), MIN_UTXO_PROBE, post_alonzo=True)
    return (MIN_UTXO_OVERHEAD + len(probe.to_cbor())) * coins_per_utxo_byte


def payout(
    context: ChainContext, to: Address, owed: int, kind: PayoutKind, escrow: TransactionInput
) -> TransactionOutput:
    """An output owed `owed` to `to` for `escrow`, tagged so no other escrow can count it."""
    return tagged_output(context, to, owed, Payout(int(kind), TxOutRef.of(escrow)))


def tagged_output(
    context: ChainContext, to: Address, owed: int, tag: PlutusData
) -> TransactionOutput:
    """An output owed `owed` to `to` carrying `tag` as its inline datum."""
    output = TransactionOutput(to, 0, datum=tag)
    output.amount.coin = at_least_min_utxo(context, output, owed)
    return output


def add_output(builder: TransactionBuilder, output: TransactionOutput) -> int:
    """Append `output` and return its index (pycardano appends change after ours)."""
    builder.add_output(output)
    return len(builder.outputs) - 1


def out_ref(utxo: UTxO) -> str:
    """`txid#index`, as people and explorers write an output reference."""
    return format_out_ref(utxo.input)


def read_datum(utxo: UTxO, kind: type[D], script: ScriptHash, what: str) -> D:
    """The inline datum of a UTxO at `script`, decoded as `kind`; BuildError for anything else
    (anyone can lock anything at a script address: never trust a datum's shape)."""
    datum = utxo.output.datum
    if utxo.output.address.payment_part != script or datum is None:
        raise BuildError(f"{out_ref(utxo)} is not at this deployment's {what} script")
    raw = plutus_cbor(datum)
    try:
        return kind.from_cbor(raw)
    except Exception as exc:
        raise BuildError(f"{out_ref(utxo)} carries no valid {what} datum: {exc}") from exc


def ledger_key(utxo: UTxO) -> tuple[bytes, int]:
    """Sort key of inputs as the ledger orders them (scripts see them, redeemers index them)."""
    return ledger_order(utxo.input)


def ledger_inputs(*groups: Sequence[UTxO]) -> list[TransactionInput]:
    """All of a transaction's inputs in ledger order: the list redeemers index into. Fix the
    inputs before building (`fee_inputs`), never leave their choice to pycardano."""
    return [u.input for u in sorted((u for g in groups for u in g), key=ledger_key)]


def fee_inputs(
    context: ChainContext,
    payer: Address,
    lovelace: int = FEE_RESERVE,
    busy: Collection[TransactionInput] = (),
) -> list[UTxO]:
    """UTxOs at `payer` worth at least `lovelace`: plain ADA first (collateral comes from
    them), largest first; any tokens they carry go back to the payer as change. None of
    `busy`: those the payer's transactions still in flight spend."""
    utxos = [u for u in context.utxos(payer) if u.input not in busy]
    chosen: list[UTxO] = []
    for utxo in sorted(
        utxos, key=lambda u: (bool(u.output.amount.multi_asset), -u.output.amount.coin)
    ):
        if sum(u.output.amount.coin for u in chosen) >= lovelace:
            break
        chosen.append(utxo)
    if sum(u.output.amount.coin for u in chosen) < lovelace:
        raise BuildError(f"{payer} needs {lovelace} lovelace for the fee and collateral")
    return chosen


def add_inputs(builder: TransactionBuilder, utxos: Sequence[UTxO]) -> None:
    for utxo in utxos:
        builder.add_input(utxo)


def build(builder: TransactionBuilder, payer: Address, margin: int = 0) -> Transaction:
    """Balance (change to `payer`) and evaluate the scripts: the unsigned transaction. Its
    fee already counts the witnesses of its key inputs and required signers; signed, it
    leaves `margin` bytes under the ledger's maximum size (TooBig otherwise). One with no
    upper bound gets one `TTL_MS` away: a transaction valid forever could still land any time
    after it was given up for lost, and its submitter can only wait on a clock; past its ttl
    the chain itself says it never will (`submit.wait_for_confirmations`)."""
    if builder.ttl is None:
        clock = Clock.now(builder.context)
        builder.ttl = clock.ttl_until(clock.tip_ms + TTL_MS)
    try:
        # pycardano type-checks the whole transaction at each of the many serialisations
        # balancing does: half of a 41-escrow settle's build. The finished transaction is
        # still checked when it is serialised to be signed and sent.
        with suppress_type_checks():
            body = builder.build(change_address=payer)
    except UTxOSelectionException as exc:
        raise BuildError(f"{payer} cannot pay for this transaction: {exc}") from exc
    except InvalidTransactionException as exc:  # pycardano's own size check, while balancing
        limit = builder.context.protocol_param.max_tx_size
        size = re.search(r"size \((\d+)\)", str(exc))
        if size is None:
            raise
        raise TooBig(int(size.group(1)), limit, margin) from exc
    witnesses = builder.build_witness_set(True)
    tx = Transaction(body, witnesses, auxiliary_data=builder.auxiliary_data)
    check_size(tx, signers(builder), builder.context.protocol_param.max_tx_size, margin)
    return tx


def signers(builder: TransactionBuilder) -> int:
    """How many key witnesses the transaction needs: its key inputs' (collateral too) and
    required signers' keys."""
    keys = {*(builder.required_signers or [])}
    for utxo in [*builder.inputs, *builder.collaterals]:
        if isinstance(utxo.output.address.payment_part, VerificationKeyHash):
            keys.add(utxo.output.address.payment_part)
    return len(keys)


def check_size(tx: Transaction, witnesses: int, max_tx_size: int, margin: int = 0) -> int:
    """The size of `tx` once `witnesses` keys have signed it; TooBig when that leaves less
    than `margin` bytes under `max_tx_size`."""
    stand_ins = [  # as large as any key's: a 32-byte key, a 64-byte signature; distinct
        VerificationKeyWitness(VerificationKey.from_primitive(n.to_bytes(32, "big")), bytes(64))
        for n in range(witnesses)
    ]
    signed = with_witnesses(tx, stand_ins) if witnesses else tx
    size = len(signed.to_cbor())
    if size > max_tx_size - margin:
        raise TooBig(size, max_tx_size, margin)
    return size


def sign_tx(tx: Transaction, *keys: PaymentSigningKey | ExtendedSigningKey) -> Transaction:
    """`tx` with each key's witness added to those it has (parties may sign in turn)."""
    signed = [VerificationKeyWitness(k.to_verification_key(), k.sign(tx.id.payload)) for k in keys]
    return with_witnesses(tx, signed)


def with_witnesses(tx: Transaction, signed: Sequence[VerificationKeyWitness]) -> Transaction:
    """`tx` with `signed` added to its witnesses: a party's signature made elsewhere (the
    provider's half of a cancel reaches the market as a signature alone)."""
    witnesses = copy.copy(tx.transaction_witness_set)
    witnesses.vkey_witnesses = NonEmptyOrderedSet([*(witnesses.vkey_witnesses or []), *signed])
    return Transaction(tx.transaction_body, witnesses, tx.valid, tx.auxiliary_data)
