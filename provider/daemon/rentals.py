"""The daemon's deployments loop: it starts what renters deployed through the gateway and stops
what must stop, every `TICK_MS`.

- A `pending` deployment: its channel is admitted (read on chain and checked exactly as
  `unchained provider channel admit` does, from the TXID#IX and terms the renter's first
  deploy on it named) unless the channel book serves it already; the channel must be open and
  its renter key the one that signed the deploy. It takes a slot per replica (the slots jobs
  take too: the machine is never promised twice), and its kind's Starter
  (`provider.rentals.starters`) starts it: `running`, billed per second from then. Any refusal or
  failed start: `failed`, with the reason.
- A `running` one whose Starter says it ran to its end by itself (`finished`: a batch job,
  `provider.rentals.jobs`) is `stopped` with the reason (its exit code, or its max duration),
  its receipt signed (`JobReceipts`) and its billing frozen at the receipt's whole seconds.
  A job asks no more than its channel has room for (its deposit less what it owes): refused
  `failed` before it starts otherwise.
- A `running` one stops when its channel's IOUs lag (`ChannelBook.may_serve` of what the
  channel owes, every deployment on it, is false), when the channel's renter started a close,
  or when the channel ended: `stopped` with the reason (every deployment on that channel).
  Otherwise, a Starter that moves what it runs (a fleet's, `provider.placement.fleet_rentals`:
  a dead node's replicas placed again) says where it answers now (`upstream`): the book and so
  the gateway follow, with no price per second while nothing answers.
- A `stopped` or `failed` one (the renter's signed stop marks it at the gateway) loses its
  containers and slots. A Starter that keeps something after a stop (a pod's workspace) may
  define `forget(deployment, now_ms) -> bool`: called each round for its ended deployments,
  True once nothing of it is left, then the row goes too.

The book is the state: a restarted daemon takes the slots of what runs, clears what ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import docker

from offchain.chain.utxo import parse_out_ref
from offchain.core.errors import UnchainedError
from offchain.protocol.ledger.types import ChannelTerms
from offchain.protocol.tx.channel import OPEN
from provider.capacity import WHOLE, Capacity
from provider.config import DaemonSettings, RunnerSettings
from provider.daemon.chain import CHAIN_DOWN, Chain
from provider.daemon.channel_claims import admit
from provider.money.channel_book import ChannelBook
from provider.rentals.book import (
    ENDED,
    FAILED,
    JOB,
    PENDING,
    RUNNING,
    STOPPED,
    Rental,
    RentalBook,
    Starter,
    channel_due,
)
from provider.rentals.jobs import JobReceipts, ended_reason, spec_of
from provider.rentals.starters import STARTERS, starter_of

log = logging.getLogger("unchained.provider")
TICK_MS = 500


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def holder(name: str) -> str:
    """The name a deployment holds its slots under (jobs hold theirs by job id)."""
    return f"deployment:{name}"


class Rentals:
    def __init__(
        self,
        chain: Chain,
        channels: ChannelBook,
        book: RentalBook,
        client: docker.DockerClient,
        runner: RunnerSettings,
        settings: DaemonSettings,
        capacity: Capacity,
        receipts: JobReceipts | None = None,
        starters: Callable[[str], Starter] | None = None,
    ) -> None:
        """`receipts`: how a batch job's receipt is signed (None: this daemon runs no jobs
        over channels; each is refused with that reason). `starters`: the Starter of each kind
        (None: this machine's engine, `starter_of`; a fleet's, `provider.placement`)."""
        self.chain = chain
        self.receipts = receipts
        self.channels = channels
        self.book = book
        self.client = client
        self.runner = runner
        self.settings = settings
        self.capacity = capacity
        self._starter_of = starters or functools.partial(starter_of, client=client, settings=runner)
        self._starters: dict[str, Starter] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._live: dict[str, str] = {}  # name -> kind of what holds containers and slots
        self._recovered = False

    def starter(self, kind: str) -> Starter:
        if kind not in self._starters:
            self._starters[kind] = self._starter_of(kind)
        return self._starters[kind]

    async def tick(self) -> None:
        """One round: start what is pending, stop what must stop, clear what ended."""
        deployments = self.book.list()
        if not self._recovered:
            await self._recover(deployments)
        stopped_channels: set[bytes] = set()
        for deployment in deployments:
            name = deployment.name
            if deployment.state == PENDING and name not in self._starting:
                if self._still_pending(name):  # not started by a task that ended this round
                    self._starting[name] = asyncio.create_task(self._start(deployment))
            elif deployment.state == RUNNING and deployment.channel not in stopped_channels:
                if await self._ran_to_end(deployment):
                    continue
                reason = self._must_stop(deployment.channel)
                if reason is not None:
                    stopped_channels.add(deployment.channel)
                    self._finish_channel(deployment.channel, reason)
                else:
                    await self._follow(deployment)
            elif deployment.state in ENDED:
                await self._clear(deployment)
        for name, kind in list(self._live.items()):  # removed from the book by the operator
            if self.book.get(name) is None:
                await self._remove(name, kind)

    def _still_pending(self, name: str) -> bool:
        """Whether `name` is pending in the book now: the round's rows were read before its
        awaits, during which a start task may have run it and ended (its row moved on)."""
        fresh = self.book.get(name)
        return fresh is not None and fresh.state == PENDING

    async def aclose(self) -> None:
        """Cancel starts in progress (their rows stay pending: the next daemon starts them)."""
        for task in self._starting.values():
            task.cancel()
        await asyncio.gather(*self._starting.values(), return_exceptions=True)

    def _must_stop(self, channel: bytes) -> str | None:
        """Why the deployments on `channel` must stop now, or None."""
        due = channel_due(self.book, channel, now_ms())
        if self.channels.may_serve(channel, due):
            return None
        entry = self.channels.get(channel)
        if entry is None or entry.ended:
            return f"channel {channel.hex()} ended"
        if entry.view.closing_at != OPEN:
            return f"channel {channel.hex()} is closing (its renter started a close)"
        acknowledged = entry.iou.amount if entry.iou else 0
        if due > entry.view.capacity:
            return f"channel {channel.hex()} cannot pay the {due} lovelace owed"
        return (f"IOUs lag: {due} lovelace owed on channel {channel.hex()}, {acknowledged} "
                f"acknowledged, credit {self.channels.credit}")  # fmt: skip

    async def _ran_to_end(self, deployment: Rental) -> bool:
        """Whether `deployment` ended by itself (a batch job that exited): then `stopped`,
        its receipt signed and kept, its billing frozen at the receipt's whole seconds, its
        slots free (the renter's next job may start at once)."""
        finished = getattr(self.starter(deployment.kind), "finished", None)
        if finished is None:
            return False
        result = await asyncio.to_thread(finished, deployment)
        if result is None:
            return False
        seconds = 0
        if self.receipts is not None:
            record = await asyncio.to_thread(self.receipts.keep, deployment, result)
            seconds = 0 if record is None else int(record["units"])
        reason = ended_reason(result, spec_of(deployment).job.max_duration_s)
        log.info("deployment %s ended: %s, %d s billed", deployment.name, reason, seconds)
        self.book.finish(deployment.name, STOPPED, reason, deployment.started_ms + seconds * 1000)
        await self._remove(deployment.name, deployment.kind)  # its slot is free at once
        return True

    async def _follow(self, deployment: Rental) -> None:
        """A Starter that moves what it runs (a fleet's, placing again what a dead node ran)
        says where `deployment` answers now: the book follows, billing paused while nothing
        answers (`set_warm` of "": as at zero replicas)."""
        where = getattr(self.starter(deployment.kind), "upstream", None)
        if where is None:
            return
        now = await asyncio.to_thread(where, deployment)
        if now is not None and now != deployment.upstream:
            with contextlib.suppress(KeyError):  # stopped meanwhile
                self.book.set_warm(deployment.name, now, now_ms())
            log.info("deployment %s answers at %r now", deployment.name, now)

    def _finish_channel(self, channel: bytes, reason: str) -> None:
        for deployment in self.book.on_channel(channel):
            if deployment.state in (PENDING, RUNNING):
                log.warning("deployment %s stopped: %s", deployment.name, reason)
                self.book.finish(deployment.name, STOPPED, reason, now_ms())

    async def _recover(self, deployments: list[Rental]) -> None:
        """After a restart: what runs holds its slots again; what ended, or was starting
        when the last daemon stopped, leaves nothing behind."""
        for deployment in deployments:
            if deployment.kind not in STARTERS:
                continue
            if deployment.state == RUNNING:
                for _ in range(_replicas(deployment)):
                    self.capacity.take(holder(deployment.name))
                self._live[deployment.name] = deployment.kind
            elif deployment.state == PENDING:
                await asyncio.to_thread(self.starter(deployment.kind).stop, deployment.name)
            elif deployment.state in ENDED:
                self._live[deployment.name] = deployment.kind  # cleared by this round
        self._recovered = True

    async def _start(self, deployment: Rental) -> None:
        name = deployment.name
        try:
            try:
                await self._admitted(deployment)
            except CHAIN_DOWN as exc:  # still pending: the next round tries again
                log.warning("deployment %s waits for the chain: %r", name, exc)
                return
            if deployment.kind == JOB:
                self._job_fits(deployment)
            gpus = self._take_slots(deployment)
            try:
                started = await asyncio.to_thread(
                    self.starter(deployment.kind).start_deployment, deployment, gpus
                )
            except BaseException:
                self.capacity.release(holder(name))
                raise
            self._live[name] = deployment.kind
            try:
                self.book.set_running(name, started.upstream, started.image_digest, now_ms())
            except KeyError:  # stopped while it started: the next round clears it
                return
            log.info("deployment %s running (%s): %s", name, deployment.kind, started.upstream)
        except (UnchainedError, LookupError, ValueError) as exc:
            log.warning("deployment %s failed: %s", name, exc)
            self.book.finish(name, FAILED, str(exc), now_ms())
        except Exception as exc:  # the engine's own errors, whatever they are
            log.exception("deployment %s failed", name)
            self.book.finish(name, FAILED, f"{type(exc).__name__}: {exc}", now_ms())
        finally:
            self._starting.pop(name, None)

    async def _admitted(self, deployment: Rental) -> None:
        """The deployment's channel in the channel book, open, its renter key the one that
        signed the deploy; ChannelRefused (an UnchainedError), LookupError or ValueError
        saying why not."""
        channel = deployment.channel
        entry = self.channels.get(channel)
        if entry is None or entry.ended:
            noted = self.book.admission(channel)
            if noted is None:
                raise LookupError(f"channel {channel.hex()} is not served here")
            utxo, terms = noted
            read = ChannelTerms.from_cbor(bytes.fromhex(terms))
            await self.chain.call(
                admit, self.chain, self.channels, parse_out_ref(utxo), read, self.settings
            )
            entry = self.channels.get(channel)
        if entry is None or entry.view.id != channel:
            raise LookupError(f"channel {channel.hex()} is not served here")
        if entry.view.renter_vkey != deployment.renter_vkey:
            raise ValueError(f"key {deployment.renter_vkey.hex()} is not the renter key of "
                             f"channel {channel.hex()}")  # fmt: skip
        if entry.view.closing_at != OPEN:
            raise ValueError(f"channel {channel.hex()} is closing")

    def _job_fits(self, deployment: Rental) -> None:
        """ValueError unless this daemon signs job receipts and the job's most cost fits its
        channel's room: what the channel can pay in all less what it owes now."""
        if self.receipts is None:
            raise ValueError("this provider runs no jobs over channels")
        entry = self.channels.get(deployment.channel)
        assert entry is not None  # admitted just now
        cost = spec_of(deployment).max_cost
        due = channel_due(self.book, deployment.channel, now_ms())
        room = entry.view.capacity - due
        if cost > room:
            raise ValueError(f"the job may cost {cost} lovelace, more than channel "
                             f"{deployment.channel.hex()} has room for ({room})")  # fmt: skip

    def _take_slots(self, deployment: Rental) -> list[str]:
        """A slot per replica, held under the deployment's name; the GPUs its spec asks of
        each. ValueError if the machine has not that many free."""
        replicas, gpus = _replicas(deployment), _gpus(deployment)
        free = self.capacity.free_for(WHOLE)  # a deployment takes whole slots, not GPU slices
        if free < replicas:
            raise ValueError(f"{replicas} slot(s) asked, {free} free now")
        uuids: list[str] = []
        for _ in range(replicas):
            slot = self.capacity.take(holder(deployment.name))
            assert slot is not None  # free() said so, and nothing else ran in between
            uuids += list(slot.gpu_uuids[:gpus])
        return uuids

    async def _clear(self, deployment: Rental) -> None:
        """An ended deployment: its containers and slots go; a Starter that keeps more (a
        pod's workspace) says when the row may go too."""
        if deployment.kind not in STARTERS:  # it never ran here: nothing to clear
            return
        if deployment.name in self._live:
            await self._remove(deployment.name, deployment.kind)
            await self._stopped_job(deployment)
        forget = getattr(self.starter(deployment.kind), "forget", None)
        if forget is not None and await asyncio.to_thread(forget, deployment, now_ms()):
            self.book.remove(deployment.name)

    async def _stopped_job(self, deployment: Rental) -> None:
        """A batch job stopped before it ended (by its renter, or its IOUs lagged): its run
        ended with the stop; its receipt is signed for what was metered (billing ended at the
        stop)."""
        finished = getattr(self.starter(deployment.kind), "finished", None)
        if finished is None or self.receipts is None:
            return
        result = await asyncio.to_thread(finished, deployment)
        if result is not None:
            await asyncio.to_thread(self.receipts.keep, deployment, result)

    async def _remove(self, name: str, kind: str) -> None:
        await asyncio.to_thread(self.starter(kind).stop, name)
        self.capacity.release(holder(name))
        self._live.pop(name, None)
        log.info("deployment %s removed", name)


def _spec(deployment: Rental) -> dict[str, Any]:
    spec = json.loads(deployment.spec_json)
    return spec if isinstance(spec, dict) else {}


def _replicas(deployment: Rental) -> int:
    return int(_spec(deployment).get("replicas", 1))


def _gpus(deployment: Rental) -> int:
    spec = _spec(deployment)
    if deployment.kind == JOB:  # its job's bundle
        spec = spec.get("job", {})
    return int(spec.get("resources", {}).get("gpus", 0))
