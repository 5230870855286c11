"""The daemon through outages, each against the real devnet, the real market and the real
docker engine: the chain stopped while a job runs (and started again on its data), the chain
down when an assignment arrives, the market stopped and started again on its database. The
daemon process lives through each (its pid never changes), and every job is delivered and
settled with the provider paid to the lovelace."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import AsyncIterator

import httpx
import pytest

from devnet.process import DevnetProcess
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from tests.market.client import Party
from tests.protocol.onchain import balance, wallet
from tests.provider.daemon_harness import (
    IDENTITY,
    LockedJob,
    MarketServer,
    ProviderProcess,
    new_provider,
    provider_share,
    request_and_lock,
    settling_market,
    spec,
    wait_container_running,
    wait_state,
)


@dataclasses.dataclass
class World:
    devnet: DevnetProcess
    deployment: Deployment
    market: MarketServer
    daemon: ProviderProcess
    provider: Wallet
    consumer: Party
    image: str

    async def job(self, script: str) -> LockedJob:
        """A consumer's job for the daemon, funded (its escrow locked and reported)."""
        job_spec = spec(self.image, script)
        return await request_and_lock(self.devnet, self.deployment, self.consumer, job_spec)

    async def settled_and_paid(self, job: LockedJob, before: int) -> None:
        """The job settles once and the provider's balance grows by its share exactly."""
        status = await wait_state(self.consumer, job.job, {"settled"}, timeout_s=180)
        assert balance(self.devnet, self.provider.address) == before + provider_share(
            job, status["receipt_units"]
        )
        assert self.daemon.log().count(f"job {job.job} delivered") == 1


@pytest.fixture
async def world(own_devnet, tmp_path, busybox) -> AsyncIterator[World]:
    """A devnet of the test's own (it is stopped and started again), a market that settles
    from its own wallet, and a running provider daemon with its offer published."""
    deployment_file, deployment, settings = await settling_market(own_devnet, tmp_path)
    market = MarketServer(settings).start()
    daemon, provider = await new_provider(own_devnet, tmp_path, deployment_file, market.url)
    try:
        await daemon.start().logged("offer published")
        async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
            consumer = Party.new(http, IDENTITY, await wallet(own_devnet))
            yield World(own_devnet, deployment, market, daemon, provider, consumer, busybox)
    finally:
        daemon.stop()
        market.stop()
        assert daemon.reap() == {"containers": [], "workspaces": [], "cgroups": []}


def pid(daemon: ProviderProcess) -> int:
    assert daemon.process is not None and daemon.process.poll() is None, daemon.log()
    return daemon.process.pid


async def test_the_chain_down_while_a_job_runs_and_ends(world):
    daemon, devnet = world.daemon, world.devnet
    started_as = pid(daemon)
    before = balance(devnet, world.provider.address)
    job = await world.job("echo started; sleep 4; echo survived > /out/answer")
    await wait_state(world.consumer, job.job, {"running"})
    await wait_container_running(job.job)
    devnet.stop()
    # the heartbeat finds the chain gone while the job runs, then the job ends and its
    # receipt waits for the chain
    await daemon.logged("bond not read, the chain is unreachable")
    await daemon.logged("the chain is unreachable (", timeout_s=90)
    devnet.start()  # the same data directory and port
    await world.settled_and_paid(job, before)
    assert pid(daemon) == started_as


async def test_an_assignment_while_the_chain_is_down_is_taken_once_it_is_back(world):
    daemon, devnet = world.daemon, world.devnet
    started_as = pid(daemon)
    before = balance(devnet, world.provider.address)
    daemon.signal(signal.SIGSTOP)  # held off while the job is funded and the chain stops
    try:
        job = await world.job("echo taken; sleep 2")  # 2+ units: each payout over min-UTxO
        devnet.stop()
    finally:
        daemon.signal(signal.SIGCONT)
    await daemon.logged("assignments wait for the chain", timeout_s=90)
    devnet.start()
    await daemon.logged(f"job {job.job} accepted", timeout_s=90)
    await world.settled_and_paid(job, before)
    assert pid(daemon) == started_as


async def test_the_market_down_and_back_gets_the_offer_again_and_a_new_job(world):
    daemon, market = world.daemon, world.market
    started_as = pid(daemon)
    market.stop()
    await daemon.logged("market unreachable, offer to publish again")
    market.start()  # the same port and database
    await daemon.logged("offer published", timeout_s=60, times=2)
    before = balance(world.devnet, world.provider.address)
    job = await world.job("sleep 2; echo after the outage")
    await world.settled_and_paid(job, before)
    assert pid(daemon) == started_as
