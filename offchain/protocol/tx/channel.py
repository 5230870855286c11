"""Payment channels (PROTOCOL.md, channels): open, claim (many channels in one batch), top up,
start a close, drain, end by the provider, close by both; and the check a provider runs on a
channel before it serves.

A channel is one UTxO at the channel script, staked like its renter, whose datum holds only
hashes of its terms and payee (so a claim of 60 channels fits a transaction); every action but
a claim shows the terms in its redeemer. Each builder returns an unsigned transaction, as
escrow.py's do, with its validity bounds taken from the chain's tip.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Collection, Sequence

from pycardano import (
    Address,
    AuxiliaryData,
    ChainContext,
    Metadata,
    PaymentVerificationKey,
    PlutusData,
    Redeemer,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    Value,
    VerificationKeyHash,
)

from offchain.chain.time import iso
from offchain.protocol.checks.refusal import (
    Refusal,
    Refused,
    check_address,
    check_vkey,
    script_datum,
)
from offchain.protocol.ledger.addresses import from_plutus, to_plutus
from offchain.protocol.ledger.iou import CHANNEL_ID_BYTES, SignedIou
from offchain.protocol.ledger.payloads import VKEY_BYTES
from offchain.protocol.ledger.types import (
    BatchClaim,
    ChannelClaim,
    ChannelDatum,
    ChannelTerms,
    ChannelTopUp,
    Drain,
    MutualClose,
    PayoutKind,
    PlutusAddress,
    ProviderEnd,
    PubKeyCredential,
    StartClose,
    TxOutRef,
)
from offchain.protocol.tx.batch import pay_providers, withdraw_zero
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import (
    FEE_RESERVE,
    SIZE_MARGIN,
    TTL_MS,
    BuildError,
    Clock,
    add_inputs,
    add_output,
    at_least_min_utxo,
    build,
    fee_inputs,
    ledger_inputs,
    ledger_key,
    new_builder,
    out_ref,
    payout,
    read_datum,
    script_source,
)

CHANNEL_OUTPUT = 0  # the channel output of an open, a top-up and a start-close
RENTER_OUTPUT = 0  # a drain's or a provider end's payout to the renter
TERMS_LABEL = 1694  # the open's metadata label: the terms' CBOR, in chunks
METADATA_CHUNK = 64  # the ledger's longest metadata byte string
OPEN = -1  # closing_at of a channel no close has started
# The largest integer a datum field holds (9 bytes of CBOR): a channel output's minimum UTxO
# is taken with claimed and closing_at this long, so no later datum needs more.
LARGEST_FIELD = 2**63 - 1
# A start-close's validity: the close period runs from its upper bound, so a short one starts
# it sooner (the renter has this long to sign and submit it).
CLOSE_TTL_MS = 2 * 60 * 1000


class ChannelRefused(Refused):
    """A channel a provider must not serve; `reason` says why."""

    what = "channel"


@dataclasses.dataclass(frozen=True)
class Channel:
    """A channel UTxO with its datum (`read_channel` checks both)."""

    utxo: UTxO
    datum: ChannelDatum

    @property
    def id(self) -> bytes:
        """blake2b_224 of its terms: what its IOUs name."""
        return self.datum.terms

    @property
    def lovelace(self) -> int:
        return self.utxo.output.amount.coin

    @property
    def spendable(self) -> int:
        """What its provider may still claim: all its lovelace (the open's return deposit
        pays the continuing output's minimum; `claim_channels` says when a claim leaves less)."""
        return self.lovelace

    @property
    def closing(self) -> bool:
        return self.datum.closing_at != OPEN


def _blake2b_224(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=CHANNEL_ID_BYTES).digest()


def channel_id(terms: ChannelTerms) -> bytes:
    """A channel's id: blake2b_224 of its terms' CBOR (serialise_data), as the datum holds it."""
    return _blake2b_224(terms.to_cbor())


def payee_hash(address: PlutusAddress) -> bytes:
    """What a channel datum holds for the provider's (full) address: claims pay there."""
    return _blake2b_224(address.to_cbor())


def terms_metadata(terms: ChannelTerms) -> Metadata:
    """The open's metadata: the terms' CBOR under TERMS_LABEL, in chunks of at most 64 bytes,
    so anyone can index a channel (whose datum holds only hashes) from the chain alone."""
    raw = terms.to_cbor()
    return Metadata(
        {TERMS_LABEL: [raw[i : i + METADATA_CHUNK] for i in range(0, len(raw), METADATA_CHUNK)]}
    )


def terms_from_metadata(metadata: Metadata | AuxiliaryData | None) -> ChannelTerms | None:
    """The terms an open's metadata carries (as `terms_metadata` writes them, read from a
    transaction's auxiliary data or its metadata); None when it carries none. Anyone can write
    anything there: compare `channel_id` of the result with the channel's datum."""
    if isinstance(metadata, AuxiliaryData):
        metadata = metadata.data if isinstance(metadata.data, Metadata) else metadata.data.metadata
    chunks = metadata.get(TERMS_LABEL) if metadata is not None else None
    if not isinstance(chunks, list) or not all(isinstance(c, bytes) for c in chunks):
        return None
    try:
        return ChannelTerms.from_cbor(b"".join(chunks))
    except Exception:  # pycardano raises several kinds for data of another shape
        return None


def read_channel(deployment: Deployment, utxo: UTxO) -> Channel:
    """`utxo` as a channel of this deployment; ValueError when it is not one."""
    try:
        return Channel(utxo, read_datum(utxo, ChannelDatum, deployment.channel_hash, "channel"))
    except BuildError as exc:
        raise ValueError(str(exc)) from exc


def open_channel(
    context: ChainContext,
    deployment: Deployment,
    renter: Address,
    renter_vkey: bytes,
    provider: Address,
    provider_vkey: bytes,
    deposit: int,
    close_period_ms: int,
) -> tuple[Transaction, ChannelTerms]:
    """Lock `deposit` from `renter`'s address for `provider`: the channel is output
    CHANNEL_OUTPUT, staked like the renter, its terms in the metadata. The lock adds the
    output's minimum UTxO (a return deposit, as an escrow's) so the whole deposit can be
    claimed. `renter_vkey` signs the IOUs; the renter signs the open."""
    if deposit <= 0 or close_period_ms <= 0:
        raise BuildError("a channel needs a positive deposit and close period")
    if len(renter_vkey) != VKEY_BYTES or len(provider_vkey) != VKEY_BYTES:
        raise BuildError(f"the renter's and provider's keys must be {VKEY_BYTES} bytes")
    if not isinstance(renter.payment_part, VerificationKeyHash):
        raise BuildError(f"{renter} is a script address: it could never sign a close")
    fee = fee_inputs(context, renter, deposit + FEE_RESERVE)
    nonce = TxOutRef.of(ledger_inputs(fee)[0])
    terms = ChannelTerms(
        to_plutus(renter), to_plutus(provider), provider_vkey, close_period_ms, nonce
    )
    datum = ChannelDatum(renter_vkey, payee_hash(terms.provider), channel_id(terms), 0, OPEN)
    output = TransactionOutput(deployment.channel_address(renter), 0, datum=datum)
    output.amount.coin = deposit + return_deposit(context, output)
    builder = new_builder(context)
    builder.add_output(output)
    builder.auxiliary_data = AuxiliaryData(terms_metadata(terms))
    add_inputs(builder, fee)
    return build(builder, renter), terms


def return_deposit(context: ChainContext, output: TransactionOutput) -> int:
    """The minimum UTxO of a channel output like `output` at any claimed amount and close
    time (its datum's integers at their longest): what an open adds to the deposit."""
    datum = output.datum
    assert isinstance(datum, ChannelDatum)
    longest = dataclasses.replace(datum, claimed=LARGEST_FIELD, closing_at=LARGEST_FIELD)
    return at_least_min_utxo(context, TransactionOutput(output.address, 0, datum=longest), 0)


def claim_channels(
    context: ChainContext,
    deployment: Deployment,
    claims: Sequence[tuple[Channel, SignedIou]],
    submitter: Address,
    payees: Sequence[Address] = (),
    own_payout: Address | None = None,
    busy: Collection[TransactionInput] = (),
) -> Transaction:
    """Claim each channel's IOU in one transaction: each provider is paid once (one output
    holding what all its channels take), each channel continues with the rest and `claimed`
    raised to its IOU's amount. A channel's provider address is the submitter's, `own_payout`
    (where a provider claiming for itself is paid, if not at the submitter's address) or one
    of `payees` (its datum holds only the hash). The submitter pays the fee, from UTxOs
    outside `busy` (its transactions in flight), and signs."""
    if not claims:
        raise BuildError("nothing to claim: no IOUs")
    ordered = sorted(claims, key=lambda claim: ledger_key(claim[0].utxo))
    if len({channel.utxo.input for channel, _ in ordered}) != len(ordered):
        raise BuildError("two IOUs for one channel")
    own = own_payout or submitter
    addresses = {payee_hash(to_plutus(a)): a for a in (*payees, submitter, own)}
    takes = [_take(deployment, channel, iou, addresses) for channel, iou in ordered]
    clock = Clock.now(context)
    builder = new_builder(context)
    dues = [
        (c.datum.payee, addresses[c.datum.payee], take)
        for (c, _), take in zip(ordered, takes, strict=True)
    ]
    outputs = pay_providers(context, builder, dues, own)
    first_continuing = len(builder.outputs)
    for (channel, iou), take in zip(ordered, takes, strict=True):
        _continue(context, builder, channel, iou.amount, take)
        _spend(builder, deployment, channel, ChannelClaim())
    closes = [c.datum.closing_at for c, _ in ordered if c.closing]
    builder.ttl = clock.ttl_until(min(closes, default=clock.tip_ms + TTL_MS))
    if builder.ttl <= clock.tip_slot + 1:
        raise BuildError(f"the close period of a channel ended at {iso(min(closes))}")
    batch = BatchClaim(
        [outputs[c.datum.payee] for c, _ in ordered],
        [iou.signature for _, iou in ordered],
        first_continuing,
    )
    withdraw_zero(
        context, builder, deployment.claim_ref, deployment.claim_reward_address, Redeemer(batch)
    )
    add_inputs(builder, fee_inputs(context, submitter, busy=busy))
    return build(builder, submitter, SIZE_MARGIN)


def _take(
    deployment: Deployment, channel: Channel, iou: SignedIou, addresses: dict[bytes, Address]
) -> int:
    """What `iou` takes from `channel`, checked as the claim script will."""
    where = out_ref(channel.utxo)
    if iou.channel != channel.id:
        raise BuildError(f"the IOU is for channel {iou.channel.hex()}, not {where}")
    if not iou.signed_by(channel.datum.renter_vkey, deployment.network_id, deployment.channel_hash):
        raise BuildError(f"the IOU for {where} is not signed by its renter key")
    take = iou.amount - channel.datum.claimed
    if take <= 0:
        raise BuildError(
            f"stale IOU: {where} has paid {channel.datum.claimed} already, the IOU {iou.amount}"
        )
    if take > channel.spendable:
        raise BuildError(f"the IOU takes {take} from {where}, which holds {channel.lovelace}")
    if channel.datum.payee not in addresses:
        raise BuildError(f"{where} pays a provider address not among the submitter and payees")
    return take


def _continue(
    context: ChainContext,
    builder: TransactionBuilder,
    channel: Channel,
    claimed: int,
    take: int,
) -> None:
    """The claimed channel's continuing output: same address and tokens, `take` lovelace
    less, `claimed` recorded; BuildError when that leaves less than its minimum UTxO."""
    datum = dataclasses.replace(channel.datum, claimed=claimed)
    value = Value(channel.lovelace - take, copy.deepcopy(channel.utxo.output.amount.multi_asset))
    output = TransactionOutput(channel.utxo.output.address, value, datum=datum)
    least = at_least_min_utxo(context, output, 0)
    if value.coin < least:
        raise BuildError(
            f"a claim of {take} leaves {out_ref(channel.utxo)} {value.coin} lovelace, below its "
            f"minimum UTxO {least}: at most {channel.lovelace - least} fits"
        )
    builder.add_output(output)


def top_up(
    context: ChainContext,
    deployment: Deployment,
    channel: Channel,
    terms: ChannelTerms,
    lovelace: int,
    payer: Address,
) -> Transaction:
    """Add `lovelace` from `payer`'s address to the open channel; nothing else changes. The
    renter's key signs (PROTOCOL.md: a top-up spends the channel UTxO, so anyone else's, or
    one once the channel is closing, would void the provider's pending claim); `payer`
    pays and signs for its own inputs (the renter's address, usually)."""
    if lovelace <= 0:
        raise BuildError("a top-up must add lovelace")
    _check_terms(channel, terms)
    if channel.closing:
        raise BuildError(
            f"{out_ref(channel.utxo)} is closing since {iso(channel.datum.closing_at)}: no top-up"
        )
    fee = fee_inputs(context, payer, lovelace + FEE_RESERVE)
    own = ledger_inputs([channel.utxo], fee).index(channel.utxo.input)
    builder = new_builder(context)
    value = copy.deepcopy(channel.utxo.output.amount)
    value.coin += lovelace
    add_output(builder, TransactionOutput(channel.utxo.output.address, value, datum=channel.datum))
    _spend(builder, deployment, channel, ChannelTopUp(own, CHANNEL_OUTPUT, terms))
    builder.required_signers = [_renter_key(terms)]
    add_inputs(builder, fee)
    return build(builder, payer)


def start_close(
    context: ChainContext,
    deployment: Deployment,
    channel: Channel,
    terms: ChannelTerms,
    renter: Address,
) -> Transaction:
    """Start the close period: the provider has until it ends to claim, then the renter
    drains the rest. It runs from the transaction's validity upper bound (CLOSE_TTL_MS from
    now: a lower bound could be backdated). The renter's key signs; `renter` pays."""
    _check_terms(channel, terms)
    if channel.closing:
        raise BuildError(
            f"{out_ref(channel.utxo)} is closing since {iso(channel.datum.closing_at)}"
        )
    key = _renter_key(terms)
    if renter.payment_part != key:
        raise BuildError(f"{renter} is not the address of the channel's renter key")
    clock = Clock.now(context)
    fee = fee_inputs(context, renter)
    own = ledger_inputs([channel.utxo], fee).index(channel.utxo.input)
    builder = new_builder(context)
    builder.ttl = clock.ttl_until(clock.tip_ms + CLOSE_TTL_MS)
    closing_at = clock.time.slot_to_posix_ms(builder.ttl) + terms.close_period_ms
    datum = dataclasses.replace(channel.datum, closing_at=closing_at)
    output = TransactionOutput(
        channel.utxo.output.address, copy.deepcopy(channel.utxo.output.amount), datum=datum
    )
    add_output(builder, output)
    _spend(builder, deployment, channel, StartClose(own, CHANNEL_OUTPUT, terms))
    builder.required_signers = [key]
    add_inputs(builder, fee)
    return build(builder, renter)


def drain(
    context: ChainContext,
    deployment: Deployment,
    channel: Channel,
    terms: ChannelTerms,
    submitter: Address,
) -> Transaction:
    """Pay a closed channel's rest to its renter once the close period is over. Anyone may
    submit it (the submitter pays the fee and signs)."""
    _check_terms(channel, terms)
    if not channel.closing:
        raise BuildError(f"{out_ref(channel.utxo)} is open: its renter starts a close first")
    clock = Clock.now(context)
    first = clock.first_slot_after(channel.datum.closing_at)
    if clock.tip_slot < first:
        raise BuildError(
            f"the close period of {out_ref(channel.utxo)} runs until {clock.iso_slot(first)}"
        )
    builder = _pay_renter(context, deployment, channel, terms, submitter, Drain, PayoutKind.DRAIN)
    builder.validity_start = clock.tip_slot
    return build(builder, submitter)


def provider_end(
    context: ChainContext,
    deployment: Deployment,
    channel: Channel,
    terms: ChannelTerms,
    provider: Address,
) -> Transaction:
    """End the channel at once, paying all it holds back to its renter (claim first). The
    provider's key signs; `provider` pays the fee."""
    _check_terms(channel, terms)
    builder = _pay_renter(
        context, deployment, channel, terms, provider, ProviderEnd, PayoutKind.END
    )
    builder.required_signers = [PaymentVerificationKey(terms.provider_vkey).hash()]
    return build(builder, provider)


def mutual_close(
    context: ChainContext,
    deployment: Deployment,
    channel: Channel,
    terms: ChannelTerms,
    renter: Address,
    provider_amount: int,
) -> Transaction:
    """Close the channel at any time by both: `provider_amount` to the provider's address,
    the rest to the renter's. The renter's and the provider's keys sign (each in turn);
    `renter` pays the fee."""
    _check_terms(channel, terms)
    if not 0 <= provider_amount <= channel.lovelace:
        raise BuildError(f"the provider's share must be within 0 and {channel.lovelace}")
    fee = fee_inputs(context, renter)
    builder = new_builder(context)
    for to, owed in (
        (terms.provider, provider_amount),
        (terms.renter, channel.lovelace - provider_amount),
    ):
        if owed:
            output = TransactionOutput(from_plutus(to, deployment.network), owed)
            if at_least_min_utxo(context, output, owed) > owed:
                raise BuildError(
                    f"{output.address} would get {owed} lovelace, below the minimum UTxO"
                )
            add_output(builder, output)
    _spend(builder, deployment, channel, MutualClose(terms))
    builder.required_signers = [
        _renter_key(terms),
        PaymentVerificationKey(terms.provider_vkey).hash(),
    ]
    add_inputs(builder, fee)
    return build(builder, renter)


def check_channel(
    deployment: Deployment,
    channel: Channel,
    terms: ChannelTerms,
    own_vkey: bytes,
    own_address: Address,
    min_deposit: int,
    min_close_period_ms: int,
) -> None:
    """Whether a provider (its key `own_vkey`, paid at `own_address`) may serve `channel`:
    this deployment's script at the renter's staked address, lovelace only, `terms` its own,
    paying this provider's address and key, open, holding at least `min_deposit` and with a
    close period of at least `min_close_period_ms` (its time to make the last claim).
    ChannelRefused names the first thing that is not so."""
    utxo = channel.utxo
    datum = script_datum(utxo, ChannelDatum, deployment.channel_hash, ChannelRefused)
    if datum != channel.datum or channel_id(terms) != datum.terms:
        raise ChannelRefused(utxo, Refusal.OTHER_TERMS, "the terms do not hash to its id")
    check_address(utxo, "renter", terms.renter, ChannelRefused)
    check_vkey(utxo, datum.renter_vkey, ChannelRefused)
    renter = from_plutus(terms.renter, deployment.network)
    if utxo.output.address != deployment.channel_address(renter):
        raise ChannelRefused(utxo, Refusal.NOT_AT_SCRIPT, f"not staked like its renter {renter}")
    if terms.provider != to_plutus(own_address) or datum.payee != payee_hash(terms.provider):
        raise ChannelRefused(utxo, Refusal.OTHER_ADDRESS, f"it does not pay {own_address}")
    if terms.provider_vkey != own_vkey:
        raise ChannelRefused(utxo, Refusal.OTHER_KEY, terms.provider_vkey.hex())
    if channel.closing:
        raise ChannelRefused(utxo, Refusal.CLOSING, f"since {iso(datum.closing_at)}")
    if channel.spendable < min_deposit:
        raise ChannelRefused(
            utxo, Refusal.DEPOSIT, f"{channel.spendable} lovelace, below {min_deposit}"
        )
    if terms.close_period_ms < min_close_period_ms:
        raise ChannelRefused(
            utxo, Refusal.CLOSE_PERIOD, f"{terms.close_period_ms} ms, below {min_close_period_ms}"
        )


def _check_terms(channel: Channel, terms: ChannelTerms) -> None:
    if channel_id(terms) != channel.id:
        raise BuildError(f"these terms are not those of channel {out_ref(channel.utxo)}")


def _renter_key(terms: ChannelTerms) -> VerificationKeyHash:
    """The renter's payment key hash: it signs a close (open refuses a script renter)."""
    if not isinstance(terms.renter.payment, PubKeyCredential):
        raise BuildError("the renter's address is a script: it cannot sign")
    return VerificationKeyHash(terms.renter.payment.hash)


def _spend(
    builder: TransactionBuilder, deployment: Deployment, channel: Channel, redeemer: PlutusData
) -> None:
    source = script_source(builder, deployment.channel_ref)
    builder.add_script_input(channel.utxo, script=source, redeemer=Redeemer(redeemer))


def _pay_renter(
    context: ChainContext,
    deployment: Deployment,
    channel: Channel,
    terms: ChannelTerms,
    payer: Address,
    redeemer: type[Drain] | type[ProviderEnd],
    kind: PayoutKind,
) -> TransactionBuilder:
    """A builder spending `channel` into a payout of all it holds to its renter, tagged with
    `kind` and the channel's out-ref (so no other spend counts the output), the fee from
    `payer`'s inputs."""
    fee = fee_inputs(context, payer)
    own = ledger_inputs([channel.utxo], fee).index(channel.utxo.input)
    builder = new_builder(context)
    renter = from_plutus(terms.renter, deployment.network)
    add_output(builder, payout(context, renter, channel.lovelace, kind, channel.utxo.input))
    _spend(builder, deployment, channel, redeemer(own, RENTER_OUTPUT, terms))
    add_inputs(builder, fee)
    return builder
