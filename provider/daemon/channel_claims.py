"""The provider's side of payment channels on chain: admitting a channel to its book (read from
the chain, `check_channel`ed) and the claim schedule, which the daemon runs every
`payout_every_ms`.

Each round reads every live channel of the book from the chain (a claim, a top-up or a close
is seen there, whoever made it: a channel whose output was spent is followed by the spending
transaction's redeemers, never by what sits at its address) and claims, in batches of
`channel_claim_batch_max` channels per transaction signed by the provider's key: every channel
whose latest IOU exceeds what is claimed on chain, once `channel_claim_interval_s` has passed
since the last round that claimed them all (so an IOU after a quiet spell is claimed at the
next round); and at once any such channel whose renter started a close (its IOUs are
worthless from `closing_at`: `channel_min_close_period_ms`, checked on admission, leaves the
rounds time for it). A batch that cannot be claimed is tried channel by channel. Nothing is
kept in memory that a restart would need: the book is the state.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from ogmios.errors import ResponseError
from pycardano import (
    ChainContext,
    Transaction,
    TransactionInput,
    TransactionOutput,
    UTxO,
)

from offchain.chain.submit import ChainError
from offchain.chain.utxo import format_out_ref, parse_out_ref, utxo_at
from offchain.protocol.checks.refusal import script_datum
from offchain.protocol.ledger.iou import SignedIou
from offchain.protocol.ledger.types import ChannelDatum, ChannelTerms
from offchain.protocol.tx.channel import (
    OPEN,
    Channel,
    ChannelRefused,
    check_channel,
    claim_channels,
    read_channel,
    return_deposit,
)
from offchain.protocol.tx.txbuild import BuildError, out_ref
from provider.config import DaemonSettings
from provider.daemon.apart import apart
from provider.daemon.chain import Chain
from provider.daemon.confirmations import Confirmations
from provider.daemon.resume import with_point
from provider.daemon.spends import channel_moved, spending_transaction
from provider.money.channel_book import BookEntry, ChannelBook, ChannelView

log = logging.getLogger("unchained.provider")
CLAIM_FAILED = (BuildError, ChainError, ResponseError)  # a script's no (evaluation) included


def view_of(context: ChainContext, channel: Channel) -> ChannelView:
    """`channel` as the book keeps it: what any IOU may claim in all is what was claimed plus
    the lovelace above the minimum UTxO its continuing output keeps (the open's return
    deposit, at its widest datum)."""
    datum, address = channel.datum, channel.utxo.output.address
    reserve = return_deposit(context, TransactionOutput(address, 0, datum=datum))
    capacity = datum.claimed + max(0, channel.lovelace - reserve)
    return ChannelView(
        channel.id, out_ref(channel.utxo), str(address), datum.renter_vkey,
        datum.claimed, capacity, datum.closing_at,
    )  # fmt: skip


def admit(
    chain: Chain,
    book: ChannelBook,
    ref: TransactionInput,
    terms: ChannelTerms,
    settings: DaemonSettings,
) -> ChannelView:
    """Serve the channel at `ref` with these terms: read from the chain and checked (this
    deployment, this provider's key and address, open, deposit and close period at least the
    settings'), then in the book, once the output is `confirm_blocks` deep (this waits for
    the chain). ChannelRefused says why not; LookupError: no output there (or a fork took it
    away while waiting). The tip is read first: an output unspent after it was unspent
    there, so the search for the transaction that spends it may start there."""
    Confirmations(chain, settings.confirm_blocks).wait(format_out_ref(ref))
    at = chain.tip_point()
    utxo = utxo_at(chain.context, ref)
    if utxo is None:
        raise LookupError(f"no unspent output {format_out_ref(ref)} on chain")
    datum = script_datum(utxo, ChannelDatum, chain.deployment.channel_hash, ChannelRefused)
    channel = Channel(utxo, datum)
    check_channel(
        chain.deployment, channel, terms, chain.wallet.vkey, chain.payout,
        settings.channel_min_deposit_lovelace, settings.channel_min_close_period_ms,
    )  # fmt: skip
    view = view_of(chain.context, channel)
    book.open(view, at)
    return view


class ChannelClaimer:
    def __init__(self, chain: Chain, book: ChannelBook, settings: DaemonSettings) -> None:
        self.chain = chain
        self.book = book
        self.settings = settings
        self.last_round_ms: int | None = None  # the last round that claimed all; None: none yet

    async def tick(self) -> None:
        """Read the book's channels from the chain; claim those falling due."""
        if not self.book.live():
            return
        chain = self.chain
        now = await chain.call(chain.now_ms)
        channels = await self.refresh(self.book.live())
        interval_ms = self.settings.channel_claim_interval_s * 1000
        every = self.last_round_ms is None or now - self.last_round_ms >= interval_ms
        due: list[tuple[Channel, SignedIou]] = []
        for entry in self.book.live():
            closing = entry.view.closing_at
            if entry.iou is None or entry.unclaimed <= 0 or entry.view.id not in channels:
                continue
            if closing != OPEN and now >= closing:
                log.error("channel %s closed at %d with %d lovelace of IOUs unclaimed",
                          entry.view.id.hex(), closing, entry.unclaimed)  # fmt: skip
            elif every or closing != OPEN:
                due.append((channels[entry.view.id], entry.iou))
        if every and due:
            self.last_round_ms = now
        most = self.settings.channel_claim_batch_max
        for start in range(0, len(due), most):
            await apart(due[start : start + most], self._claim, _failed, CLAIM_FAILED)

    async def refresh(self, entries: Sequence[BookEntry]) -> dict[bytes, Channel]:
        """Each channel of `entries` as the chain holds it now, recorded in the book with the
        tip read before among its resume points (each output read after it was unspent
        there; `resume.py`); one whose spend cannot be read yet is left for the next round."""
        chain = self.chain
        at = await chain.call(chain.tip_point)
        found: dict[bytes, Channel] = {}
        for entry in entries:
            try:
                channel = await self._follow(entry)
            except (LookupError, ValueError, OSError, TimeoutError) as exc:
                log.warning("channel %s: its output %s was spent, where it went is not known "
                            "yet: %s", entry.view.id.hex(), entry.view.utxo, exc)  # fmt: skip
                continue
            if channel is None:
                log.info("channel %s has ended on chain", entry.view.id.hex())
                self.book.ended(entry.view.id)
                continue
            points = with_point(entry.resume_points, at)
            self.book.seen(await chain.call(view_of, chain.context, channel), None, points)
            found[channel.id] = channel
        return found

    async def _follow(self, entry: BookEntry) -> Channel | None:
        """The channel's output now: the one the book had while it is unspent; else where the
        transaction that spent it sent it, by the redeemer its script checked (a copy of its
        datum, which anyone may pay to its address, is never followed), and so on; None once
        a spend ended it. The book's output neither unspent nor spent on chain was undone by
        a fork (a claim rolled back): the book goes back to the output before it."""
        chain = self.chain
        ref: TransactionInput | None = parse_out_ref(entry.view.utxo)
        earlier = list(entry.earlier)  # the book's output is off the chain: back to these
        booked = True  # `ref` is the book's output (not one a spend on chain led to)
        while ref is not None:
            utxo = await chain.call(utxo_at, chain.context, ref)
            if utxo is not None:
                return read_channel(chain.deployment, utxo)
            # each output it went to was made after the point: the same search start holds
            try:
                found = await spending_transaction(chain.url, ref, entry.search_from)
            except LookupError:  # neither unspent nor spent: a fork undid the output
                if not (booked and earlier):
                    raise
                log.warning("channel %s: its output %s was undone by a fork, back to %s",
                            entry.view.id.hex(), format_out_ref(ref), earlier.pop(0))  # fmt: skip
                ref = parse_out_ref(self.book.back(entry.view.id))
                continue
            ref, booked = channel_moved(found.tx, ref), False
        return None

    async def _claim(self, claims: list[tuple[Channel, SignedIou]]) -> None:
        """Claim `claims` in one transaction from the provider's wallet, then record it."""
        chain = self.chain
        wallet = chain.wallet
        claim = functools.partial(claim_channels, own_payout=chain.payout, busy=chain.busy())
        unsigned = await chain.call(claim, chain.context, chain.deployment, claims, wallet.address)
        tx = wallet.sign(unsigned)
        total = sum(iou.amount - channel.datum.claimed for channel, iou in claims)
        log.info("claiming %d channel(s), %d lovelace: tx %s fee %d lovelace",
                 len(claims), total, tx.id, tx.transaction_body.fee)  # fmt: skip
        await chain.submit(tx, "claim")
        await chain.call(self._continued, tx, {channel.id for channel, _ in claims})

    def _continued(self, tx: Transaction, ids: set[bytes]) -> None:
        """Record the continuing outputs of the confirmed claim `tx` (built here, so none of
        them is a copy) for the channels `ids`: what they now hold and have claimed."""
        for index, output in enumerate(tx.transaction_body.outputs):
            try:
                channel = read_channel(
                    self.chain.deployment, UTxO(TransactionInput(tx.id, index), output)
                )
            except ValueError:  # a payout or the change
                continue
            if channel.id in ids:
                self.book.seen(view_of(self.chain.context, channel))


def _failed(claim: tuple[Channel, SignedIou], exc: Exception) -> None:
    channel, iou = claim
    log.error("cannot claim %d lovelace on channel %s: %s", iou.amount, channel.id.hex(), exc)
