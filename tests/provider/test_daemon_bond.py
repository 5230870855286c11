"""The daemon's staking rules on the devnet, the bond made and unbonded with `provider bond`:
a provider whose bond is unbonding refuses a job that would close after the notice runs out
(no acceptance signed or sent: its escrow, sound, is released by a zero-unit receipt), and
`provider bond unbond` is refused while the daemon has an accepted job open (no transaction:
the bond stays active, the wallet as it was)."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from offchain.protocol.ledger.types import Just
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.txbuild import Clock
from provider.daemon.journal import Journal
from tests.market.client import serve
from tests.protocol.onchain import NOTICE_MS, balance, wallet
from tests.provider.chain import deployed
from tests.provider.daemon_harness import (
    ProviderProcess,
    consumer_of,
    fake_market_server,
    lock_escrow,
    new_provider,
    quiet_market,
    refusal,
    request_and_lock,
    safe_terms,
    spec,
    wait_container_running,
    wait_state,
)
from unchained.cli import app

cli = CliRunner()


async def bond_command(daemon: ProviderProcess, *args: str):
    """`unchained provider bond ARGS` for the daemon's provider (its config and chain)."""
    command = ["provider", "bond", *args, "--config", str(daemon.config),
               "--ogmios-url", daemon.devnet_url,
               "--deployment", str(daemon.deployment_file)]  # fmt: skip
    return await asyncio.to_thread(cli.invoke, app, command)  # the command runs its own loop


async def test_an_unbonding_provider_refuses_a_job_closing_after_its_notice(
    devnet, tmp_path, busybox
):  # fmt: skip
    deployment_file = tmp_path / "deployment.json"
    deployment = await deployed(devnet, deployment_file)
    with fake_market_server() as (url, pending, seen):
        daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url)
        for step in (("create", "400ADA"), ("unbond",)):
            done = await bond_command(daemon, *step)
            assert done.exit_code == 0, done.output
        consumer = await wallet(devnet)
        job = spec(busybox, "echo never")
        now = Clock.now(devnet.context()).tip_ms
        # closing after the notice that began a moment ago (less the refund window) ends
        terms = {**safe_terms(consumer, provider, job, now), "deadline": now + NOTICE_MS}
        escrow = await lock_escrow(devnet, deployment, consumer, terms)
        refused = await refusal(daemon, pending, "job_u", job, escrow, terms)
    assert "are refused (the consumer's refund window" in daemon.log()  # its warning at start
    assert "withdrawable from" in refused and "covers jobs closing before" in refused, refused
    covered = refused.split("covers jobs closing before ")[1].split(";")[0]
    assert f"jobs closing from {covered} on are refused" in daemon.log()  # the same cut-off
    (released,) = Journal(daemon.state_dir).entries()  # no acceptance: the bond is not at stake
    assert (released.job_id, released.receipt.units, released.stage) == ("job_u", 0, "delivered")
    # the market's state of the job read, then the release handed in; no acceptance
    assert [line for line in seen if "/jobs/" in line] == [
        "GET /jobs/job_u", "POST /jobs/job_u/failure"
    ]  # fmt: skip


async def test_unbond_is_refused_while_the_daemon_has_an_accepted_job(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path)
    with serve(settings) as url:
        daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url)
        made = await bond_command(daemon, "create", "400ADA")
        assert made.exit_code == 0, made.output
        try:
            await daemon.start().logged("offer published")
            async with consumer_of(devnet, url) as consumer:
                job = await request_and_lock(devnet, deployment, consumer,
                                             spec(busybox, "sleep 10"))  # fmt: skip
                await wait_state(consumer, job.job, {"running"})
                await wait_container_running(job.job)
                before = balance(devnet, provider.address)
                refused = await bond_command(daemon, "unbond")
                assert refused.exit_code != 0
                assert f"accepted jobs are open ({job.job}): unbond once they are settled" in (
                    refused.output
                ), refused.output
                assert balance(devnet, provider.address) == before  # no transaction, no fee
                found = bonds.bonds_of(devnet.context(), deployment, provider.address,
                                       provider.vkey)  # fmt: skip
                assert [not isinstance(d.unbonding_since, Just) for _, d in found] == [True]
        finally:
            daemon.stop()
            daemon.reap()  # the job still running: killed and cleaned up
