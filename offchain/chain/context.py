"""A pycardano chain context from an Ogmios URL, answering the protocol's extra queries."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol, runtime_checkable
from urllib.parse import urlparse

from ogmios.datatypes import Address as OgmiosAddress
from pycardano import Address, ChainContext, Network, ScriptHash, UTxO
from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext

from offchain.chain import DEFAULT_OGMIOS_URL
from offchain.chain.ogmios import request_sync
from offchain.chain.ogmios_window import reward_balances
from offchain.chain.time import ChainTime, read_chain_time
from offchain.chain.utxo_tracker import UtxoTracker


@runtime_checkable
class ChainQueries(Protocol):
    """The chain reads builders need that pycardano's ChainContext does not declare: builders
    take any ChainContext (what pycardano's TransactionBuilder needs) that also answers these.
    `OgmiosContext` answers them over its own Ogmios; a service may hand builders a context
    that answers from a cache, a test one that answers from a fixture."""

    def chain_time(self) -> ChainTime:
        """The chain's slot <-> POSIX time conversion (its era summaries)."""
        ...

    def utxo_by_tx_id(self, tx_id: str, index: int) -> UTxO | None:
        """The unspent output `tx_id#index`, or None (pycardano's Ogmios contexts have it)."""
        ...

    def script_reward_balance(self, script: ScriptHash) -> int | None:
        """The lovelace in the script's reward account; None when its stake credential is not
        registered (a deployment registers it). A settle withdraws exactly this."""
        ...


def queries(context: ChainContext) -> ChainQueries:
    """`context` as ChainQueries; TypeError naming what is missing for one that is not."""
    if isinstance(context, ChainQueries):
        return context
    raise TypeError(
        f"{type(context).__name__} answers no chain time, UTxO or stake queries: pass a "
        "context that implements offchain.chain.context.ChainQueries "
        "(offchain.chain.context.chain_context makes one over Ogmios)"
    )


class OgmiosContext(OgmiosV6ChainContext):
    """pycardano's Ogmios v6 context, and the queries builders make beyond ChainContext
    (`ChainQueries`) over the same Ogmios, synchronously. The UTxOs of addresses it `track`s
    come from chain-sync (`UtxoTracker`) once it has caught up, not from the node's slowest
    query."""

    tracker: UtxoTracker | None = None

    def track(self, addresses: Iterable[Address]) -> UtxoTracker:
        """Follow the UTxOs at `addresses` from now on (one tracker a context: a new one
        replaces the old); the caller stops it (`untrack`) when its work ends."""
        self.untrack()
        url, network = context_url(self), self.network

        def snapshot(address: Address) -> list[UTxO]:  # a fresh context: this one caches
            return chain_context(url, network).utxos(address)  # a second's answers by tip

        self.tracker = UtxoTracker(url, addresses, snapshot).start()
        return self.tracker

    def untrack(self) -> None:
        if self.tracker is not None:
            self.tracker.stop()
            self.tracker = None

    def utxos(self, address: str | Address) -> list[UTxO]:
        tracker = self.tracker
        found = tracker.utxos(address) if tracker is not None else None
        return found if found is not None else super().utxos(address)

    @property
    def last_block_slot(self) -> int:
        """The tip's slot now. pycardano's is kept for a second, for every context at once, so
        a renter checking a quote's start deadline against it read the chain a second behind
        the market that set it, and refused a good quote."""
        return int(self._query_chain_tip().slot)

    def _utxos(self, address: str) -> list[UTxO]:
        """The node's answer now. pycardano's own keeps answers by the tip it reads at most
        once a second, so a wallet's second transaction within a second of its first landing
        would spend the first's inputs again (two channels opened one after the other were)."""
        return self._utxos_ogmios(OgmiosAddress(address=address))

    def chain_time(self) -> ChainTime:
        return read_chain_time(context_url(self))

    def script_reward_balance(self, script: ScriptHash) -> int | None:
        summaries = request_sync(
            context_url(self),
            "queryLedgerState/rewardAccountSummaries",
            {"scripts": [script.payload.hex()]},
        )
        return reward_balances(summaries).get(script.payload.hex())


def track(context: ChainContext, addresses: Iterable[Address]) -> None:
    """`context` answers the UTxOs at `addresses` from chain-sync (`OgmiosContext.track`);
    any other context (a test's) goes on answering as it does."""
    if isinstance(context, OgmiosContext):
        context.track(addresses)


def untrack(context: ChainContext) -> None:
    if isinstance(context, OgmiosContext):
        context.untrack()


def chain_context(
    url: str = DEFAULT_OGMIOS_URL, network: Network = Network.TESTNET
) -> OgmiosContext:
    """An Ogmios v6 context for `ws://host:port[/path]` (or `wss://`). Its `network` is the
    one addresses are built for: a command passes its network setting's (`ChainNetwork`), after
    `offchain.chain.network.connect` checked the node runs it; the default suits the devnet."""
    parsed = urlparse(url)
    if parsed.scheme not in ("ws", "wss") or not parsed.hostname:
        raise ValueError(f"expected an Ogmios URL like ws://127.0.0.1:1337, got {url!r}")
    secure = parsed.scheme == "wss"
    return OgmiosContext(
        host=parsed.hostname,
        port=parsed.port or (443 if secure else 80),
        path=parsed.path.lstrip("/"),
        secure=secure,
        network=network,
    )


def context_url(context: OgmiosV6ChainContext) -> str:
    """The Ogmios URL a context talks to (for queries pycardano does not make)."""
    scheme = "wss" if context.secure else "ws"
    path = f"/{context.path}" if context.path else ""
    return f"{scheme}://{context.host}:{context.port}{path}"


def quiet_chain_clients() -> None:
    """The Ogmios client logs a schema warning for every UTxO holding a Plutus V3 script, and
    pycardano dumps builder state on errors; the commands say what matters themselves."""
    logging.getLogger("ogmios").setLevel(logging.ERROR)
    logging.getLogger("PyCardano").setLevel(logging.ERROR)
