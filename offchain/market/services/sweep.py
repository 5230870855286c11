"""The settlement wallet's sweep: the fee allowances it takes back pile up in a hot wallet whose
key sits on the market's host, so above `sweep_above_lovelace` the leader sends all but
`sweep_keep_lovelace` to `sweep_to`, a cold address whose key is elsewhere.

A sweep spends the wallet's UTxOs that no settle transaction in flight spends, pays the cold
address exactly the surplus and keeps `keep - fee` as change, in one transaction. Until its
inputs have left the wallet (it landed) they count as busy, so no settle is built on them; a
sweep lost or rolled back is made again from what the wallet then holds once its ttl has
passed at the chain's tip (the evidence that it can no longer land)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection

from pycardano import Address, TransactionBuilder, TransactionInput, TransactionOutput

from offchain.chain.ogmios import OgmiosError
from offchain.chain.submit import UNREACHABLE, submit_sync
from offchain.market.errors import MarketRefusal
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings
from offchain.protocol.tx.txbuild import TTL_MS, BuildError, Clock, Wallet, add_inputs, build

log = logging.getLogger("unchained.market")


@dataclasses.dataclass(frozen=True)
class SweepRule:
    to: Address
    above: int  # lovelace: the wallet's free balance past which it sweeps
    keep: int  # lovelace left in it (the next fees), less the sweep's own fee


@dataclasses.dataclass
class Sweeper:
    chain: Chain
    url: str  # Ogmios, where it submits
    wallet: Wallet
    rule: SweepRule
    pending: frozenset[TransactionInput] = frozenset()  # the last sweep's inputs, until spent
    pending_ttl: int = 0  # its ttl slot: past it at the tip, it can no longer land

    def busy(self) -> frozenset[TransactionInput]:
        """The inputs of a sweep that has not landed yet: empty once they left the wallet, or
        once its ttl passed at the chain's tip without it (lost or rolled back: made again)."""
        if self.pending:
            held = {u.input for u in self.chain.context.utxos(self.wallet.address)}
            self.pending = self.pending & held
            if self.pending and Clock.now(self.chain.context).tip_slot >= self.pending_ttl:
                log.warning("the sweep of %s was not seen before its ttl: made again",
                            self.wallet.address)  # fmt: skip
                self.pending = frozenset()
        return self.pending

    def sweep(self, busy: Collection[TransactionInput]) -> str | None:
        """Send the surplus above `keep` to the cold address if the free balance (what `busy`,
        the settles in flight, leaves) is above `above`; the transaction's id, or None when
        there is nothing to sweep or it failed (logged: the next round tries again)."""
        try:
            return self._sweep(busy)
        except (BuildError, OgmiosError, *UNREACHABLE) as exc:
            log.warning("cannot sweep the settlement wallet to %s: %s", self.rule.to, exc)
            return None

    def _sweep(self, busy: Collection[TransactionInput]) -> str | None:
        if self.busy():
            return None  # the last one has not landed: its inputs are not free yet
        free = [
            u for u in self.chain.context.utxos(self.wallet.address)
            if u.input not in busy and not u.output.amount.multi_asset
        ]  # fmt: skip
        balance = sum(u.output.amount.coin for u in free)
        if balance <= self.rule.above:
            return None
        builder = TransactionBuilder(self.chain.context)
        clock = Clock.now(self.chain.context)
        builder.ttl = clock.ttl_until(clock.tip_ms + TTL_MS)
        add_inputs(builder, free)
        builder.add_output(TransactionOutput(self.rule.to, balance - self.rule.keep))
        tx = self.wallet.sign(build(builder, self.wallet.address))
        tx_id = submit_sync(self.url, tx)
        self.pending, self.pending_ttl = frozenset(u.input for u in free), builder.ttl
        log.info("swept %d lovelace of the settlement wallet to %s: tx %s fee %d",
                 balance - self.rule.keep, self.rule.to, tx_id,
                 tx.transaction_body.fee)  # fmt: skip
        return tx_id


def sweeper_of(settings: MarketSettings, chain: Chain, wallet: Wallet) -> Sweeper | None:
    """The settings' sweep (None without `sweep_to`); MarketRefusal for an address that is
    not one of the deployment's network."""
    if settings.sweep_to is None:
        return None
    try:
        to = Address.from_primitive(settings.sweep_to)
    except Exception as exc:  # pycardano raises several kinds for a bad address
        raise MarketRefusal(f"sweep_to {settings.sweep_to!r}: not an address ({exc})") from exc
    if to.network != chain.deployment.network:
        raise MarketRefusal(f"sweep_to {settings.sweep_to}: not on the deployment's network "
                            f"({chain.deployment.network.name.lower()})")  # fmt: skip
    rule = SweepRule(to, settings.sweep_above_lovelace, settings.sweep_keep_lovelace)
    return Sweeper(chain, settings.ogmios_url, wallet, rule)
