"""Batch jobs paid over a channel on the devnet market, end to end: the real market, the
provider's daemon (`unchained provider run`) and gateway (`unchained provider gateway`) as
processes, the renter's `unchained ...` commands as a user runs them, the real engine.

The renter opens a channel to the provider, then `job submit` runs 3 one-second jobs over it
(no escrow, no lock fee, no settle): each one's receipt and results are verified, the channel's
last IOU is the price times the seconds the provider's book says they ran, to the lovelace, and
the provider claims exactly that on chain. A job above the channel's room takes the escrow path
(saying why) and `--escrow` locks an escrow whatever the channel; through the SDK, a job above
the room is refused before anything is signed, and a job its renter never pays for is stopped
by the provider with the renter owing at most the provider's credit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import docker
import pytest

from consumer.sdk.channel_jobs import ChannelJobRefused, channel_job, deploy_job
from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.endpoint_client import GatewayControl
from consumer.sdk.keys import load_key
from consumer.sdk.rental_store import RentalStore
from consumer.sdk.store import JobStore
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.amounts import ADA
from provider.config import RunnerSettings
from provider.money.channel_book import ChannelBook
from provider.rentals.book import RentalBook, due_of, qualified
from provider.sandbox.runner import Runner
from tests.consumer.cli import run_json
from tests.consumer.test_pods_devnet import until
from tests.provider.daemon_harness import CORE_PRICE
from tests.provider.daemon_harness import spec as job_spec
from tests.provider.gateway_market import gateway_market
from tests.provider.test_channels_daemon import claimed

PRICE = CORE_PRICE  # per second: the offer's one-core bundle
CREDIT = 3 * PRICE
PROVIDER = {"bundles": 2, "channel_credit_lovelace": CREDIT, "channel_claim_interval_s": 2}
DEPOSIT_ADA = 30
JOBS = 3


@pytest.fixture
def renter_cli(tmp_path: Path):
    def cli(env: dict[str, str], *args: str) -> tuple[int, dict]:
        return run_json(env, *args, cwd=tmp_path)

    return cli


async def test_jobs_over_a_channel_on_the_devnet_market(devnet, tmp_path, busybox, renter_cli):
    async with gateway_market(devnet, tmp_path, 300 * ADA, **PROVIDER) as on:
        daemon, deployment, state, env = on.daemon, on.deployment, on.state, on.env
        book = RentalBook.in_state_dir(daemon.state_dir)
        channels = ChannelBook.in_state_dir(daemon.state_dir, deployment.network_id,
                                            deployment.channel_hash, CREDIT)  # fmt: skip
        try:
            code, offers = await asyncio.to_thread(renter_cli, env, "offers", "search")
            assert code == 0, offers
            provider_id = offers["offers"][0]["provider_id"]
            code, opened = await asyncio.to_thread(
                renter_cli, env, "channel", "open", "--provider", provider_id, "--deposit",
                str(DEPOSIT_ADA), "--close-period", "1h", "--yes",
            )  # fmt: skip
            assert code == 0, opened
            channel = opened["channel_id"]
            small = tmp_path / "small.json"
            small.write_text(json.dumps(job_spec(busybox, "echo done > /out/r.txt", seconds=5)))

            # 3 one-second jobs over the channel, each verified
            names = []
            for _ in range(JOBS):
                code, ran = await asyncio.to_thread(renter_cli, env, "job", "submit", str(small),
                                                    "--yes")  # fmt: skip
                assert code == 0, ran
                assert (ran["path"], ran["channel_id"], ran["state"]) == (
                    "channel",
                    channel,
                    "stopped",
                ), ran
                assert ran["reason"] == "job succeeded: exit code 0" and ran["units"] == 1
                assert (tmp_path / ran["unpacked"] / "r.txt").read_text() == "done\n"
                names.append(ran["job"])
            renter = load_key(on.key).vkey
            rows = [book.get(qualified(renter, name)) for name in names]
            owed = sum(due_of(row, row.stopped_ms) for row in rows)  # the provider's book
            assert owed == PRICE * JOBS == ChannelStore(state).signed(channel)
            assert JobStore(state).all() == []  # their quotes, never locked, are no spend
            await claimed(channels, bytes.fromhex(channel), owed)  # on chain, to the lovelace

            # above the room: the escrow path, saying why; --escrow locks one whatever the room
            big = tmp_path / "big.json"
            big.write_text(json.dumps(job_spec(busybox, "true", seconds=DEPOSIT_ADA)))
            code, locked = await asyncio.to_thread(renter_cli, env, "job", "submit", str(big),
                                                   "--yes", "--detach")  # fmt: skip
            assert code == 0, locked
            assert locked["path"] == "escrow" and locked["escrow"], locked
            assert "more than the" in locked["why_escrow"] and channel[:16] in locked["why_escrow"]
            code, forced = await asyncio.to_thread(renter_cli, env, "job", "submit", str(small),
                                                   "--yes", "--escrow", "--detach")  # fmt: skip
            assert code == 0, forced
            assert (forced["path"], forced["why_escrow"]) == ("escrow", "--escrow")
            assert forced["escrow"] and forced["lock_fee"] > 0
            assert ChannelStore(state).signed(channel) == owed  # the channel paid neither
            results = daemon.state_dir / "results"
            for escrowed in (locked["job_id"], forced["job_id"]):  # the escrowed jobs ran too
                await until(lambda job=escrowed: (results / job / "result.json").exists(),
                            timeout_s=90, what=f"escrowed job {escrowed} never ran")  # fmt: skip

            await refused_and_unpaid(state, on.key, deployment, channel, book, busybox, owed,
                                     daemon)  # fmt: skip
        finally:
            channels.close()
            book.close()


async def refused_and_unpaid(state: Path, key: Path, deployment, channel: str, book: RentalBook,
                             busybox: str, signed: int, daemon) -> None:  # fmt: skip
    """Through the SDK: a job above the room is refused before anything is signed; a job
    never paid for is stopped by the provider, its renter owing at most the credit."""
    store = ChannelStore(state)
    record = store.get(channel)
    gateway_url = json.loads(next((state / "deployments").glob("*.json")).read_text())[
        "gateway_url"
    ]
    rentals = RentalStore(state)
    with GatewayControl(gateway_url, load_key(key), deployment.network_id) as control:
        left = record.funded - signed
        above = channel_job(JobSpec.model_validate(job_spec(busybox, "true", seconds=60)), PRICE)
        with pytest.raises(ChannelJobRefused, match="nothing was signed"):
            deploy_job(control, rentals, "above", above, record, left, gateway_url, None)
        renter = load_key(key).vkey
        assert book.get(qualified(renter, "above")) is None and store.signed(channel) == signed

        unpaid = channel_job(JobSpec.model_validate(job_spec(busybox, "sleep 60", 20)), PRICE)
        deploy_job(control, rentals, "unpaid", unpaid, record, left, gateway_url, None)
        unpaid_row = qualified(renter, "unpaid")
        await until(lambda: (row := book.get(unpaid_row)) is not None and row.state == "stopped",
                    timeout_s=60, what="the provider did not stop the unpaid job")  # fmt: skip
    row = book.get(unpaid_row)
    assert row.reason.startswith("IOUs lag: "), row
    owes = due_of(row, row.stopped_ms)
    assert 0 < owes <= CREDIT + PRICE  # the credit, and the second in which it lagged
    assert store.signed(channel) == signed  # nothing signed for it
    runner = Runner(docker.from_env(), RunnerSettings(state_dir=daemon.state_dir))
    await until(lambda: runner.leftovers() == {"containers": [], "workspaces": [], "cgroups": []},
                timeout_s=60, what="the stopped job left something")  # fmt: skip
