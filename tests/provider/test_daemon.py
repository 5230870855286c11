"""The provider daemon against the real devnet, the real market (uvicorn) and the real docker
engine: consumers' signed requests and locked escrows become jobs the daemon accepts, runs
two at a time, delivers and gets paid for (balances to the lovelace); `provider status` shows
it all in chain time."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from typer.testing import CliRunner

from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.split import settle_split
from tests.market.client import Party, serve
from tests.protocol.onchain import balance, wallet
from tests.provider.daemon_harness import (
    CORE_PRICE,
    IDENTITY,
    new_provider,
    request_and_lock,
    settling_market,
    spec,
    wait_state,
)
from unchained.cli import app

cli = CliRunner()


@pytest.fixture
async def world(devnet, tmp_path, busybox):
    """A deployment, a market that settles from its own wallet, a provider daemon (2 slots)."""
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    with serve(settings) as url:
        daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                await daemon.start().logged("offer published")
                yield deployment, http, daemon, provider
        finally:
            daemon.stop()
            daemon.reap()


async def test_two_jobs_in_parallel_from_signed_request_to_payout(devnet, world, busybox):
    deployment, http, daemon, provider = world
    published = next(line for line in daemon.log().splitlines() if "offer published: " in line)
    assert f"{ada(CORE_PRICE * 3600)} per hour ({CORE_PRICE} lovelace/s); no bond" in published
    assert "core(s), 512 MiB memory" in published and "{" not in published, published
    before = balance(devnet, provider.address)
    consumers = [Party.new(http, IDENTITY, await wallet(devnet)) for _ in range(2)]
    script = "echo started; sleep 3; echo result > /out/answer; echo done"
    jobs = await asyncio.gather(*(
        request_and_lock(devnet, deployment, consumer, spec(busybox, script))
        for consumer in consumers
    ))  # fmt: skip
    running = await asyncio.gather(*(
        wait_state(job.consumer, job.job, {"running"}) for job in jobs
    ))  # fmt: skip
    assert all(status["state"] == "running" for status in running)  # both at once: 2 slots

    status_out = cli.invoke(app, [
        "provider", "status", "--config", str(daemon.config), "--ogmios-url", devnet.url,
        "--deployment", str(daemon.deployment_file)])  # fmt: skip
    assert status_out.exit_code == 0, status_out.output
    assert status_out.output.count("busy with job") == 2, status_out.output
    assert status_out.output.count(" ADA so far, escrow ") == 2, status_out.output

    settled = await asyncio.gather(*(
        wait_state(job.consumer, job.job, {"settled"}, timeout_s=120) for job in jobs
    ))  # fmt: skip
    earned = 0
    for job, status in zip(jobs, settled, strict=True):
        params = job.params
        assert status["receipt_units"] >= 3 and status["price_per_unit"] == CORE_PRICE
        split = settle_split(params["lovelace"], params["price_per_unit"],
                             status["receipt_units"], params["max_units"],
                             params["fee_allowance"])  # fmt: skip
        earned += split.provider
        logs = (await job.consumer.send("GET", f"/jobs/{job.job}/logs")).json()
        assert [line["text"] for line in logs] == ["started", "done"]
        result = await job.consumer.send("GET", f"/jobs/{job.job}/result")
        assert result.headers["x-result-sha256"] == status["result_sha256"]
    # the market paid the settle fees: the provider's balance grew by exactly its receipts
    assert balance(devnet, provider.address) == before + earned

    await asyncio.sleep(1.5)  # a payout round marks the spent escrows settled
    status_out = cli.invoke(app, [
        "provider", "status", "--config", str(daemon.config), "--ogmios-url", devnet.url,
        "--deployment", str(daemon.deployment_file)])  # fmt: skip
    assert f"earnings settled: {ada(earned)}" in status_out.output, status_out.output
    assert status_out.output.count(": free") == 2 and "no bond" in status_out.output
    as_json = cli.invoke(app, [
        "provider", "status", "--json", "--config", str(daemon.config), "--ogmios-url",
        devnet.url, "--deployment", str(daemon.deployment_file)])  # fmt: skip
    status = json.loads(as_json.output)
    assert status["settled_lovelace"] == earned and status["pending_lovelace"] == 0, status
    assert [slot["job_id"] for slot in status["slots"]] == [None, None] and not status["running"]
    assert status["bond"] == {"ref": None, "lovelace": 0, "unbonding_ends_ms": None}
