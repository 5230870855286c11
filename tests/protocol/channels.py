"""Devnet helpers for the channel tests: open a channel, sign its renter's IOUs, read what a
transaction leaves, and hand-made channel transactions for the attacks and their honest
twins (built by `onchain.handmade`: nothing evaluated, so a script's refusal reaches the
ledger and its trace the test)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from pycardano import Address, PlutusData, Transaction, TransactionOutput

from devnet.genesis import ADA
from devnet.process import DevnetProcess
from offchain.protocol.ledger.iou import SignedIou
from offchain.protocol.ledger.payloads import iou_payload, sign
from offchain.protocol.ledger.types import BatchClaim, ChannelClaim, ChannelTerms
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.channel import Channel, read_channel
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import TTL_MS, Clock, Wallet, ledger_key
from tests.protocol.onchain import Spend, confirm, handmade, output, plain_fee

DEPOSIT = 20 * ADA
CLOSE_MS = 20_000  # the close period: the provider's time to make its last claim


async def open_on(
    devnet: DevnetProcess,
    deployment: Deployment,
    renter: Wallet,
    provider: Wallet,
    deposit: int = DEPOSIT,
    close_period_ms: int = CLOSE_MS,
) -> tuple[Channel, ChannelTerms, Transaction]:
    """A channel `renter` opens for `provider` (its IOUs signed by the renter's own key),
    confirmed; and its terms and open transaction."""
    tx, terms = channels.open_channel(
        devnet.context(), deployment, renter.address, renter.vkey, provider.address,
        provider.vkey, deposit, close_period_ms,
    )  # fmt: skip
    await confirm(devnet, renter.sign(tx))
    return left(deployment, tx), terms, tx


def left(deployment: Deployment, tx: Transaction, index: int = channels.CHANNEL_OUTPUT) -> Channel:
    """The channel `tx` leaves at output `index`."""
    return read_channel(deployment, output(tx, index))


def iou(
    deployment: Deployment, renter: Wallet, on: Channel, lovelace: int, **signed: object
) -> SignedIou:
    """The renter's IOU for `lovelace` in all on channel `on`; `signed` overrides what the
    signature covers (iou_payload's argument names), the IOU still naming `on` and `lovelace`."""
    fields: dict = dict(
        network_id=deployment.network_id, channel_hash=deployment.channel_hash,
        channel=on.id, amount=lovelace,
    )  # fmt: skip
    return SignedIou(on.id, lovelace, sign(renter.key, iou_payload(**{**fields, **signed})))


def upper_bound(devnet: DevnetProcess, channels_in: Sequence[Channel]) -> int:
    """The ttl the claim builder picks: the earliest close of a closing channel, else TTL_MS
    from the tip."""
    clock = Clock.now(devnet.context())
    closes = [c.datum.closing_at for c in channels_in if c.closing]
    return clock.ttl_until(min(closes, default=clock.tip_ms + TTL_MS))


@dataclasses.dataclass
class ClaimPlan:
    """An honest batch claim, made by hand: its channels (ledger order), the BatchClaim's
    payees and signatures, the outputs (provider totals, then each channel's continuing
    output from `first_continuing`), and what each provider address gains."""

    channels: list[Channel]
    payees: list[int]
    signatures: list[bytes]
    outputs: list[TransactionOutput]
    first_continuing: int
    gains: dict[str, int]  # by address (bech32)

    def claim(
        self, devnet: DevnetProcess, deployment: Deployment, payer: Wallet, **extra
    ) -> Transaction:
        """The claim as planned; `extra` goes to `handmade` (more spends go after these)."""
        batch = BatchClaim(self.payees, self.signatures, self.first_continuing)
        spends = [Spend(c.utxo, deployment.channel_ref, ChannelClaim()) for c in self.channels]
        extra.setdefault("ttl", upper_bound(devnet, self.channels))
        return handmade(
            devnet, payer, plain_fee(devnet, payer),
            spends=[*spends, *extra.pop("spends", ())], outputs=self.outputs,
            withdraw=(deployment.claim_ref, deployment.claim_reward_address, batch), **extra,
        )  # fmt: skip

    def at(self, channel: Channel) -> int:
        """`channel`'s place in the batch."""
        return [c.utxo.input for c in self.channels].index(channel.utxo.input)

    def continuing(self, channel: Channel) -> int:
        """The index of `channel`'s continuing output."""
        return self.first_continuing + self.at(channel)

    def reoutput(self, index: int, changed: TransactionOutput) -> ClaimPlan:
        outputs = list(self.outputs)
        outputs[index] = changed
        return dataclasses.replace(self, outputs=outputs)

    def changed(
        self, channel: Channel, payee: int | None = None, signature: bytes | None = None
    ) -> ClaimPlan:
        """This plan with `channel`'s payee or signature changed where given."""
        payees, signatures = list(self.payees), list(self.signatures)
        at = self.at(channel)
        payees[at] = payees[at] if payee is None else payee
        signatures[at] = signatures[at] if signature is None else signature
        return dataclasses.replace(self, payees=payees, signatures=signatures)


def claim_plan(claims: Sequence[tuple[Channel, Wallet, SignedIou]]) -> ClaimPlan:
    """The honest claim of each channel's IOU (beside its provider's wallet): one output per
    provider address (in order of first appearance in ledger order) holding what its channels
    take, then each channel going on with the rest and `claimed` raised to the IOU's amount."""
    ordered = sorted(claims, key=lambda claim: ledger_key(claim[0].utxo))
    totals: dict[str, int] = {}
    continuing = []
    for channel, provider, signed in ordered:
        take = signed.amount - channel.datum.claimed
        totals[str(provider.address)] = totals.get(str(provider.address), 0) + take
        datum = dataclasses.replace(channel.datum, claimed=signed.amount)
        address = channel.utxo.output.address
        continuing.append(TransactionOutput(address, channel.lovelace - take, datum=datum))
    providers = list(totals)
    outputs = [TransactionOutput(Address.from_primitive(p), totals[p]) for p in providers]
    return ClaimPlan(
        [c for c, _, _ in ordered],
        [providers.index(str(p.address)) for _, p, _ in ordered],
        [s.signature for _, _, s in ordered],
        [*outputs, *continuing],
        len(outputs),
        totals,
    )


def by_hand(
    devnet: DevnetProcess,
    deployment: Deployment,
    payer: Wallet,
    channel: Channel,
    redeemer: PlutusData | Callable[[int], PlutusData],
    outputs: Sequence[TransactionOutput] = (),
    **extra,
) -> Transaction:
    """Spend `channel` with `redeemer` (or what a callable makes of its input index) into
    `outputs`; `extra` goes to `handmade`."""
    spends = [Spend(channel.utxo, deployment.channel_ref, redeemer), *extra.pop("spends", ())]
    return handmade(
        devnet, payer, plain_fee(devnet, payer), spends=spends, outputs=outputs, **extra
    )
