"""The chain follower's index of payment channels: every channel of the deployment's channel
script, opened, claimed, topped up, closing and gone (drained, ended by its provider, or closed
by both), one ChannelEvent per transaction that moved it. The market never holds an IOU: it
reads what the chain did.

- An open is an output at the channel script whose inline ChannelDatum names terms the
  transaction's metadata carries (label 1694): they hash to the datum's id, pay the datum's
  payee, and their nonce is an input the transaction spends, so no other transaction can ever
  open the same id. Anyone can lock anything at the script: an output that fails these is no
  channel the index knows (a copy of a channel's datum included).
- A channel moves only when its current output is spent, as the spending redeemer says. A
  batch claim pairs channel input i with output first_continuing + i (`TxReader.continuing`);
  a top-up and a start of close name their output; what a claim took is the continuing
  datum's `claimed` less the spent one's. A drain and a provider's end pay the renter output
  their redeemer names (tagged Payout 3 or 4); a mutual close names none.

The follower calls `apply` for each transaction inside the database transaction that applies
its block, and `roll_back` inside the one that undoes blocks: a rollback deletes the events of
the blocks it takes back and restores each channel from its newest event left (none left: the
channel was opened after the point, and goes too).
"""

from __future__ import annotations

import logging

from pycardano import PlutusData, Transaction, TransactionInput, TransactionOutput
from sqlalchemy import delete
from sqlmodel import Session, col, select

from offchain.chain.utxo import format_out_ref, parse_out_ref
from offchain.market.models import Channel, ChannelEvent, ChannelMove, ChannelNow, ChannelState
from offchain.market.services.offers import key_hash
from offchain.market.services.undo import BlockAt
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.types import (
    ChannelClaim,
    ChannelDatum,
    ChannelTerms,
    ChannelTopUp,
    Drain,
    MutualClose,
    ProviderEnd,
    StartClose,
)
from offchain.protocol.tx.channel import channel_id, payee_hash, terms_from_metadata
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.tx_reader import Script, ScriptHashes, TxReader, datum_as, inline_datum

log = logging.getLogger(__name__)
Tracked = dict[TransactionInput, Channel]  # the channels of the index by their current output
# How a channel ends, by the redeemer that spends it for good.
ENDS: dict[type[PlutusData], tuple[ChannelMove, ChannelState]] = {
    Drain: (ChannelMove.DRAIN, ChannelState.DRAINED),
    ProviderEnd: (ChannelMove.END, ChannelState.ENDED),
    MutualClose: (ChannelMove.MUTUAL_CLOSE, ChannelState.CLOSED),
}
# The moves a channel goes on from, by the redeemer that spends it.
CONTINUES: dict[type[PlutusData], ChannelMove] = {
    ChannelClaim: ChannelMove.CLAIM,
    ChannelTopUp: ChannelMove.TOP_UP,
    StartClose: ChannelMove.START_CLOSE,
}
NOW = tuple(ChannelNow.model_fields)  # the state columns a channel and its events share


def tracked(session: Session, spent: list[str]) -> Tracked:
    """The channels whose current output is among `spent` (a block's spent out-refs)."""
    query = select(Channel).where(col(Channel.ref).in_(spent))
    found = session.exec(query)
    return {parse_out_ref(channel.ref): channel for channel in found if channel.ref is not None}


def apply(
    session: Session,
    deployment: Deployment,
    scripts: ScriptHashes,
    at: BlockAt,
    tx: Transaction,
    channels: Tracked,
) -> None:
    """The channel moves of `tx` (phase-2 valid), in block `at`: spends of tracked channels,
    then opens. `channels` follows each channel to its new output, so a later transaction of
    the same block finds it."""
    read = TxReader(tx)
    tx_id = tx.id.payload.hex()
    outputs = tx.transaction_body.outputs
    for ref in read.inputs:
        channel = channels.pop(ref, None)
        if channel is not None:
            _spent(session, at, tx_id, read, ref, channel, channels)
    for index, output in enumerate(outputs):
        if scripts.at(output.address) is Script.CHANNEL:
            _opened(session, deployment, at, tx, read, index, channels)


def _spent(
    session: Session,
    at: BlockAt,
    tx_id: str,
    read: TxReader,
    ref: TransactionInput,
    channel: Channel,
    channels: Tracked,
) -> None:
    """Tracked `channel`, at `ref`, spent by this transaction: ended, or gone on."""
    redeemer = read.spend(ref, Script.CHANNEL)
    outputs = read.tx.transaction_body.outputs
    if redeemer is not None and type(redeemer) in ENDS:
        ended, state = ENDS[type(redeemer)]
        back = 0 if isinstance(redeemer, MutualClose) else outputs[redeemer.renter_output].lovelace
        channel.ref, channel.state, channel.lovelace = None, state, 0
        _record(session, at, tx_id, channel, ended, back)
        return
    move = CONTINUES.get(type(redeemer))
    if isinstance(redeemer, ChannelClaim):
        index = read.continuing.get(ref)
    else:  # a top-up and a start of close name their output
        index = redeemer.output if isinstance(redeemer, ChannelTopUp | StartClose) else None
    datum = _continuing(outputs, index, channel)
    if datum is None or move is None or index is None:
        log.warning("channel %s spent by %s with no channel move the index reads", channel.id,
                    tx_id)  # fmt: skip
        return
    lovelace = outputs[index].lovelace
    amount = {
        ChannelMove.CLAIM: datum.claimed - channel.claimed,
        ChannelMove.TOP_UP: lovelace - channel.lovelace,
        ChannelMove.START_CLOSE: 0,
    }[move]
    if move is ChannelMove.TOP_UP:
        channel.funded += amount
    _now(channel, format_out_ref(TransactionInput(read.tx.id, index)), lovelace, datum)
    _record(session, at, tx_id, channel, move, amount)
    channels[TransactionInput(read.tx.id, index)] = channel


def _continuing(
    outputs: list[TransactionOutput], index: int | None, channel: Channel
) -> ChannelDatum | None:
    """The datum of output `index` if it continues `channel` (the scripts checked all of it)."""
    if index is None or not 0 <= index < len(outputs):
        return None
    raw = inline_datum(outputs[index])
    datum = datum_as(raw, Script.CHANNEL) if raw is not None else None
    return datum if isinstance(datum, ChannelDatum) and datum.terms.hex() == channel.id else None


def _now(channel: Channel, ref: str, lovelace: int, datum: ChannelDatum) -> None:
    """The channel as the output `ref` holding `datum` and `lovelace` leaves it."""
    closing = datum.closing_at >= 0
    channel.ref, channel.lovelace, channel.claimed = ref, lovelace, datum.claimed
    channel.closing_at_ms = datum.closing_at if closing else None
    channel.state = ChannelState.CLOSING if closing else ChannelState.OPEN


def _opened(
    session: Session,
    deployment: Deployment,
    at: BlockAt,
    tx: Transaction,
    read: TxReader,
    index: int,
    channels: Tracked,
) -> None:
    """Output `index` at the channel script, as an open if it is one (see the module)."""
    output = tx.transaction_body.outputs[index]
    ref = TransactionInput(tx.id, index)
    raw = inline_datum(output)
    datum = datum_as(raw, Script.CHANNEL) if raw is not None else None
    if ref in channels or not isinstance(datum, ChannelDatum):
        return  # a channel's continuing output, or anything else anyone locked there
    terms = terms_from_metadata(tx.auxiliary_data)
    problem = _not_an_open(session, read, datum, terms)
    if problem is not None or terms is None:
        log.warning("output %s at the channel script is no channel open: %s",
                    format_out_ref(ref), problem)  # fmt: skip
        return
    try:  # the terms' addresses as the ledger writes them (anyone can write any data)
        renter, provider = (
            str(from_plutus(a, deployment.network)) for a in (terms.renter, terms.provider)
        )
    except Exception:
        log.warning("channel %s names an address that is none", datum.terms.hex())
        return
    channel = Channel(
        id=datum.terms.hex(), renter=renter, renter_vkey=datum.renter_vkey.hex(),
        provider=provider, provider_vkey=terms.provider_vkey.hex(),
        provider_id=key_hash(terms.provider_vkey),
        close_period_ms=terms.close_period_ms, nonce=format_out_ref(terms.nonce.to_input()),
        open_tx=tx.id.payload.hex(), opened_slot=at.slot, funded=output.lovelace, claimed=0,
        lovelace=0, state=ChannelState.OPEN,
    )  # fmt: skip
    _now(channel, format_out_ref(ref), output.lovelace, datum)
    session.add(channel)
    session.flush()  # the channel before its event (no relationship orders the two)
    _record(session, at, channel.open_tx, channel, ChannelMove.OPEN, output.lovelace)
    channels[ref] = channel


def _not_an_open(
    session: Session, read: TxReader, datum: ChannelDatum, terms: ChannelTerms | None
) -> str | None:
    """Why an output holding `datum` in this transaction opens no channel; None if it does."""
    if terms is None:
        return "its transaction's metadata carries no channel terms"
    if channel_id(terms) != datum.terms:
        return "its datum's id is not the hash of the terms in its metadata"
    if payee_hash(terms.provider) != datum.payee:
        return "its datum's payee is not the terms' provider"
    if terms.nonce.to_input() not in read.inputs:
        return "its transaction does not spend the terms' nonce"
    if session.get(Channel, datum.terms.hex()) is not None:
        return "a channel with this id is indexed already"
    return None


def _record(
    session: Session, at: BlockAt, tx_id: str, channel: Channel, move: ChannelMove, amount: int
) -> None:
    """The channel's row as `move` leaves it, and the event that says so."""
    session.add(channel)
    session.add(ChannelEvent(
        channel_id=channel.id, move=move, amount=amount, tx_id=tx_id, slot=at.slot,
        height=at.height, **{name: getattr(channel, name) for name in NOW},
    ))  # fmt: skip


def roll_back(session: Session, slot: int) -> None:
    """Forget every move after `slot` (in the caller's transaction): each channel they moved
    is as its newest event left says, or gone if none is left."""
    moved = session.exec(
        select(ChannelEvent.channel_id).where(col(ChannelEvent.slot) > slot).distinct()
    ).all()
    session.execute(delete(ChannelEvent).where(col(ChannelEvent.slot) > slot))
    for moved_id in moved:
        channel = session.get(Channel, moved_id)
        newest = session.exec(
            select(ChannelEvent).where(ChannelEvent.channel_id == moved_id)
            .order_by(col(ChannelEvent.slot).desc(), col(ChannelEvent.id).desc()).limit(1)
        ).first()  # fmt: skip
        if newest is None:
            session.delete(channel)
            continue
        for name in NOW:
            setattr(channel, name, getattr(newest, name))
        session.add(channel)
