"""Transactions for a browser wallet (CIP-30): the market builds each one unsigned from the
UTxOs the wallet names (`getUtxos()`), change to its change address (`getChangeAddress()`),
and submits it with the witness set the wallet's `signTx(tx, true)` returns.

Nothing the page sends is trusted: each UTxO must be unspent on chain and the very output it
claims to be (the build spends the chain's copy), at a key address of the deployment's
network. A witness set is added to a transaction only if its signatures verify over that
transaction's id; what a submit takes is checked as the CLI's own route checks it (the lock
the market built, the provider-signed Cancel it stores, a refund of the job's escrow, a
channel's transaction of the renter)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pycardano import (
    Address,
    ChainContext,
    GenesisParameters,
    Network,
    ProtocolParameters,
    ScriptHash,
    Transaction,
    TransactionOutput,
    TransactionWitnessSet,
    UTxO,
    VerificationKeyHash,
)
from pycardano.exception import PyCardanoException
from sqlmodel import Session, col, select

from offchain.chain.ogmios import OgmiosError
from offchain.chain.submit import submit_sync
from offchain.chain.time import ChainTime
from offchain.chain.utxo import format_out_ref, parse_out_ref
from offchain.market import models, schemas
from offchain.market.errors import Conflict, Forbidden, Invalid, NotFound
from offchain.market.models import CancelState, Job, Offer
from offchain.market.services import cancels, offers, quotes
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings
from offchain.protocol.api import wire
from offchain.protocol.job import jobspec
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.payloads import verify
from offchain.protocol.ledger.types import ChannelTerms, TxOutRef
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.tx_reader import inline_datum
from offchain.protocol.tx.txbuild import BuildError, with_witnesses

T = TypeVar("T")
MAX_OUTPUTS = 1 << 16  # the ledger's output index is 16 bits


class WalletContext(ChainContext):
    """The chain as a builder sees it when a wallet pays: the wallet's checked UTxOs are all
    its payer address holds (so the builder spends only those, and pays change there); every
    other read goes to the chain."""

    def __init__(self, chain: ChainContext, payer: Address, funds: Sequence[UTxO]) -> None:
        self.chain, self.payer, self.funds = chain, payer, list(funds)

    @property
    def protocol_param(self) -> ProtocolParameters:
        return self.chain.protocol_param

    @property
    def genesis_param(self) -> GenesisParameters:
        return self.chain.genesis_param

    @property
    def network(self) -> Network:
        return self.chain.network

    @property
    def epoch(self) -> int:
        return self.chain.epoch

    @property
    def last_block_slot(self) -> int:
        return self.chain.last_block_slot

    def _utxos(self, address: str) -> list[UTxO]:
        return list(self.funds) if address == str(self.payer) else self.chain.utxos(address)

    def evaluate_tx_cbor(self, cbor: bytes | str) -> Any:
        return self.chain.evaluate_tx_cbor(cbor)

    def submit_tx_cbor(self, cbor: bytes | str) -> Any:
        raise NotImplementedError("a wallet's transaction is submitted with its witness set")

    # offchain.chain.context.ChainQueries, from the chain
    def chain_time(self) -> ChainTime:
        return self.chain.chain_time()

    def utxo_by_tx_id(self, tx_id: str, index: int) -> UTxO | None:
        return self.chain.utxo_by_tx_id(tx_id, index)

    def script_reward_balance(self, script: ScriptHash) -> int | None:
        return self.chain.script_reward_balance(script)


def _address(text: str, deployment: Deployment, field: str) -> Address:
    """A wallet's address as CIP-30 gives it (hex bytes) or bech32, of a key on the
    deployment's network."""
    try:
        address = (
            Address.from_primitive(text)
            if text.startswith("addr")
            else Address.from_primitive(bytes.fromhex(text))
        )
    except Exception as exc:  # pycardano raises several kinds for a bad address
        raise Invalid(f"not a Cardano address (hex bytes or bech32): {text[:120]}", field) from exc
    if address.network != deployment.network:
        raise Invalid(f"{address} is not on this market's network ({deployment.network.name})",
                      field)  # fmt: skip
    if not isinstance(address.payment_part, VerificationKeyHash):
        raise Invalid(f"{address} is not a key's address: a wallet spends with its keys", field)
    return address


def _same_output(given: UTxO, found: UTxO) -> bool:
    """Whether the wallet's copy of an output is the chain's: address, value, datum (its
    CBOR: pycardano holds a decoded datum in several classes) and reference script."""
    mine, chain = given.output, found.output

    def script(output: TransactionOutput) -> bytes | None:
        held = output.script
        return held if held is None or isinstance(held, bytes) else held.to_cbor()

    return (
        mine.address == chain.address
        and mine.amount == chain.amount
        and mine.datum_hash == chain.datum_hash
        and inline_datum(mine) == inline_datum(chain)
        and script(mine) == script(chain)
    )


def checked_funds(chain: Chain, funds: schemas.WalletFunds, party: str) -> WalletContext:
    """The wallet's UTxOs, each at an address of `party`'s key (the key that signed the
    request signs the transaction), unspent on chain and exactly the output it says it is,
    behind its change address: Invalid (422) for a malformed or foreign one, Conflict (409)
    for one spent or not as the chain has it."""
    deployment = chain.deployment
    payer = _address(funds.change_address, deployment, "change_address")
    checked: list[UTxO] = []
    for index, text in enumerate(funds.utxos):
        field = f"utxos.{index}"
        try:
            given = UTxO.from_cbor(bytes.fromhex(text))
        except Exception as exc:  # pycardano raises several kinds for bytes of another shape
            raise Invalid(f"not a TransactionUnspentOutput (CBOR hex): {exc}", field) from exc
        if not 0 <= given.input.index < MAX_OUTPUTS:
            raise Invalid(f"output index {given.input.index} is not an output's", field)
        ref = format_out_ref(given.input)
        if any(utxo.input == given.input for utxo in checked):
            raise Invalid(f"{ref} is named twice", field)
        owner = _address(str(given.output.address), deployment, field).payment_part
        if owner is None or owner.payload.hex() != party:
            raise Invalid(f"{ref} is not at an address of the key that signed the request",
                          field)  # fmt: skip
        found = chain.utxo(given.input)
        if found is None:
            raise Conflict(f"{ref} is not an unspent output on chain (spent, or never was)", field)
        if not _same_output(given, found):
            raise Conflict(f"{ref} is not the output the chain holds there", field)
        checked.append(found)
    return WalletContext(chain.context, payer, checked)


def _built(what: str, field: str, build: Callable[[], T]) -> T:
    """`build()`, its BuildError (or pycardano's own refusal) a Conflict saying what is
    missing."""
    try:
        return build()
    except (BuildError, PyCardanoException) as exc:
        raise Conflict(f"cannot build the {what}: {exc}", field) from exc


def unsigned(tx: Transaction, **extra: Any) -> wire.WalletTransaction:
    return wire.WalletTransaction(
        transaction=tx.to_cbor_hex(), tx_id=tx.id.payload.hex(), fee=tx.transaction_body.fee,
        **extra,
    )  # fmt: skip


# --- jobs ---------------------------------------------------------------------------------


def lock(session: Session, chain: Chain, job: Job, funds: schemas.WalletFunds) -> wire.WalletLock:
    """The job's lock spending only the wallet's UTxOs (change to its change address),
    recorded as the job's one lock as `GET /jobs/{id}/lock` records its own."""
    context = checked_funds(chain, funds, job.consumer_id)
    built = quotes.lock_transaction(session, chain, job, context, context.payer, "utxos")
    tx = Transaction.from_cbor(bytes.fromhex(built.transaction))
    output = tx.transaction_body.outputs[escrows.ESCROW_OUTPUT]
    return wire.WalletLock(
        **built.model_dump(), fee=tx.transaction_body.fee, escrow_address=str(output.address),
        escrow_hash=chain.deployment.escrow_hash.payload.hex(),
        quoted_lovelace=job.lock_lovelace,
    )  # fmt: skip


def _escrow(chain: Chain, job: Job) -> UTxO:
    if job.escrow_ref is None:
        raise Conflict(f"job {job.id} has no escrow: nothing was locked", "state")
    utxo = chain.utxo(job.escrow)
    if utxo is None:
        raise Conflict(f"escrow {job.escrow_ref} is spent already (settled, refunded, "
                       "cancelled or slashed)", "escrow")  # fmt: skip
    return utxo


def cancel(chain: Chain, job: Job, funds: schemas.WalletFunds) -> wire.WalletTransaction:
    """The escrow's Cancel with the wallet paying the fee, as `unchained job cancel` builds
    it: post it to `POST /jobs/{id}/cancel` for the provider to answer."""
    escrow = _escrow(chain, job)
    context = checked_funds(chain, funds, job.consumer_id)
    tx = _built("cancel", "utxos", lambda: escrows.cancel(
        context, chain.deployment, escrow, context.payer))  # fmt: skip
    return unsigned(tx, escrow=job.escrow_ref)


def refund(
    session: Session, chain: Chain, job: Job, funds: schemas.WalletFunds, slash: bool
) -> wire.WalletTransaction:
    """The escrow's refund after its close (with `slash`, the refund and the slash share of
    the provider's bond in one), the wallet paying the fee, as `unchained job refund` /
    `job slash` build them."""
    escrow = _escrow(chain, job)
    context = checked_funds(chain, funds, job.consumer_id)
    deployment = chain.deployment
    if not slash:
        tx = _built("refund", "utxos", lambda: escrows.refund(
            context, deployment, escrow, context.payer))  # fmt: skip
        return unsigned(tx, escrow=job.escrow_ref)
    if job.acceptance_signature is None:
        raise Conflict(f"the provider never accepted job {job.id}, so there is nothing to "
                       "slash: build the refund", "slash")  # fmt: skip
    provider = Address.from_primitive(job.provider_address)
    vkey = job.provider_key
    found = bonds.bonds_of(chain.context, deployment, provider, vkey)
    if not found:
        raise Conflict("the provider has no bond on chain to slash: build the refund", "slash")
    bond = max(found, key=lambda pair: pair[0].output.amount.coin)[0]
    acceptance = bytes.fromhex(job.acceptance_signature)
    tx = _built("slash", "utxos", lambda: bonds.slash(
        context, deployment, escrow, bond, acceptance, context.payer))  # fmt: skip
    return unsigned(tx, escrow=job.escrow_ref)


def witnessed(unsigned_hex: str, witness_set_hex: str, base: Transaction | None = None) -> str:
    """The transaction `unsigned_hex` (or `base`, the stored copy of it with witnesses of its
    own) with the wallet's key witnesses from `witness_set_hex` added, each checked to sign
    it: the signed transaction, CBOR hex."""
    tx = cancels.transaction(unsigned_hex)
    if base is not None:
        if base.id != tx.id:
            raise Invalid(f"not the transaction {base.id} this step signs: sign it unchanged",
                          "transaction")  # fmt: skip
        tx = base
    try:
        witnesses = TransactionWitnessSet.from_cbor(bytes.fromhex(witness_set_hex))
    except Exception as exc:  # pycardano raises several kinds for bytes of another shape
        raise Invalid(f"not a witness set (CBOR hex): {exc}", "witness_set") from exc
    keys = list(witnesses.vkey_witnesses or [])
    if not keys:
        raise Invalid("the witness set holds no key witness: sign the transaction", "witness_set")
    for witness in keys:
        if not verify(witness.vkey.payload, tx.id.payload, witness.signature):
            raise Invalid(f"the witness of key {witness.vkey.hash()} does not sign this "
                          "transaction", "witness_set")  # fmt: skip
    signed = with_witnesses(tx, keys)
    return signed.to_cbor_hex()


def submit(settings: MarketSettings, signed_hex: str, signer: str, what: str) -> str:
    """Submit `signed_hex` if `signer` (a key hash) signed it: its tx id."""
    tx = cancels.transaction(signed_hex)
    if signer not in quotes.signers(tx):
        raise Invalid(f"the {what} is not signed by your payment key", "witness_set")
    try:
        submit_sync(settings.ogmios_url, bytes.fromhex(signed_hex))
    except OgmiosError as exc:
        raise Conflict(f"the chain refused the {what}: {exc.message}", "transaction") from exc
    return tx.id.payload.hex()


def submit_cancel(
    settings: MarketSettings, job: Job, body: schemas.WitnessedTransaction
) -> wire.Submitted:
    """The provider-signed Cancel the market holds, with the renter's witness added:
    submitted; the chain follower makes the job cancelled."""
    if job.cancel_state != CancelState.SIGNED or job.cancel_tx is None:
        raise Conflict(f"job {job.id}'s cancel is not signed by its provider (yet): see GET "
                       f"/jobs/{job.id}/cancel", "state")  # fmt: skip
    stored = cancels.transaction(job.cancel_tx)
    signed = witnessed(body.transaction, body.witness_set, stored)
    tx_id = submit(settings, signed, job.consumer_id, "cancel")
    return wire.Submitted(tx_id=tx_id, escrow=job.escrow_ref or "")


def submit_refund(
    settings: MarketSettings, job: Job, body: schemas.WitnessedTransaction
) -> wire.Submitted:
    """A refund (or slash) of the job's escrow, signed by the renter's wallet: submitted."""
    if job.escrow_ref is None:
        raise Conflict(f"job {job.id} has no escrow: nothing was locked", "state")
    tx = cancels.transaction(body.transaction)
    if parse_out_ref(job.escrow_ref) not in tx.transaction_body.inputs:
        raise Invalid(f"not a refund of escrow {job.escrow_ref}: it does not spend it",
                      "transaction")  # fmt: skip
    signed = witnessed(body.transaction, body.witness_set)
    tx_id = submit(settings, signed, job.consumer_id, "refund")
    return wire.Submitted(tx_id=tx_id, escrow=job.escrow_ref)


# --- channels -------------------------------------------------------------------------------


def _renter(context: WalletContext, party: str) -> Address:
    if context.payer.payment_part.payload.hex() != party:
        raise Invalid("the change address is not of the key that signed: a channel's renter "
                      "signs its close with the key of its address", "change_address")  # fmt: skip
    return context.payer


def open_channel(
    session: Session, chain: Chain, party: str, vkey: bytes, body: schemas.ChannelOpen
) -> wire.WalletChannel:
    """A channel from the wallet's UTxOs to the provider its signed offer names (its payout
    address and key), as `unchained channel open` builds it; its renter is the change
    address, whose key (the one that signed) signs the close and, unless another is named,
    the IOUs."""
    provider = offers.provider(session, body.provider_id)
    offer = session.exec(
        select(Offer).where(Offer.provider_id == provider.id, col(Offer.active))
    ).first()
    if offer is None:
        raise Conflict(f"provider {provider.id} has no offer up: a channel opens to a provider "
                       "with one", "provider_id")  # fmt: skip
    payout = Address.from_primitive(json.loads(offer.body)["payout_address"])
    context = checked_funds(chain, body.funds, party)
    renter = _renter(context, party)
    renter_vkey = bytes.fromhex(body.renter_vkey) if body.renter_vkey else vkey
    tx, terms = _built("channel open", "utxos", lambda: channels.open_channel(
        context, chain.deployment, renter, renter_vkey, payout, bytes.fromhex(provider.vkey),
        body.deposit, body.close_period_ms,
    ))  # fmt: skip
    output = tx.transaction_body.outputs[channels.CHANNEL_OUTPUT]
    channel = unsigned(tx, channel_id=channels.channel_id(terms).hex())
    return wire.WalletChannel(
        **channel.model_dump(), terms_cbor=terms.to_cbor_hex(),
        channel_address=str(output.address), lovelace=output.amount.coin,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Held:
    """A renter's channel as the index and the chain have it now."""

    row: models.Channel
    channel: channels.Channel
    terms: ChannelTerms


def held(session: Session, chain: Chain, channel_id: str, party: str) -> Held:
    """The channel `channel_id`, if `party` is its renter and it is on chain."""
    row = session.get(models.Channel, channel_id.lower())
    if row is None:
        raise NotFound(f"no channel {channel_id} in the market's index (yet?)", "channel_id")
    renter = Address.from_primitive(row.renter)
    if renter.payment_part is None or renter.payment_part.payload.hex() != party:
        raise Forbidden(f"channel {row.id} is not yours: its renter is {row.renter}", "channel_id")
    utxo = chain.utxo(parse_out_ref(row.ref)) if row.ref else None
    if utxo is None:
        raise Conflict(f"channel {row.id} is not on chain: it was closed", "channel_id")
    terms = ChannelTerms(
        to_plutus(renter), to_plutus(Address.from_primitive(row.provider)),
        bytes.fromhex(row.provider_vkey), row.close_period_ms,
        TxOutRef.of(parse_out_ref(row.nonce)),
    )  # fmt: skip
    return Held(row, channels.read_channel(chain.deployment, utxo), terms)


def top_up(
    session: Session, chain: Chain, party: str, channel_id: str, body: schemas.ChannelTopUp
) -> wire.WalletTransaction:
    """Add `lovelace` to the renter's open channel from the wallet's UTxOs."""
    channel = held(session, chain, channel_id, party)
    if channel.channel.closing:
        raise Conflict(f"channel {channel.row.id} is closing: a top-up would only come back at "
                       "the drain", "channel_id")  # fmt: skip
    context = checked_funds(chain, body.funds, party)
    tx = _built("top-up", "utxos", lambda: channels.top_up(
        context, chain.deployment, channel.channel, channel.terms, body.lovelace,
        context.payer))  # fmt: skip
    return unsigned(tx, channel_id=channel.row.id)


def close(
    session: Session, chain: Chain, party: str, channel_id: str, funds: schemas.WalletFunds
) -> wire.WalletTransaction:
    """The close's next step, as `unchained channel close` takes it: start the close of an
    open channel, or drain a closing one back to the renter once its close period passed."""
    channel = held(session, chain, channel_id, party)
    context = checked_funds(chain, funds, party)
    renter = _renter(context, party)
    deployment = chain.deployment
    if channel.channel.closing:
        tx = _built("drain", "channel_id", lambda: channels.drain(
            context, deployment, channel.channel, channel.terms, renter))  # fmt: skip
        return unsigned(tx, channel_id=channel.row.id, step="drain")
    tx = _built("close", "channel_id", lambda: channels.start_close(
        context, deployment, channel.channel, channel.terms, renter))  # fmt: skip
    return unsigned(tx, channel_id=channel.row.id, step="start_close")


def submit_channel(
    session: Session, settings: MarketSettings, chain: Chain, party: str,
    body: schemas.WitnessedTransaction,
) -> wire.Submitted:  # fmt: skip
    """A channel transaction of the wallet's (an open, top-up, close or drain): one that
    pays to the deployment's channel script or spends a channel of the market's index,
    signed by the requester."""
    tx = cancels.transaction(body.transaction)
    script = chain.deployment.channel_hash
    spent = [format_out_ref(ref) for ref in tx.transaction_body.inputs]
    touches = any(o.address.payment_part == script for o in tx.transaction_body.outputs) or (
        session.exec(select(models.Channel).where(col(models.Channel.ref).in_(spent))).first()
        is not None
    )
    if not touches:
        raise Invalid("not a channel transaction: it neither pays to the channel script nor "
                      "spends a channel", "transaction")  # fmt: skip
    signed = witnessed(body.transaction, body.witness_set)
    tx_id = submit(settings, signed, party, "channel transaction")
    return wire.Submitted(tx_id=tx_id, escrow="")


# --- the page's reads ---------------------------------------------------------------------


def config(settings: MarketSettings, chain: Chain) -> wire.AppConfig:
    deployment = chain.deployment
    return wire.AppConfig(
        market=settings.identity, network_id=deployment.network_id,
        network=deployment.network.name.lower(),
        escrow_hash=deployment.escrow_hash.payload.hex(),
        escrow_address=str(deployment.escrow_address()),
        channel_hash=deployment.channel_hash.payload.hex(),
        channel_address=str(deployment.channel_address()),
        bond_hash=deployment.bond_hash.payload.hex(),
        settle_hash=deployment.settle_hash.payload.hex(),
        refund_window_ms=deployment.refund_window_ms,
        max_utxos=schemas.MAX_WALLET_UTXOS,
    )  # fmt: skip


def check_spec(text: str) -> wire.SpecCheck:
    """The spec in `text` (YAML, or JSON: YAML reads both) as the CLI reads a spec file:
    its messages when it is refused (the lines `unchained job submit` prints under the
    file's name), else the parsed spec and its digest."""
    try:
        spec = jobspec.spec_from_yaml(text)
        canonical = schemas.requestable(spec).canonical_json()
    except (jobspec.JobSpecError, ValueError) as exc:  # the CLI's, or what POST /jobs refuses
        # a lone surrogate a message echoes is escaped: UTF-8 cannot carry it
        said = str(exc).encode("utf-8", "backslashreplace").decode()
        return wire.SpecCheck(ok=False, messages=said.splitlines())
    return wire.SpecCheck(
        ok=True, messages=[], kind=getattr(spec, "kind", "job"),
        spec=json.loads(canonical), spec_digest=spec.digest().hex(),
    )  # fmt: skip
