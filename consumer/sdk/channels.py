"""The renter's side of payment channels (contracts/PROTOCOL.md, channels): open one to a
provider named by its signed offer on the market, top it up, close it (start the close, then
drain the rest once the close period passed), read its state from the chain, and sign
cumulative IOUs as a service reports usage (`consumer.sdk.iou_signer.IouSigner`): never more than
the renter received, never more than the channel holds, never below the last one.

    channels = Channels(key, context, ogmios_url, deployment, ChannelStore(state_dir))
    provider = find_provider(market_reader, "ab12cd34", market_identity, network)
    record = await channels.open(provider, 10 * ADA, 3_600_000)
    signer = channels.signer(record.channel_id)
    iou = signer.pay(reported_total, received_total)   # handed to the provider's gateway
    await channels.close(record.channel_id)            # starts the close; again to drain

The builders (offchain.protocol.tx.channel) make unsigned transactions; they run in a thread
here, as the job SDK's do, so an event loop never stalls. Money is integer lovelace."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pycardano import Address, Network, Transaction, TransactionInput, TransactionOutput, UTxO

from consumer.sdk.channel_store import ChannelRecord, ChannelStore
from consumer.sdk.errors import ConsumerError, InsufficientFunds, NothingToDo
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.pending import Prepared, sign_here
from consumer.sdk.quote import offer_signer
from consumer.sdk.session import Wait
from offchain.chain.ogmios import OgmiosError
from offchain.chain.submit import submit_confirmed
from offchain.chain.utxo import format_out_ref
from offchain.protocol.api.wire import SignedOffer
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.amounts import ADA, ada
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Clock

if TYPE_CHECKING:
    from pycardano import ChainContext

    from consumer.sdk.market_read import MarketReader

FEE_MARGIN = 2 * ADA  # a channel transaction's fee and its change's min-UTxO, at most
PROVIDER_ID_HEX = 56  # a key hash
OFFERS_SEARCHED = 1000  # a provider named by its address is looked for among this many offers


class NotDrainableYet(ConsumerError):
    """The channel is closing and its close period has not passed in chain time."""


@dataclasses.dataclass(frozen=True)
class ProviderOffer:
    """Who a channel pays, from the provider's own signed offer (its signature checked)."""

    provider_id: str
    address: Address  # its payout address
    vkey: bytes  # 32 bytes: the key that signed the offer (it signs a provider end)


def find_provider(
    market: MarketReader, given: str, market_identity: str, network: Network
) -> ProviderOffer:
    """The provider `given` names, an id (key hash, or a unique prefix of one) or a payout
    address, read from its offer on the market: the offer's signature is checked, so the
    market cannot swap the address or the key. ConsumerError when no online offer (or more
    than one provider) matches."""
    if given.startswith("addr"):
        found = market.search_offers("", OFFERS_SEARCHED)["offers"]
        offers = [o for o in found if o["terms"]["payout_address"] == given]
    else:
        wildcard = "" if len(given) == PROVIDER_ID_HEX else "*"
        offers = market.search_offers(f"provider={given}{wildcard}", OFFERS_SEARCHED)["offers"]
    providers = sorted({offer["provider_id"] for offer in offers})
    if not providers:
        raise ConsumerError(
            f"no offer on the market names provider {given}: a channel opens to a provider with "
            "an offer up (`unchained offers search` lists them)", provider=given,
        )  # fmt: skip
    if len(providers) > 1:
        raise ConsumerError(
            f"{given!r} names {len(providers)} providers: {', '.join(providers)}; give more of "
            "the id", provider=given, matches=providers,
        )  # fmt: skip
    offer = SignedOffer.model_validate(offers[0])
    vkey = offer_signer(offer, market_identity)  # QuoteRejected unless the provider signed it
    address = Address.from_primitive(offer.terms["payout_address"])
    if address.network != network:
        raise ConsumerError(f"the provider's payout address {address} is not on {network.name}")
    return ProviderOffer(offer.provider_id, address, vkey)


@dataclasses.dataclass(frozen=True)
class ChannelStatus:
    """A channel as the chain has it now, beside what this renter signed. `deposit` is what the
    provider may claim in all (the deposit and every top-up), `left` what is not signed yet."""

    record: ChannelRecord
    state: str  # open, closing, drainable (the close period passed), then as the explorer
    # says it once gone: drained (by this renter) or ended (by its provider, or both)
    utxo: str | None
    lovelace: int  # held on chain now
    deposit: int
    claimed: int | None  # None once closed: the chain no longer holds it
    signed: int  # the last IOU's amount
    closing_at: int | None  # POSIX ms from which the renter may drain

    @property
    def left(self) -> int:
        return max(self.deposit - self.signed, 0)

    def as_json(self) -> dict[str, Any]:
        record = self.record
        return {
            "channel_id": record.channel_id, "state": self.state, "utxo": self.utxo,
            "provider_id": record.provider_id, "provider_address": record.provider_address,
            "close_period_ms": record.close_period_ms, "created_ms": record.created_ms,
            "lovelace": self.lovelace, "deposit": self.deposit, "claimed": self.claimed,
            "signed": self.signed, "left": self.left, "closing_at": self.closing_at,
            "open_tx_id": record.open_tx_id, "closed_tx_id": record.closed_tx_id,
        }  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Closed:
    """What `Channels.close` did: started the close (`closing_at`) or drained the rest back."""

    channel_id: str
    how: str  # "closing" or "drained"
    tx_id: str
    fee: int
    closing_at: int | None = None
    returned: int = 0  # lovelace back to the renter (a drain)


@dataclasses.dataclass
class Channels:
    """The renter's channels: its key, the chain, the deployment and its records."""

    key: ConsumerKey
    context: ChainContext
    ogmios_url: str
    deployment: Deployment
    store: ChannelStore

    @property
    def renter_vkey(self) -> bytes:
        return self.key.vkey

    def signer(self, channel_id: str) -> IouSigner:
        """The IOU signer of the channel `channel_id` names (id or unique prefix)."""
        record = self.store.get(channel_id)
        return IouSigner(self.key, self.deployment.network_id, self.deployment.channel_hash,
                         record, self.store)  # fmt: skip

    async def open(
        self, provider: ProviderOffer, deposit: int, close_period_ms: int
    ) -> tuple[ChannelRecord, Transaction]:
        """Lock `deposit` lovelace (all of it claimable: the output's own minimum is added) for
        `provider`, closable after `close_period_ms`. The record is kept before the open is
        submitted, so a crash while it is in flight loses nothing."""
        prepared = await self.prepare_open(provider, deposit, close_period_ms)
        signed = self.key.sign(prepared.tx)  # a key kept in a wallet is refused before
        record = ChannelRecord(**prepared.facts["record"])
        self.store.save(record)
        try:
            await submit_confirmed(self.ogmios_url, signed)
        except OgmiosError:  # the ledger refused it: no such channel
            self.store.forget(record.channel_id)
            raise
        return self.finish(prepared.kind, prepared.facts, signed)

    async def prepare_open(
        self, provider: ProviderOffer, deposit: int, close_period_ms: int
    ) -> Prepared:
        """The open, unsigned; its facts hold the record the renter keeps once it is in."""
        if deposit <= 0 or close_period_ms <= 0:
            raise ConsumerError("a channel's deposit and close period must be positive",
                                deposit=deposit, close_period_ms=close_period_ms)  # fmt: skip
        tx, terms = await self.built(
            channels.open_channel, self.key.address, self.renter_vkey, provider.address,
            provider.vkey, deposit, close_period_ms, spends=deposit,
        )  # fmt: skip
        record = ChannelRecord(
            channel_id=channels.channel_id(terms).hex(), terms_cbor=terms.to_cbor_hex(),
            provider_id=provider.provider_id, provider_address=str(provider.address),
            funded=deposit, close_period_ms=close_period_ms,
            created_ms=time.time_ns() // 1_000_000, open_tx_id=tx.id.payload.hex(),
        )  # fmt: skip
        return Prepared("channel-open", tx, {"record": dataclasses.asdict(record)})

    async def top_up(self, channel_id: str, lovelace: int) -> tuple[ChannelRecord, Transaction]:
        """Add `lovelace` to the channel: the provider may claim that much more."""
        return await self.run(await self.prepare_top_up(channel_id, lovelace))

    async def prepare_top_up(self, channel_id: str, lovelace: int) -> Prepared:
        if lovelace <= 0:
            raise ConsumerError("a top-up must be positive", lovelace=lovelace)
        record = self.store.get(channel_id)
        channel = await asyncio.to_thread(self.live, record)
        if channel.datum.closing_at >= 0:
            raise NothingToDo(f"channel {record.channel_id} is closing: a top-up would only "
                              "come back at the drain")  # fmt: skip
        tx = await self.built(channels.top_up, channel, record.terms, lovelace, self.key.address,
                              spends=lovelace)  # fmt: skip
        return Prepared("channel-top-up", tx,
                        {"channel_id": record.channel_id, "lovelace": lovelace})  # fmt: skip

    async def close(self, channel_id: str) -> Closed:
        """The close's next step: start it (the provider has the close period to claim its
        last IOU), or once that passed in chain time, drain the rest back to the renter."""
        return await self.run(await self.prepare_close(channel_id))

    async def prepare_close(self, channel_id: str) -> Prepared:
        """The close's next step, unsigned: `channel-close` or, once the close period passed
        in chain time, `channel-drain` (NotDrainableYet says when before)."""
        record = self.store.get(channel_id)
        channel = await asyncio.to_thread(self.live, record)
        closing_at = channel.datum.closing_at
        facts: dict[str, Any] = {"channel_id": record.channel_id}
        if closing_at < 0:
            tx = await self.built(channels.start_close, channel, record.terms, self.key.address)
            return Prepared("channel-close", tx, facts)
        wait = Wait.after(await asyncio.to_thread(Clock.now, self.context), closing_at)
        if wait is not None:
            raise NotDrainableYet(
                f"channel {record.channel_id} is closing: its provider may claim until "
                f"{wait}. Run `unchained channel close {record.channel_id}` then to take the "
                "rest.", drainable_at_ms=wait.at_ms, chain_now_ms=wait.chain_now_ms,
                local_eta_ms=wait.local_ms,
            )  # fmt: skip
        tx = await self.built(channels.drain, channel, record.terms, self.key.address)
        return Prepared(
            "channel-drain", tx, {**facts, "closing_at": closing_at, "returned": channel.lovelace}
        )

    async def run(self, prepared: Prepared) -> Any:
        """`prepared` signed with the renter's key, submitted, and finished (`finish`)."""
        signed = await sign_here(self.key, self.ogmios_url, prepared)
        return self.finish(prepared.kind, prepared.facts, signed)

    def finish(self, kind: str, facts: dict[str, Any], signed: Transaction) -> Any:
        """What follows a channel transaction's block, as the renter records it: the open's
        record kept, a top-up counted; a close told, a drain recorded (`Closed`)."""
        tx_id, fee = signed.id.payload.hex(), signed.transaction_body.fee
        if kind == "channel-open":
            record = ChannelRecord(**facts["record"])
            self.store.save(record)
            return record, signed
        record = self.store.get(facts["channel_id"])
        if kind == "channel-top-up":
            record = dataclasses.replace(record, funded=record.funded + facts["lovelace"])
            self.store.save(record)
            return record, signed
        if kind == "channel-close":
            output = channels.CHANNEL_OUTPUT  # its datum as sent, read back as the chain has it
            closed = channels.read_channel(
                self.deployment,
                UTxO(TransactionInput(signed.id, output), signed.transaction_body.outputs[output]),
            )
            return Closed(record.channel_id, "closing", tx_id, fee,
                          closing_at=closed.datum.closing_at)  # fmt: skip
        self.store.save(dataclasses.replace(record, closed_tx_id=tx_id))
        return Closed(record.channel_id, "drained", tx_id, fee, closing_at=facts["closing_at"],
                      returned=facts["returned"])  # fmt: skip

    def status(self, channel_id: str) -> ChannelStatus:
        """The channel `channel_id` names, read from the chain now."""
        record = self.store.get(channel_id)
        return self.status_of(record, self.on_chain(self.address_of(record)))

    def statuses(self) -> list[ChannelStatus]:
        """Every channel recorded here, oldest first, each address read once."""
        records = self.store.all()
        live: dict[str, channels.Channel] = {}
        for address in {str(self.address_of(record)) for record in records}:
            live.update(self.on_chain(Address.from_primitive(address)))
        return [self.status_of(record, live) for record in records]

    # --- the chain ----------------------------------------------------------------------

    def address_of(self, record: ChannelRecord) -> Address:
        """The channel's address: the channel script, staked like its renter."""
        return self.deployment.channel_address(
            from_plutus(record.terms.renter, self.deployment.network))  # fmt: skip

    def on_chain(self, address: Address) -> dict[str, channels.Channel]:
        """The channels at `address`, by id (hex); what is not a channel is passed over."""
        found: dict[str, channels.Channel] = {}
        for utxo in self.context.utxos(address):
            try:
                channel = channels.read_channel(self.deployment, utxo)
            except ValueError:
                continue
            found[channel.id.hex()] = channel
        return found

    def live(self, record: ChannelRecord) -> channels.Channel:
        """The channel's UTxO now; NothingToDo when it is closed (or its open never landed)."""
        channel = self.on_chain(self.address_of(record)).get(record.channel_id)
        if channel is None:
            raise NothingToDo(
                f"channel {record.channel_id} is not on chain: it was closed (drained, ended by "
                f"its provider or closed by both), or its open {record.open_tx_id} never landed",
                channel=record.channel_id,
            )  # fmt: skip
        return channel

    def status_of(self, record: ChannelRecord, live: dict[str, channels.Channel]) -> ChannelStatus:
        amount = self.store.signed(record.channel_id)
        channel = live.get(record.channel_id)
        if channel is None:  # gone: drained from here, else its provider (or both) ended it
            gone = "drained" if record.closed_tx_id else "ended"
            return ChannelStatus(record, gone, None, 0, record.funded, None, amount, None)
        datum = channel.datum
        like = TransactionOutput(channel.utxo.output.address, 0, datum=datum)  # a read datum
        closing_at = None if datum.closing_at < 0 else datum.closing_at
        state = "open"
        if closing_at is not None:
            state = "closing" if Wait.after(Clock.now(self.context), closing_at) else "drainable"
        return ChannelStatus(
            record, state, format_out_ref(channel.utxo.input), channel.lovelace,
            datum.claimed + channel.lovelace - channels.return_deposit(self.context, like),
            datum.claimed, amount, closing_at,
        )  # fmt: skip

    async def built(self, build: Callable[..., Any], *args: Any, spends: int = 0) -> Any:
        """`build(context, deployment, *args)` in a thread, once the key's address holds
        `spends` lovelace and the fee (InsufficientFunds says what to send where); a builder's
        own refusal (BuildError: a closing channel, another renter's key) is told as it is."""
        needed = spends + FEE_MARGIN
        held = await asyncio.to_thread(self.balance)
        if held < needed:
            raise InsufficientFunds(
                f"not enough funds: this needs {ada(spends)} plus up to {ada(FEE_MARGIN)} for "
                f"the fee and the output's minimum, {ada(needed)} in all, at {self.key.address};"
                f" it holds {ada(held)}. Send at least {ada(needed - held)} there and try "
                "again.", address=str(self.key.address), needed=needed, held=held,
            )  # fmt: skip
        return await asyncio.to_thread(build, self.context, self.deployment, *args)

    def balance(self) -> int:
        return sum(utxo.output.amount.coin for utxo in self.context.utxos(self.key.address))
