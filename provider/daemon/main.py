"""The daemon: recovery first, then five loops on one event loop (heartbeat + bond check,
assignments, payouts, channel claims, deployments) until SIGTERM or SIGINT. Then it takes no
more work and stops heartbeating (the market lets the offer go offline and matches it no job),
gives running jobs `grace_ms` to finish and be delivered, then stops those still running (the
renter gets what their /out holds, a training job's last checkpoint, and pays the units they
ran), gives them `stop_delivery_ms` to be delivered, and stops; with `keep_jobs_at_stop` a job
still running keeps its container instead and is recovered by the next start, as is a stopped
job not yet delivered. Deployments outlive the daemon
(the gateway serves them meanwhile): the next start finds them in their book. A lost market or
chain connection is logged and retried: it never stops a running job."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import docker

from offchain.chain.context import untrack
from offchain.protocol.api.market_errors import MarketError, MarketRefused
from offchain.protocol.api.market_link import MarketLink
from offchain.protocol.api.signed_request import KeySigner
from offchain.protocol.api.wire import Assignment, parse
from provider import metrics
from provider.capacity import Capacity, slots_of
from provider.config import ProviderConfig
from provider.daemon.bond import BondManager
from provider.daemon.cancels import answer_cancel
from provider.daemon.chain import CHAIN_DOWN, Chain, ChainUnavailable
from provider.daemon.channel_claims import ChannelClaimer
from provider.daemon.jobs import Shallow, Worker
from provider.daemon.journal import Journal
from provider.daemon.offers import GatewayTerms, OfferKeeper
from provider.daemon.payouts import PayoutWatcher
from provider.daemon.recovery import recover
from provider.daemon.rental_reports import reports
from provider.daemon.rentals import TICK_MS as DEPLOYMENTS_TICK_MS
from provider.daemon.rentals import Rentals
from provider.gpu import mps
from provider.gpu import share as gpu_share
from provider.gpu.inventory import HostInventory
from provider.money.channel_book import ChannelBook
from provider.placement.interface import placement_of, rental_starters
from provider.rentals.book import RentalBook
from provider.rentals.jobs import JobReceipts
from provider.selftest.checks import load_slice_results

log = logging.getLogger("unchained.provider")
T = TypeVar("T")
POLL_RETRY_S = 5.0
ERROR_PAUSE_S = 2.0


class Daemon:
    def __init__(self, config: ProviderConfig, inventory: HostInventory, chain: Chain) -> None:
        self.settings = config.daemon
        self.chain = chain
        key = chain.wallet.key
        network = chain.deployment.network
        self.link = MarketLink.open(
            self.settings.market_url, self.settings.market_identity, KeySigner(key, network)
        )
        runner, inventory = placement_of(config, inventory)  # a fleet offers its nodes
        bundle, slots = slots_of(config.offer, inventory, gpu_share.isolator)
        # MPS slices are enforced by the provider's own MPS daemon: up before they are offered
        mps.start_for(config.runner.state_dir, [s.gpu_slice for s in slots if s.gpu_slice])
        self.journal = Journal(config.runner.state_dir)
        self.bonds = BondManager(self.chain, self.settings.bond_minimum_lovelace)
        self.worker = Worker(
            self.chain, self.link, self.journal, runner, self.bonds, Capacity(slots), bundle, key,
            self.settings,
        )  # fmt: skip
        gateway = self.settings.gateway_url
        self.offer = OfferKeeper(
            self.link, bundle, str(chain.payout), config.runner.state_dir,
            runner.images, config.runner.pull_images,
            GatewayTerms(gateway, config.offer.request_price, config.offer.llm_prices)
            if gateway else None,
            functools.partial(load_slice_results, config.runner.state_dir),
        )  # fmt: skip
        self.payouts = PayoutWatcher(self.chain, self.journal, runner.results_dir, self.settings)
        self.channels = ChannelBook.in_state_dir(
            config.runner.state_dir, network.value, chain.deployment.channel_hash,
            self.settings.channel_credit_lovelace,
        )  # fmt: skip
        self.claims = ChannelClaimer(self.chain, self.channels, self.settings)
        self.endpoints = RentalBook.in_state_dir(config.runner.state_dir)
        self.deployments = Rentals(
            self.chain, self.channels, self.endpoints, docker.from_env(), config.runner,
            self.settings, self.worker.capacity,
            JobReceipts(key, chain.deployment.network_id, chain.deployment.settle_hash,
                        runner.results_dir),
            rental_starters(runner, docker.from_env(), config.runner),  # a fleet's: on its nodes
        )  # fmt: skip
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        stop_metrics = metrics.serving(self.settings.metrics_listen,
                                       metrics.slots(self.worker.capacity),
                                       metrics.channel_book(self.channels))  # fmt: skip
        self.chain.track()
        await recover(self.worker)
        heartbeat = asyncio.create_task(self._every(self.settings.heartbeat_ms, self._heartbeat))
        loops = [
            heartbeat,
            asyncio.create_task(self._every(self.settings.payout_every_ms, self.payouts.tick)),
            asyncio.create_task(self._every(self.settings.payout_every_ms, self.claims.tick)),
            asyncio.create_task(self._every(DEPLOYMENTS_TICK_MS, self.deployments.tick)),
            asyncio.create_task(self._every(self.settings.heartbeat_ms, reports(self).tick)),
        ]
        log.info("provider daemon running: %d slot(s), %s lovelace/s per job",
                 len(self.worker.capacity.slots), self.worker.bundle.price_per_unit)  # fmt: skip
        try:
            await self._take_assignments()
            heartbeat.cancel()  # the offer goes offline: the market matches no new job to it
            await self._grace()
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self.deployments.aclose()
            await self.link.aclose()
            self.channels.close()
            self.endpoints.close()
            stop_metrics()
            untrack(self.chain.context)
        log.info("provider daemon stopped")

    def stop(self) -> None:
        if not self.stopping.is_set():
            log.info("stopping: no new work, no heartbeat; running jobs have %d ms",
                     self.settings.grace_ms)  # fmt: skip
            self.stopping.set()

    async def _heartbeat(self) -> None:
        try:
            bond = await self.chain.call(self.bonds.refresh)
        except CHAIN_DOWN as exc:  # the offer stays online on the bond last read
            log.warning("bond not read, the chain is unreachable: %r", exc)
            bond = self.bonds.view
        await self.offer.beat(bond, retry_for_s=self.settings.heartbeat_ms / 2000)

    async def _take_assignments(self) -> None:
        """Long-poll for assignments while a slot is free; with none free, for its renters'
        cancels alone until one frees."""
        worker = self.worker
        poll = f"/providers/assignments?timeout_s={self.settings.poll_s}"
        while not self.stopping.is_set():
            full = worker.capacity.free() == 0
            if full:
                worker.freed.clear()
            asking = self.link.send(
                "GET", poll + ("&new=false" if full else ""), retry_for_s=POLL_RETRY_S,
                timeout_s=self.settings.poll_s + 15,
            )  # fmt: skip
            try:
                found = await (self._until_stop_or(asking, worker.freed.wait()) if full
                               else asking)  # fmt: skip
            except MarketError as exc:
                log.warning("assignments: %s", exc)
                await self._until_stop_or(asyncio.sleep(POLL_RETRY_S))
                continue
            shallow = False  # an escrow not deep enough: the next poll waits a while
            try:
                for assignment in handed(found):
                    if assignment.cancel_tx:
                        await answer_cancel(worker, assignment)
                        continue
                    try:
                        if self.stopping.is_set() or not await worker.take(assignment):
                            break
                    except Shallow as exc:  # still assigned: taken once deep enough
                        log.info("%s", exc)
                        shallow = True
            except ChainUnavailable as exc:  # the market keeps it assigned: taken once back
                log.warning("assignments wait for the chain: %s", exc)
                shallow = True
            if shallow:
                await self._until_stop_or(asyncio.sleep(POLL_RETRY_S))

    async def _until_stop_or(self, awaitable: Awaitable[T], *other: Awaitable[object]) -> T | None:
        """What `awaitable` gives, or None once the daemon stops or one of `other` is done
        first (the rest is cancelled)."""
        waiting = asyncio.ensure_future(awaitable)
        others = [asyncio.ensure_future(a) for a in (self.stopping.wait(), *other)]
        await asyncio.wait([waiting, *others], return_when=asyncio.FIRST_COMPLETED)
        for task in (waiting, *others):
            task.cancel()
        return waiting.result() if waiting.done() and not waiting.cancelled() else None

    async def _grace(self) -> None:
        """Running jobs get `grace_ms` to finish and be delivered; then those still running
        are stopped (`Runner.stop_all`) and get `stop_delivery_ms` to be delivered, unless
        `keep_jobs_at_stop`. What is left then is the next start's to recover."""
        late = await _within(self.worker.tasks, self.settings.grace_ms)
        if late and not self.settings.keep_jobs_at_stop:
            stopped = await asyncio.to_thread(self.worker.runner.stop_all)
            if stopped:
                log.info("stopped %d job(s) still running: %s; each is delivered with what its "
                         "/out holds", len(stopped), ", ".join(stopped))  # fmt: skip
            late = await _within(late, self.settings.stop_delivery_ms)
        for task in late:
            task.cancel()
        if late:
            log.warning("%d job(s) still running or undelivered: the next start recovers them",
                        len(late))  # fmt: skip

    async def _every(self, period_ms: int, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` now and every `period_ms`; an error is logged, never fatal."""
        while True:
            try:
                await work()
            except Exception:  # a lost chain or market: the next round tries again
                log.exception("%s failed; trying again", getattr(work, "__name__", work))
            await asyncio.sleep(period_ms / 1000)


async def _within(tasks: set[asyncio.Task[None]], ms: int) -> set[asyncio.Task[None]]:
    """Wait up to `ms` for `tasks`; those not done by then."""
    if not tasks:
        return set()
    _, late = await asyncio.wait(set(tasks), timeout=ms / 1000)
    return late


def handed(found: Any) -> list[Assignment]:
    """The assignments in the market's answer to a poll; one that is not an Assignment is
    logged and skipped, so it holds up none of the others."""
    assignments = []
    for item in found or []:
        try:
            assignments.append(parse(Assignment, item, "GET /providers/assignments"))
        except MarketRefused as exc:
            log.warning("assignments: %s", exc)
    return assignments
