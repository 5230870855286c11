"""The UTxOs at a few addresses, kept from chain-sync instead of asked for.

UTxO-by-address is the node's slowest query (seconds on mainnet), and the market's batcher and
a provider's daemon asked it every few seconds for their wallets and the bond address every
provider shares (anyone can fill it). A tracker asks once, once its chain-sync holds the tip
(`follow_from_tip`: a fork cannot orphan a tip read earlier), then applies each block that
follows: spent inputs leave, outputs to a watched address come
in (a transaction whose scripts failed spends its collateral and pays its collateral return).
Replaying blocks the snapshot already holds changes nothing once the tracker reaches the tip,
so it answers only from then on (`utxos` is None before: callers ask the node). A rollback,
or a lost connection, starts it over from a new snapshot: forks are rare, and an answer a
fork made wrong would cost a refused transaction, never money.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from pycardano import Address, Transaction, TransactionId, TransactionInput, UTxO

from offchain.chain.follower import RollBackward, follow_from_tip
from offchain.chain.utxo import spent_by

log = logging.getLogger("unchained.chain")
RETRY_S = 2.0

Query = Callable[[Address], list[UTxO]]  # the node's own answer: the snapshot


class UtxoTracker:
    """The UTxOs at `addresses`, followed on the chain at `url` by a thread of its own."""

    def __init__(self, url: str, addresses: Iterable[Address], query: Query) -> None:
        self.url = url
        self.watched = {str(address): address for address in addresses}
        self.query = query
        self._lock = threading.Lock()
        self._utxos: dict[str, dict[TransactionInput, UTxO]] = {}
        self._ready = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="utxo-tracker", daemon=True)

    def start(self) -> UtxoTracker:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following (at the next block, or within `RETRY_S` of a quiet chain)."""
        self._stop.set()

    def utxos(self, address: Address | str) -> list[UTxO] | None:
        """The UTxOs at a watched `address` as of the newest block applied; None while the
        tracker has not reached the tip, or for an address it does not watch."""
        with self._lock:
            if not self._ready or str(address) not in self.watched:
                return None
            return list(self._utxos[str(address)].values())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                asyncio.run(self._follow())
            except Exception as exc:  # a dropped socket, a node restarting: start over
                log.warning("UTxO tracker: %r; starting over in %.0f s", exc, RETRY_S)
            with self._lock:
                self._ready = False
            self._stop.wait(RETRY_S)

    async def _follow(self) -> None:
        """Snapshot at a tip the follower holds, then apply blocks until a rollback (or
        `stop`) ends this pass."""
        first = True
        async with contextlib.aclosing(follow_from_tip(self.url)) as events:
            async for event in events:
                if self._stop.is_set():
                    return
                if isinstance(event, RollBackward):
                    if not first:
                        log.info("UTxO tracker: rolled back to %s; a new snapshot", event.point)
                        return
                    first = False
                    await self._snapshot()  # at or after the point the follower starts from
                    caught_up = _slot(event.tip) == _slot(event.point)  # no block since
                else:
                    self._apply(event.block)
                    caught_up = event.block["height"] >= event.tip.get("height", 0)
                if caught_up:
                    with self._lock:
                        self._ready = True

    async def _snapshot(self) -> None:
        snapshot = {
            name: {utxo.input: utxo for utxo in await asyncio.to_thread(self.query, address)}
            for name, address in self.watched.items()
        }
        with self._lock:
            self._utxos = snapshot

    def _apply(self, block: dict[str, Any]) -> None:
        """Each transaction's spends, and its outputs to watched addresses. Only a transaction
        that pays one (its JSON outputs say so) or spent one of ours (a failed script's
        collateral return comes back to its payer) has its CBOR decoded: a mainnet block
        holds hundreds of others."""
        with self._lock:
            for tx in block.get("transactions", []):
                ours = False
                for ref in spent_by(tx):
                    for utxos in self._utxos.values():
                        ours = utxos.pop(ref, None) is not None or ours
                paid = any(out.get("address") in self.watched for out in tx.get("outputs", []))
                for utxo in _made(tx) if ours or paid else ():
                    held = self._utxos.get(str(utxo.output.address))
                    if held is not None:
                        held[utxo.input] = utxo


def _made(tx: dict[str, Any]) -> list[UTxO]:
    """The outputs an Ogmios transaction (with its CBOR) made: its outputs, or only its
    collateral return when its scripts failed (at the index after its outputs)."""
    body = Transaction.from_cbor(bytes.fromhex(tx["cbor"])).transaction_body
    made = list(enumerate(body.outputs))
    if tx.get("spends") == "collaterals":
        made = [(len(body.outputs), body.collateral_return)] if body.collateral_return else []
    tx_id = TransactionId(body.hash())
    return [UTxO(TransactionInput(tx_id, index), output) for index, output in made]


def _slot(point: Any) -> int | None:
    return point.get("slot") if isinstance(point, dict) else None
