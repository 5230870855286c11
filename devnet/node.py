"""The devnet node: slot clock, mempool, block production, rollbacks and persistence.

One `Devnet` owns the ledger. Submissions are checked (phase 1, then scripts off the event
loop) against the confirmed state plus the mempool, and wait in the mempool for the next
block, which lands on a new slot: at once (profile `instant`) or in the next slot Praos gives
a leader, with forks now and then (profile `realistic`, `devnet.praos`). Everything here runs
on one asyncio loop; only script evaluation leaves it (a process pool in `phase2.ScriptRunner`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import Mapping
from pathlib import Path

from pycardano import TransactionInput, TransactionOutput

from devnet import faucet, phase2, rules, scripts
from devnet.errors import INVALID_PARAMS, LedgerError
from devnet.genesis import Genesis, create_genesis
from devnet.ledger import BlockUndo, LedgerState, PendingState, UtxoOverlay
from devnet.ogmios_json import output_reference_json
from devnet.params import ProtocolParameters
from devnet.praos import Praos
from devnet.store import ChainStore, StoredBlock
from devnet.txdecode import DecodedTx, decode_tx
from devnet.view import LedgerView

log = logging.getLogger(__name__)

EMPTY_BLOCK_EVERY_SLOTS = 20
OVERLAPPING_ADDITIONAL_UTXO = 3002
# Praos: after a stall (a busy machine, a suspended process) only the latest slots are
# checked for leadership, so the devnet does not forge a burst of blocks to catch up.
PRAOS_CATCH_UP_SLOTS = 100


@dataclasses.dataclass
class Block:
    stored: StoredBlock
    txs: list[DecodedTx]
    undo: BlockUndo

    @property
    def height(self) -> int:
        return self.stored.height

    @property
    def slot(self) -> int:
        return self.stored.slot

    @property
    def id(self) -> bytes:
        return self.stored.id


@dataclasses.dataclass(frozen=True)
class Rollback:
    generation: int
    height: int  # the height of the block that became the tip (0 = origin)


class Devnet:
    def __init__(
        self,
        data_dir: Path,
        *,
        slot_length_ms: int = 1000,
        params: ProtocolParameters | None = None,
        reset: bool = False,
        script_workers: int | None = None,
        praos: Praos | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.params = params or ProtocolParameters()
        self.praos = praos  # None: instant blocks, no forks
        self._fork_depth = 0  # blocks the next leader's chain takes back (realistic profile)
        self.store = ChainStore(data_dir / "chain.sqlite")
        if reset:
            self.store.wipe()
        genesis = self.store.genesis()
        if genesis is None:
            genesis = create_genesis(data_dir, slot_length_ms)
            self.store.set_genesis(genesis)
        self.genesis: Genesis = genesis
        self.slots = genesis.slots
        self.runner = phase2.ScriptRunner(self.params.cost_models, script_workers)
        self.changed = asyncio.Condition()
        self.rollbacks: list[Rollback] = []
        self.generation = 0
        self.tip_changed_ns = time.time_ns()  # when this process last saw the tip move
        self._commit_lock = asyncio.Lock()
        self._pending_slot: int | None = None
        self._replay()

    # --- start-up ----------------------------------------------------------------------

    def _replay(self) -> None:
        """Rebuild the ledger from genesis by re-applying every stored block."""
        self.state = LedgerState(self.genesis.initial_utxo())
        self.blocks: list[Block] = []
        for stored in self.store.blocks():
            txs = [decode_tx(cbor) for cbor in stored.txs]
            self.blocks.append(Block(stored, txs, self.state.apply_block(txs)))
        self.pending = PendingState(self.state)
        self.clock_offset_slots = int(self.store.get_meta("clock_offset_slots") or 0)
        self.max_slot_ever = int(self.store.get_meta("max_slot_ever") or 0)
        if not self.blocks:
            self._produce(max(self.genesis.first_slot, self.current_slot()), [])

    # --- time --------------------------------------------------------------------------

    def current_slot(self) -> int:
        """The slot the wall clock (plus any devnet time travel) is in now."""
        now_ms = int(time.time() * 1000)
        return self.slots.posix_ms_to_slot(now_ms) + self.clock_offset_slots

    def next_block_slot(self) -> int:
        """The slot of the block the mempool's transactions will go into. Under Praos the
        leader is not known ahead: transactions are checked for the next slot, as a node's
        mempool checks them for the current one, and again for the slot of their block."""
        if self._pending_slot is not None and self.praos is None:
            return self._pending_slot
        return max(self.current_slot() + 1, self.max_slot_ever + 1)

    @property
    def tip(self) -> Block:
        return self.blocks[-1]

    @property
    def epoch(self) -> int:
        return self.tip.slot // self.genesis.epoch_length

    # --- views ---------------------------------------------------------------------------

    def view(
        self,
        extra_utxo: Mapping[TransactionInput, TransactionOutput] | None = None,
        slot: int | None = None,
    ) -> LedgerView:
        utxo: Mapping[TransactionInput, TransactionOutput] = self.pending.utxo
        if extra_utxo:
            overlay = UtxoOverlay(self.pending.utxo)
            overlay.added.update(extra_utxo)
            utxo = overlay
        return LedgerView(
            utxo=utxo,
            params=self.params,
            slot=self.next_block_slot() if slot is None else slot,
            slots=self.slots,
            reward_accounts=self.pending.reward_accounts,
        )

    # --- transactions ----------------------------------------------------------------------

    async def submit(self, cbor: bytes) -> DecodedTx:
        """Check a transaction fully and put it in the mempool, or raise LedgerError."""
        dtx = decode_tx(cbor)  # a resubmission finds its own inputs spent in the mempool: 3117
        vkey_hashes = rules.verified_vkey_hashes(dtx)
        view = self.view()
        rules.check_phase1(dtx, view, vkey_hashes=vkey_hashes)
        jobs = scripts.check_scripts(dtx, view, vkey_hashes=vkey_hashes)
        if jobs:
            phase2.require_success(await self.runner.run(jobs))
        async with self._commit_lock:
            # Scripts ran off the loop: inputs may have been spent meanwhile, so check again.
            view = self.view()
            rules.check_phase1(dtx, view, vkey_hashes=vkey_hashes)
            if self._pending_slot is None:
                self._pending_slot = view.slot
            self.pending.add(dtx)
        await self._notify()
        return dtx

    async def evaluate(
        self, cbor: bytes, extra_utxo: Mapping[TransactionInput, TransactionOutput]
    ) -> list[dict]:
        """Per-redeemer budgets, without checking signatures (clients send fake witnesses).

        Like Ogmios, additional UTxO may not restate the ledger's own (3002): a client that
        does so would meet a different answer on a real node. Outputs still in the mempool
        are not in the ledger yet, so chained transactions may pass them.
        """
        overlapping = [ref for ref in extra_utxo if ref in self.state.utxo]
        if overlapping:
            raise LedgerError(
                OVERLAPPING_ADDITIONAL_UTXO,
                "Some output references given as additional UTxO exist in the ledger already.",
                {"overlappingOutputReferences": [output_reference_json(r) for r in overlapping]},
            )
        dtx = decode_tx(cbor)
        jobs = scripts.evaluation_jobs(dtx, self.view(extra_utxo))
        return phase2.evaluation_result(await self.runner.run(jobs))

    # --- blocks ----------------------------------------------------------------------------

    def _produce(self, slot: int, txs: list[DecodedTx], issuer: bytes = b"") -> Block:
        """Append a block; `issuer` tells apart blocks a fork puts in the same slot."""
        ancestor = self.blocks[-1].id if self.blocks else None
        height = len(self.blocks) + 1
        header = b"".join(
            [ancestor or b"", slot.to_bytes(8, "big"), height.to_bytes(8, "big"), issuer]
        )
        block_id = hashlib.blake2b(header + b"".join(tx.id for tx in txs), digest_size=32).digest()
        stored = StoredBlock(height, slot, block_id, ancestor, [tx.cbor for tx in txs])
        block = Block(stored, txs, self.state.apply_block(txs))
        self.store.append(stored)
        self.blocks.append(block)
        self.max_slot_ever = max(self.max_slot_ever, slot)
        self.store.set_meta("max_slot_ever", str(self.max_slot_ever))
        self.tip_changed_ns = time.time_ns()
        return block

    def _take_block_txs(self) -> list[DecodedTx]:
        """The mempool's longest prefix that fits the block's size and ex-unit limits."""
        size = memory = steps = 0
        taken: list[DecodedTx] = []
        for dtx in self.pending.txs:
            tx_memory, tx_steps = dtx.declared_ex_units
            if (
                size + dtx.size > self.params.max_block_body_size
                or memory + tx_memory > self.params.max_block_memory
                or steps + tx_steps > self.params.max_block_steps
            ):
                break
            taken.append(dtx)
            size, memory, steps = size + dtx.size, memory + tx_memory, steps + tx_steps
        return taken

    async def produce_block(self, slot: int | None = None) -> Block:
        """Forge the next block with what fits from the mempool; the rest waits."""
        async with self._commit_lock:
            block = self._forge(max(slot or self.next_block_slot(), self.max_slot_ever + 1))
        await self._notify()
        return block

    def _forge(self, slot: int, issuer: bytes = b"") -> Block:
        """A block at `slot` with what fits from the mempool and is valid in that slot."""
        if not all(_valid_in(dtx, slot) for dtx in self.pending.txs):
            self._revalidate(list(self.pending.txs), slot)
        taken = self._take_block_txs()
        leftover = self.pending.txs[len(taken) :]
        block = self._produce(slot, taken, issuer)
        self._pending_slot = None
        next_slot = self.next_block_slot()
        if all(_valid_in(dtx, next_slot) for dtx in leftover):
            self.pending.reset()
            for dtx in leftover:
                self.pending.add(dtx)
        else:
            self._revalidate(leftover, next_slot)
        if self.pending.txs:
            self._pending_slot = self.next_block_slot()
        return block

    def _revalidate(self, txs: list[DecodedTx], slot: int) -> None:
        """Make the mempool `txs` again, as a node does when its tip changes: each is checked
        again (phase 1) for `slot` on the new state, and dropped if it fails now (its ttl
        passed, an input is gone, the transaction it spends from was dropped). Its scripts
        need no second run: their result depends only on the transaction and the outputs it
        spends, and an output reference names one output forever."""
        self.pending.reset()
        for dtx in txs:
            try:
                view = self.view(slot=slot)
                rules.check_phase1(dtx, view, vkey_hashes=rules.verified_vkey_hashes(dtx))
            except LedgerError as exc:
                log.info("mempool: %s dropped at slot %d: %s", dtx.id_hex, slot, exc.message)
                continue
            self.pending.add(dtx)

    def _orphan(self, count: int) -> list[Block]:
        """Take the top `count` blocks off the chain (followers roll back); them, oldest first."""
        orphaned = [self.blocks.pop() for _ in range(count)]
        for block in orphaned:
            self.state.undo_block(block.undo)
        self.store.truncate_above(self.tip.height)
        self.tip_changed_ns = time.time_ns()
        self.generation += 1
        self.rollbacks.append(Rollback(self.generation, self.tip.height))
        return orphaned[::-1]

    def _switch_fork(self, depth: int, slot: int) -> Block:
        """Adopt a longer competing chain: the top `depth` blocks are orphaned, another
        leader's block (empty) takes each of their slots and this slot's block follows. The
        orphaned blocks' transactions go back to the mempool, ahead of what waits there, as
        the network's other mempools still hold them: those still valid land in this block
        or a later one, the others are dropped."""
        waiting = list(self.pending.txs)
        orphaned = self._orphan(depth)
        back = [dtx for block in orphaned for dtx in block.txs]
        log.info("fork at slot %d: %d block(s) orphaned, %d transaction(s) back in the mempool",
                 slot, depth, len(back))  # fmt: skip
        self._revalidate(back + waiting, slot)
        issuer = self.generation.to_bytes(8, "big")
        for block in orphaned:  # empty blocks change no state: the mempool stays valid
            self._produce(block.slot, [], issuer)
        return self._forge(slot, issuer)

    async def lead(self, slot: int) -> Block | None:
        """Forge the block of a slot Praos gave us (after a fork, on its competing chain);
        None if the chain is past `slot` already (time travel forged there)."""
        assert self.praos is not None
        async with self._commit_lock:
            if slot <= self.max_slot_ever:
                return None
            depth = min(self._fork_depth, len(self.blocks) - 1)
            block = self._switch_fork(depth, slot) if depth else self._forge(slot)
            self._fork_depth = self.praos.fork_depth(slot, len(self.blocks))
        await self._notify()
        return block

    async def run_block_production(self) -> None:
        """Forge a block on each slot that has transactions waiting, and empty ones now and
        then; under Praos, a block (empty or not) in each slot it leads instead."""
        checked = self.current_slot()
        while True:
            slot_ms = self.slots.slot_length_ms
            await asyncio.sleep((slot_ms - int(time.time() * 1000) % slot_ms) / 1000)
            now = self.current_slot()
            if self.praos is not None:
                await self._lead_slots(max(checked + 1, now - PRAOS_CATCH_UP_SLOTS), now)
                checked = now
                continue
            try:
                if self.pending.txs and now >= (self._pending_slot or now):
                    await self.produce_block()
                elif now - self.tip.slot >= EMPTY_BLOCK_EVERY_SLOTS:
                    await self.produce_block(now)
            except Exception:  # a bug must not stop the chain; it is logged loudly instead
                log.exception("block production failed at slot %d", now)

    async def _lead_slots(self, first: int, last: int) -> None:
        assert self.praos is not None
        for slot in range(first, last + 1):
            if not self.praos.leads(slot):
                continue
            try:
                await self.lead(slot)
            except Exception:  # as above: logged, and the next leader slot tries again
                log.exception("block production failed at slot %d", slot)

    # --- devnet-only operations -------------------------------------------------------------

    async def advance(self, slots: int) -> Block:
        """Travel `slots` forward in time and forge a block there, so the tip shows it."""
        self.clock_offset_slots += slots
        self.store.set_meta("clock_offset_slots", str(self.clock_offset_slots))
        self._pending_slot = None
        return await self.produce_block(max(self.current_slot(), self.tip.slot + slots))

    async def rollback(self, count: int) -> Block:
        """Drop the last `count` blocks (their transactions are discarded) and the mempool."""
        self._check_depth(count)
        async with self._commit_lock:
            self._orphan(count)
            self.pending.reset()
            self._pending_slot = None
        await self._notify()
        return self.tip

    async def fork(self, depth: int) -> Block:
        """Switch now to a competing chain that orphans the top `depth` blocks, as a Praos
        fork does: their transactions go back to the mempool (`_switch_fork`)."""
        self._check_depth(depth)
        async with self._commit_lock:
            block = self._switch_fork(depth, max(self.next_block_slot(), self.max_slot_ever + 1))
        await self._notify()
        return block

    def _check_depth(self, count: int) -> None:
        if not 0 < count < len(self.blocks):
            raise LedgerError(
                -32602, f"Can roll back between 1 and {len(self.blocks) - 1} blocks, not {count}."
            )

    async def reset(self) -> Block:
        """Back to genesis: every block and the mempool are dropped (slots keep increasing)."""
        async with self._commit_lock:
            self.store.truncate_above(0)
            self.state = LedgerState(self.genesis.initial_utxo())
            self.blocks = []
            self.pending = PendingState(self.state)
            self._pending_slot = None
            self.generation += 1
            self.rollbacks.append(Rollback(self.generation, 0))
            self._produce(max(self.current_slot(), self.max_slot_ever + 1), [])
        await self._notify()
        return self.tip

    def reward(self, credential: tuple[bool, bytes], lovelace: int) -> int:
        """Add `lovelace` to a registered reward account at once; its new balance. Kept in
        memory only: a restart, or a rollback past the tip it was paid at, loses it."""
        if credential not in self.state.reward_accounts:
            raise LedgerError(INVALID_PARAMS, "that stake credential is not registered")
        self.state.reward_accounts[credential] += lovelace
        if credential in self.pending.reward_accounts:  # unless a pending tx deregistered it
            self.pending.reward_accounts[credential] += lovelace
        return self.state.reward_accounts[credential]

    async def fund(self, address: str, lovelace: int) -> DecodedTx:
        """Send `lovelace` from the devnet's faucet wallet to `address` in a real transaction."""
        cbor = faucet.payment(self, address, lovelace)
        return await self.submit(cbor)

    def rollback_floor_since(self, generation: int) -> int | None:
        """The lowest height rolled back to after `generation`, if any rollback happened."""
        heights = [r.height for r in self.rollbacks if r.generation > generation]
        return min(heights) if heights else None

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def close(self) -> None:
        self.runner.close()
        self.store.close()


def _valid_in(dtx: DecodedTx, slot: int) -> bool:
    """Whether `slot` lies inside the transaction's validity interval."""
    body = dtx.tx.transaction_body
    start = body.validity_start
    return (body.ttl is None or slot < body.ttl) and (start is None or start <= slot)
