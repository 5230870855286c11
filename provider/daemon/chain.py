"""The daemon's chain: one pycardano context used from worker threads one call at a time
(its clients are not made for concurrent use), chain time from the tip, never the wall clock,
and blocking work off the event loop. An unreachable chain (`CHAIN_DOWN`: the socket refused
or dropped, what Ogmios' clients raise then) is transient: callers retry, never give up a job."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pycardano import Address, Transaction, TransactionInput, UTxO
from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext
from websockets.exceptions import WebSocketException

from offchain.chain.context import track
from offchain.chain.submit import submit_confirmed_block
from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.core.errors import UnchainedError
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Clock, Wallet
from provider.config import ProviderSettings
from provider.daemon.resume import Block, tip_block
from provider.keys import load_key, payout_address
from provider.money.own_transactions import Kind, OwnTransactions

T = TypeVar("T")
log = logging.getLogger("unchained.provider")
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 10.0
# what the chain's clients raise while the devnet or Ogmios is down or restarting (a refused or
# dropped socket, a handshake to a server not ready yet; TimeoutError is an OSError)
CHAIN_DOWN: tuple[type[BaseException], ...] = (OSError, WebSocketException)


class ChainUnavailable(UnchainedError):
    """The chain could not be reached for as long as the caller could wait."""


@dataclasses.dataclass
class Chain:
    url: str
    context: OgmiosV6ChainContext
    deployment: Deployment
    wallet: Wallet
    own: OwnTransactions | None = None  # where its submissions are recorded (the daemon's)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    seen: tuple[int, float] = (0, 0.0)  # the last tip's ms and the monotonic time it was read
    # the inputs (collateral too) of its transactions submitted and not yet in a block, by id
    pending: dict[str, frozenset[TransactionInput]] = dataclasses.field(default_factory=dict)
    payout_to: Address | None = None  # where it is paid and who owns its bond; None: the wallet

    @property
    def payout(self) -> Address:
        """The provider's payout address: its offers', its settlements', its channels', and
        its bond's owner. The wallet (the hot key) only signs and pays fees."""
        return self.payout_to or self.wallet.address

    @classmethod
    def of(
        cls,
        url: str,
        context: OgmiosV6ChainContext,
        deployment: Deployment,
        config: ProviderSettings,
    ) -> Chain:
        """The provider's chain: its key's wallet on the deployment's network, paid at the
        configured payout address (ConfigError: another network's)."""
        key = load_key(config.runner.state_dir)
        own = OwnTransactions.in_state_dir(config.runner.state_dir)
        payout = payout_address(config.daemon.payout_address, key, deployment.network)
        wallet = Wallet.of(key, deployment.network)
        return cls(url, context, deployment, wallet, own, payout_to=payout)

    async def submit(self, tx: Transaction, kind: Kind, allowances: int = 0) -> Block:
        """Submit the wallet's `tx`, wait for its block ({slot, id, height}), and record it.
        Until then its inputs are `busy`: the daemon's next transaction (a claim beside a
        settle) pays its fee from other UTxOs, not from one the ledger would see spent twice."""
        tx_id = str(tx.id)
        body = tx.transaction_body
        self.pending[tx_id] = frozenset([*body.inputs, *(body.collateral or [])])
        try:
            block = await submit_confirmed_block(self.url, tx)
        finally:
            del self.pending[tx_id]
        if self.own is not None:
            self.own.record(tx, kind, allowances)
        return block

    def track(self) -> None:
        """Its wallet's and its bond address's UTxOs from chain-sync from now on, not from the
        node's slowest query at every heartbeat and payout (`UtxoTracker`)."""
        track(self.context, [self.wallet.address, self.deployment.bond_address(self.payout)])

    def busy(self) -> frozenset[TransactionInput]:
        """The UTxOs its transactions in flight spend: none of them pays another's fee."""
        return frozenset().union(*self.pending.values())

    async def call(self, work: Callable[..., T], *args: object) -> T:
        """`work(*args)` on a worker thread, holding the context alone."""

        def locked() -> T:
            with self.lock:
                return work(*args)

        return await asyncio.to_thread(locked)

    async def call_until(self, until_ms: int, work: Callable[..., T], *args: object) -> T:
        """`call`, retried with backoff while the chain is unreachable; ChainUnavailable once
        the chain's (estimated) time reaches `until_ms`."""
        pause = FIRST_PAUSE_S
        while True:
            try:
                return await self.call(work, *args)
            except CHAIN_DOWN as exc:
                if self.estimated_now_ms() >= until_ms:
                    raise ChainUnavailable(f"the chain is unreachable: {exc!r}") from exc
                log.warning("the chain is unreachable (%r); trying again in %.1f s", exc, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_S)

    def now_ms(self) -> int:
        """The chain's now: the tip's POSIX ms (call through `call`)."""
        tip_ms = Clock.now(self.context).tip_ms
        self.seen = (tip_ms, time.monotonic())
        return tip_ms

    def estimated_now_ms(self) -> int:
        """The chain's now while it cannot be read: the last tip seen plus the time since.
        Only for deciding how long to wait for the chain, never for what is signed."""
        tip_ms, at = self.seen
        return tip_ms + int((time.monotonic() - at) * 1000)

    def tip_point(self) -> Block:
        """The tip as a chain-sync point with its height ({slot, id, height}): where a later
        search may start (`resume.py`)."""
        return tip_block(self.url)

    def utxo(self, ref: str) -> UTxO | None:
        """The unspent output at TXID#IX, None once spent (call through `call`)."""
        return utxo_at(self.context, parse_out_ref(ref))


def in_daemon_thread(work: Callable[..., T], *args: object) -> asyncio.Future[T]:
    """`work(*args)` on a daemon thread: a job's runner must not hold the process at exit
    (a job left running is recovered by the next start, never torn down)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def target() -> None:
        try:
            value = work(*args)
        except BaseException as exc:  # handed to the awaiting task, whatever it is
            error = exc
            loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            loop.call_soon_threadsafe(settle, lambda: future.set_result(value))

    threading.Thread(target=target, name="job", daemon=True).start()
    return future
