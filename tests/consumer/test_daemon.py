"""The consumer's CLI against the real provider daemon (`unchained provider run` in its own
process, jobs in the docker engine), the real market and the devnet: what the scripted
provider cannot show. `job submit --yes` to a job the daemon runs, delivers and is paid for,
then `job results` verified against the daemon's own receipt, beside it a job killed at its
time limit (timed out, exit 137, billed its max duration) and one whose program exits 3
(failed, billed what it ran): settled, never shown as a plain success, each with its log tail
in `job status`, the balance exact to the lovelace; and the daemon SIGKILLed after it
accepted one job (slashed) with a second job locked on its still-listed offer that it never
starts (refunded), both by the CLI."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import httpx
import pytest
import yaml

from consumer.sdk.store import JobStore
from offchain.chain.follower import tip_point
from offchain.protocol.ledger.split import settle_split, slash_share
from offchain.protocol.tx.deployment import Deployment
from provider.images import recipes as images
from tests.consumer.cli import cli_env, funded_key, run, run_json, tx_fee
from tests.consumer.conftest import Market
from tests.consumer.test_sdk import travel_past
from tests.market.client import Party, serve
from tests.protocol.onchain import BOND, balance, post_bond
from tests.provider.chain import SLASH_SHARE_BPS
from tests.provider.daemon_harness import (
    IDENTITY,
    ProviderProcess,
    new_provider,
    settling_market,
    spec,
    wait_state,
)

TIME_LIMIT_S = 3  # the timed-out job's max_duration_s: its command sleeps far longer


@pytest.fixture(scope="module")
def busybox() -> str:
    return images.busybox_image(docker.from_env())


async def daemon_world(devnet, tmp_path, bonded: bool):
    """A deployment, a market settling from its own wallet and a started daemon (2 slots),
    its provider bonded if `bonded`."""
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    with serve(settings) as url:
        daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url)
        if bonded:
            await post_bond(devnet, deployment, provider)
        try:
            await daemon.start().logged("offer published")
            yield deployment, Market(settings, url, deployment_file), daemon
        finally:
            daemon.stop()
            daemon.reap()


World = tuple[Deployment, Market, ProviderProcess]


@pytest.fixture
async def world(devnet, tmp_path, busybox) -> AsyncIterator[World]:
    async for made in daemon_world(devnet, tmp_path, bonded=False):
        yield made


@pytest.fixture
async def bonded_world(devnet, tmp_path, busybox) -> AsyncIterator[World]:
    async for made in daemon_world(devnet, tmp_path, bonded=True):
        yield made


def submit(env: dict[str, str], cwd: Path, name: str, job: dict) -> dict:
    """`unchained job submit NAME.yaml --yes --json`: the quote summary, once funded."""
    (cwd / f"{name}.yaml").write_text(yaml.safe_dump(job))
    done = run(env, "job", "submit", f"{name}.yaml", "--yes", "--json", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def here(tmp_path):
    """The CLI's working directory: not tmp_path, where the daemon's `provider` state folder
    would shadow the package of that name for `python -m`."""
    made = tmp_path / "consumer"
    made.mkdir()
    return made


async def test_submit_to_results_the_daemon_ran_and_signed(devnet, world, busybox, here):
    _, market, daemon = world
    funded, key = await funded_key(devnet, here, 200_000_000)
    env = cli_env(market, devnet, key, here / "state", IDENTITY)
    start = balance(devnet, funded.address)
    since = await tip_point(devnet.url)
    script = "echo started; sleep 2; echo 42 > /out/answer; echo done"
    job = submit(env, here, "job", spec(busybox, script))
    slow = submit(env, here, "slow", spec(busybox, "echo started; echo still going; sleep 60",
                                          seconds=TIME_LIMIT_S))  # fmt: skip

    async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
        status = await wait_state(Party.new(http, IDENTITY, funded), job["job_id"], {"settled"},
                                  timeout_s=120)  # fmt: skip
    # the daemon's two slots: the third job once the first has freed its own
    failing = submit(env, here, "failing", spec(busybox, "echo about to fail; sleep 1; exit 3"))
    code, result = run_json(env, "job", "results", job["job_id"], "--out", "res", cwd=here)
    assert code == 0, result
    assert result["sha256"] == status["result_sha256"]
    assert result["units"] == status["receipt_units"] >= 2
    assert (here / "res" / "out" / "answer").read_text() == "42\n"
    assert f"job {job['job_id']}" in daemon.log()
    ended = await outcomes(env, here, market, funded, slow, failing)
    code, listed = run_json(env, "job", "list", cwd=here)
    assert [(row["job_id"], row["state"], row["where"], row["outcome"], row["exit_code"])
            for row in listed] == [
        (job["job_id"], "settled", "both", "succeeded", 0),
        (slow["job_id"], "settled", "both", "timeout", 137),
        (failing["job_id"], "settled", "both", "failed", 3),
    ]  # fmt: skip
    table = run({**env, "COLUMNS": "300"}, "job", "list", cwd=here)  # no cell wraps
    for shown in ("settled: timed out (exit 137)", "settled: failed (exit 3)"):
        assert shown in table.stdout, table.stdout + table.stderr
    code, elsewhere = run_json(env, "job", "list", "--state-dir", "other", cwd=here)
    assert [row["where"] for row in elsewhere] == ["market"] * 3  # not recorded there

    spent = 0
    for submitted, units in [(job, result["units"]), *ended]:
        fee = await tx_fee(devnet, submitted["lock_tx"], since)
        split = settle_split(submitted["lock_lovelace"], submitted["price_per_unit"], units,
                             submitted["max_units"], submitted["fee_allowance"])  # fmt: skip
        assert split.consumer == (submitted["lock_lovelace"] - submitted["fee_allowance"]
                                  - units * submitted["price_per_unit"])  # fmt: skip
        spent += fee + submitted["lock_lovelace"] - split.consumer
    assert balance(devnet, funded.address) == start - spent


async def outcomes(
    env: dict[str, str], here: Path, market: Market, funded, slow: dict, failing: dict
) -> list[tuple[dict, int]]:
    """The timed-out and the failed job, settled: what `job status` (JSON and text, the last
    log lines included) and the live display's last line say; each job with its units."""
    async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
        party = Party.new(http, IDENTITY, funded)
        for submitted in (slow, failing):
            await wait_state(party, submitted["job_id"], {"settled"}, timeout_s=120)
    code, timed_out = run_json(env, "job", "status", slow["job_id"], cwd=here)
    assert code == 0, timed_out
    assert (timed_out["state"], timed_out["outcome"], timed_out["exit_code"]) == (
        "settled", "timeout", 137)  # fmt: skip
    assert timed_out["receipt_units"] == TIME_LIMIT_S  # billed to its limit
    assert timed_out["log_tail"] == ["started", "still going"]
    text = run(env, "job", "status", slow["job_id"], cwd=here).stdout
    assert f"outcome  timed out after {TIME_LIMIT_S} s (exit 137)" in text, text
    assert "last 2 log line(s):\n    started\n    still going" in text, text
    watched = run(env, "job", "status", slow["job_id"], "--watch", cwd=here).stdout
    assert f"ended settled: timed out after {TIME_LIMIT_S} s (exit 137)" in watched, watched
    code, failed = run_json(env, "job", "status", failing["job_id"], cwd=here)
    assert (failed["state"], failed["outcome"], failed["exit_code"]) == ("settled", "failed", 3)
    # billed from the engine's StartedAt, stamped once the start call returns: a busy engine
    # stamps it late, so `sleep 1` can meter under a second (1 unit)
    assert failed["log_tail"] == ["about to fail"] and 1 <= failed["receipt_units"] <= 3
    text = run(env, "job", "status", failing["job_id"], cwd=here).stdout
    assert f"outcome  failed after {failed['receipt_units']} s (exit 3)" in text, text
    return [(slow, TIME_LIMIT_S), (failing, failed["receipt_units"])]


async def test_killed_after_accepting_is_slashed_and_never_started_is_refunded(
    devnet, bonded_world, busybox, here
):
    _, market, daemon = bonded_world
    funded, key = await funded_key(devnet, here, 300_000_000)
    env = cli_env(market, devnet, key, here / "state", IDENTITY)
    start = balance(devnet, funded.address)
    since = await tip_point(devnet.url)
    async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
        party = Party.new(http, IDENTITY, funded)
        accepted = submit(env, here, "long", spec(busybox, "echo started; sleep 600"))
        await wait_state(party, accepted["job_id"], {"running"})
        daemon.signal(signal.SIGKILL)  # the provider disappears holding a signed acceptance
        daemon.wait(10)
        # its offer is still listed (heartbeats count for a while): a second job is locked
        never = submit(env, here, "never", spec(busybox, "echo never"))
        assert (await wait_state(party, never["job_id"], {"funded"}))["state"] == "funded"

        store = JobStore(here / "state")
        closes = [store.get(job["job_id"]).datum.close for job in (accepted, never)]
        await travel_past(devnet, max(closes))
        code, slashed = run_json(env, "job", "slash", accepted["job_id"], cwd=here)
        assert code == 0, slashed
        code, refused = run_json(env, "job", "slash", never["job_id"], cwd=here)
        assert code == 1 and "never accepted" in refused["message"], refused
        code, refunded = run_json(env, "job", "refund", never["job_id"], cwd=here)
        assert code == 0, refunded
        assert "not settled by its close" in refunded["why"], refunded
        await wait_state(party, accepted["job_id"], {"slashed"})
        await wait_state(party, never["job_id"], {"refunded"})

    locks = [await tx_fee(devnet, job["lock_tx"], since) for job in (accepted, never)]
    fees = sum(locks) + slashed["fee"] + refunded["fee"]
    share = slash_share(BOND, SLASH_SHARE_BPS)
    assert balance(devnet, funded.address) == start - fees + share
