"""The daemon when things go wrong: SIGKILLed mid-job and started again, it finishes the job
the container kept running and is paid for it; with the market gone during the upload, its
payout watcher settles the receipt itself before the escrow closes; SIGKILLed while the result
uploads, the restarted daemon delivers it once, with the failed outcome its journal kept, and
is paid once; SIGTERM lets a running job
finish and be delivered before the daemon stops, and stops its heartbeat so the market lets
the offer go offline and a job funded meanwhile is never taken."""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import httpx

from offchain.protocol.ledger.split import settle_split
from tests.market.client import Party, serve
from tests.protocol.onchain import balance, travel_to, wallet
from tests.provider.daemon_harness import (
    IDENTITY,
    consumer_of,
    daemon_on_market,
    fund_quoted,
    new_provider,
    provider_share,
    quiet_market,
    request_and_lock,
    settling_market,
    spec,
    wait_container_running,
    wait_state,
)

MARGIN_MS = 5 * 60_000  # the daemon's default payout margin
BIG_MIB = 200  # a result that takes a while to upload, so the kill can land during it


async def test_killed_mid_job_the_restarted_daemon_delivers_and_is_paid(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    async with (
        daemon_on_market(devnet, tmp_path, deployment_file, settings) as (daemon, provider, url),
        consumer_of(devnet, url) as consumer,
    ):
        before = balance(devnet, provider.address)
        script = "echo started; sleep 5; echo survived > /out/answer"
        job = await request_and_lock(devnet, deployment, consumer, spec(busybox, script))
        await wait_state(consumer, job.job, {"running"})
        await wait_container_running(job.job)
        daemon.signal(signal.SIGKILL)
        daemon.wait(10)
        daemon.start()  # the container ran on; the new daemon recovers it
        status = await wait_state(consumer, job.job, {"settled"}, timeout_s=120)
        assert "recovering 1 job(s)" in daemon.log()
        assert status["receipt_units"] >= 5
        split = settle_split(
            job.params["lovelace"], job.params["price_per_unit"],
            status["receipt_units"], job.params["max_units"], job.params["fee_allowance"],
        )  # fmt: skip
        assert balance(devnet, provider.address) == before + split.provider


async def test_market_down_during_upload_the_payout_watcher_settles(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path)
    daemon = None
    try:
        with serve(settings) as url:
            daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url)
            await daemon.start().logged("offer published")
            async with consumer_of(devnet, url) as consumer:
                script = "echo started; sleep 3; echo kept > /out/answer"
                job = await request_and_lock(devnet, deployment, consumer, spec(busybox, script))
                await wait_state(consumer, job.job, {"running"})
        # the market is gone before the job ends: the upload cannot happen
        await daemon.logged("units signed")
        before = balance(devnet, provider.address)
        close = job.params["deadline"] + job.params["settle_window"]
        await travel_to(devnet, close - MARGIN_MS + 10_000)
        await daemon.logged("left unsettled", timeout_s=60)
        await daemon.logged("earned", timeout_s=60)
        fee = int(re.search(r"fee (\d+) lovelace", daemon.log())[1])
        units = int(re.search(r"(\d+) units signed", daemon.log())[1])
        params = job.params
        split = settle_split(params["lovelace"], params["price_per_unit"], units,
                             params["max_units"], params["fee_allowance"])  # fmt: skip
        # paid its due, and the allowance's rest after the fee it paid as the submitter
        assert balance(devnet, provider.address) == before + split.provider + split.fee - fee
    finally:
        if daemon is not None:
            daemon.stop()
            daemon.reap()


async def test_sigterm_lets_the_running_job_finish_and_be_delivered(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path)
    async with (
        daemon_on_market(devnet, tmp_path, deployment_file, settings) as (daemon, _, url),
        consumer_of(devnet, url) as consumer,
    ):
        job = await request_and_lock(
            devnet, deployment, consumer, spec(busybox, "sleep 3; echo done")
        )
        await wait_state(consumer, job.job, {"running"})
        daemon.signal(signal.SIGTERM)
        assert await asyncio.to_thread(daemon.wait, 60) == 0
        status = await wait_state(consumer, job.job, {"completed"}, timeout_s=5)
        assert status["receipt_units"] >= 3
        assert "provider daemon stopped" in daemon.log()


async def upload_begun(blob_dir: Path, timeout_s: float = 120) -> None:
    """Until the market is writing an upload (its temporary `.upload-*` file has bytes)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while not any(f.stat().st_size > 0 for f in blob_dir.glob(".upload-*") if f.exists()):
        assert loop.time() < until, "no upload began"
        await asyncio.sleep(0.005)


async def test_killed_mid_upload_the_restarted_daemon_delivers_once(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    async with (
        daemon_on_market(devnet, tmp_path, deployment_file, settings, bundles=1,
                         disk_mib=BIG_MIB + 56) as (daemon, provider, url),
        consumer_of(devnet, url) as consumer,
    ):  # fmt: skip
        before = balance(devnet, provider.address)
        # its program fails (exit 5) after its output: the outcome, kept in the journal
        # with the receipt, reaches the market with the redelivery
        script = f"sleep 2; head -c {BIG_MIB}m /dev/urandom > /out/big; exit 5"
        job_spec = spec(busybox, script, disk_mib=BIG_MIB + 56)
        job = await request_and_lock(devnet, deployment, consumer, job_spec)
        await upload_begun(settings.blob_dir)
        daemon.signal(signal.SIGKILL)
        daemon.wait(10)
        assert "units signed" in daemon.log()
        assert f"job {job.job} delivered" not in daemon.log()  # killed mid-upload
        daemon.start()
        status = await wait_state(consumer, job.job, {"settled"}, timeout_s=180)
        assert daemon.log().count(f"job {job.job} delivered") == 1
        assert (status["outcome"], status["exit_code"]) == ("failed", 5)
        share = provider_share(job, status["receipt_units"])
        assert balance(devnet, provider.address) == before + share
        result = await consumer.send("GET", f"/jobs/{job.job}/result")
        assert len(result.content) > BIG_MIB << 20
        assert result.headers["x-result-sha256"] == status["result_sha256"]


async def test_after_sigterm_the_offer_goes_offline_and_no_job_is_taken(
    devnet, tmp_path, busybox
):  # fmt: skip
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path, online_ms=2_000)
    async with (
        daemon_on_market(devnet, tmp_path, deployment_file, settings,
                         heartbeat_ms=300) as (daemon, _, url),
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):  # fmt: skip
        consumer = Party.new(http, IDENTITY, await wallet(devnet))
        late = Party.new(http, IDENTITY, await wallet(devnet))
        running = await request_and_lock(
            devnet, deployment, consumer, spec(busybox, "sleep 20; echo done")
        )
        await wait_state(consumer, running.job, {"running"})
        quoted = await late.send("POST", "/jobs", {
            "spec": spec(busybox, "echo never"),
            "consumer_address": str(late.wallet.address)})  # fmt: skip
        assert quoted.status_code == 201, quoted.text
        daemon.signal(signal.SIGTERM)
        await daemon.logged("stopping: no new work, no heartbeat")
        unwanted = quoted.json()["job_id"]
        await fund_quoted(devnet, deployment, late, unwanted)  # assigned to it
        await offline(late, busybox)  # no heartbeat: no more quotes for it
        # ... while the daemon still runs its job: stopping, not stopped, did that
        assert daemon.process is not None and daemon.process.poll() is None
        assert f"job {running.job} delivered" not in daemon.log()
        assert await asyncio.to_thread(daemon.wait, 60) == 0
        await wait_state(consumer, running.job, {"completed", "settled"}, timeout_s=5)
        status = await wait_state(late, unwanted, {"funded"}, timeout_s=5)
        assert status["state"] == "funded"  # assigned, never accepted
        assert f"job {unwanted}" not in daemon.log()


async def offline(party: Party, image: str, timeout_s: float = 60) -> None:
    """Until the market quotes no job: every offer has gone offline (409, no offer)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    body = {"spec": spec(image, "echo never"), "consumer_address": str(party.wallet.address)}
    while (answer := await party.send("POST", "/jobs", body)).status_code == 201:
        assert loop.time() < until, "the offer stayed online"
        await asyncio.sleep(0.3)
    assert answer.status_code == 409, answer.text
