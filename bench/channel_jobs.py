"""The cost of 100 one-second batch jobs both ways, on the devnet market with the real
provider daemon, gateway and engine (issue 33): over an escrow each, and over one payment
channel.

- Over a channel: the renter opens a channel with `unchained channel open` (its fee read from
  the block), then runs N one-second jobs with the very path `job submit` takes over a channel
  (`consumer.cli.channel_job.run_over_channel`: deploy, pay the exact due each round, fetch and
  verify receipt and results), each timed; the channel's last IOU is checked against the
  provider's book, to the lovelace. Then its fees: the provider's claim of that last IOU
  (built and evaluated), the renter's start of the close and its drain after the close period
  (real transactions, the fees they paid): all amortised over the N jobs.
- Over escrows: one job submitted with `job submit --escrow` (a real quote and lock: its lock
  fee and fee allowance), and the settle fee per escrow in the largest batch
  (bench/results/contracts.json); each job pays its lock fee and its fee allowance (which
  pays its settle share; the settler keeps the rest).

Prints a table and writes bench/results/channel_jobs.json.
Run: .venv/bin/python -m bench.channel_jobs [--jobs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import docker

from bench.contracts import cost
from consumer.cli.channel_job import ChannelRoute, run_over_channel
from consumer.sdk.channel_jobs import channel_job
from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.channels import Channels
from consumer.sdk.keys import load_key
from devnet.process import DevnetProcess
from offchain.chain.follower import tip_point
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.tx import channel as channels
from provider.images import recipes as images
from provider.money.channel_book import ChannelBook
from provider.rentals.book import RentalBook, due_of, qualified
from tests.consumer.cli import run_json, tx_fee
from tests.protocol.onchain import travel_to
from tests.provider.daemon_harness import CORE_PRICE
from tests.provider.daemon_harness import spec as job_spec
from tests.provider.gateway_market import gateway_market
from tests.provider.test_channels_daemon import claimed

RESULTS = Path(__file__).parent / "results" / "channel_jobs.json"
CONTRACTS = RESULTS.with_name("contracts.json")  # bench/contracts.py's settle costs
PRICE = CORE_PRICE  # lovelace per second of the offer's one-core bundle
MAX_S = 5  # each job's max duration: its most cost is 5 s, the channel keeps room for it
assert PRICE % ADA == 0  # the deposit is whole ADA on the command line
CLOSE_PERIOD = "1h"  # the least a provider takes by default


async def measure(jobs: int, workdir: Path) -> dict[str, Any]:
    devnet = DevnetProcess(workdir / "devnet").start()
    try:
        return await on_market(devnet, jobs, workdir)
    finally:
        devnet.stop()


async def on_market(devnet: DevnetProcess, jobs: int, workdir: Path) -> dict[str, Any]:
    busybox = images.busybox_image(docker.from_env())
    renter_lovelace = (jobs * PRICE) * 2 + 200 * ADA
    settings = {"bundles": 2, "channel_credit_lovelace": 3 * PRICE}
    async with gateway_market(devnet, workdir, renter_lovelace, **settings) as on:
        daemon, deployment, state, provider = on.daemon, on.deployment, on.state, on.provider

        def cli(*args: str) -> dict[str, Any]:
            code, answer = run_json(on.env, *args, cwd=workdir)
            assert code == 0, answer
            return dict(answer)

        spec_file = workdir / "one_second.json"
        spec_file.write_text(json.dumps(job_spec(busybox, "echo ok > /out/r", MAX_S)))
        provider_id = (await asyncio.to_thread(cli, "offers", "search"))["offers"][0]["provider_id"]
        escrowed = await asyncio.to_thread(
            cli, "job", "submit", str(spec_file), "--escrow", "--yes", "--detach"
        )
        deposit = jobs * PRICE + MAX_S * PRICE  # every job's second and one's most cost
        since = await tip_point(devnet.url)
        opened = await asyncio.to_thread(
            cli, "channel", "open", "--provider", provider_id, "--deposit",
            str(deposit // ADA), "--close-period", CLOSE_PERIOD, "--yes",
        )  # fmt: skip
        open_fee = await tx_fee(devnet, opened["tx_id"], since)
        sdk = Channels(load_key(on.key), devnet.context(), devnet.url, deployment,
                       ChannelStore(state))  # fmt: skip
        wanted = channel_job(JobSpec.model_validate_json(spec_file.read_text()), PRICE)
        record = sdk.store.get(opened["channel_id"])
        gateway_url = on.gateway_url
        walls, names = [], []
        for n in range(jobs):
            start = time.perf_counter()
            chosen = ChannelRoute(record, sdk.status(record.channel_id), gateway_url, wanted)
            final, result = await asyncio.to_thread(
                run_over_channel, sdk, chosen, state, workdir / "results" / str(n),
                lambda line: None,
            )  # fmt: skip
            assert final["state"] == "stopped" and result.units == 1, final
            walls.append(time.perf_counter() - start)
            names.append(final["name"])
        book = RentalBook.in_state_dir(daemon.state_dir)
        renter = load_key(on.key).vkey
        rows = [book.get(qualified(renter, name)) for name in names]
        billed = sum(due_of(row, row.stopped_ms) for row in rows if row)
        book.close()
        signed = sdk.store.signed(record.channel_id)
        assert billed == signed == jobs * PRICE, (billed, signed)
        live = sdk.live(record)
        iou = sdk.signer(record.channel_id).last
        assert iou is not None
        claim = channels.claim_channels(
            devnet.context(), deployment, [(live, iou)], provider.address
        )
        claim_fee = (await cost(devnet, provider.sign(claim)))["fee_lovelace"]
        started = await asyncio.to_thread(cli, "channel", "close", record.channel_id)
        book = ChannelBook.in_state_dir(daemon.state_dir, deployment.network_id,
                                        deployment.channel_hash, 0)  # fmt: skip
        await claimed(book, bytes.fromhex(record.channel_id), signed, timeout_s=120)
        book.close()  # the provider claimed it: the drain races nothing
        await travel_to(devnet, int(started["closing_at"]) + 1)
        drained = await asyncio.to_thread(cli, "channel", "close", record.channel_id)
        results = daemon.state_dir / "results" / escrowed["job_id"] / "result.json"
        for _ in range(300):  # the escrowed job runs before the daemon stops
            if results.exists():
                break
            await asyncio.sleep(0.2)
    settle_fee = json.loads(CONTRACTS.read_text())["settle_fee_per_escrow_lovelace"]
    return figures(jobs, escrowed, settle_fee, open_fee, claim_fee, started["fee"],
                   drained["fee"], walls)  # fmt: skip


def figures(
    jobs: int, escrowed: dict[str, Any], settle_fee: int, open_fee: int, claim_fee: int,
    close_fee: int, drain_fee: int, walls: list[float],
) -> dict[str, Any]:  # fmt: skip
    """Both ways' costs for `jobs` one-second jobs, lovelace, from the measured fees."""
    lock_fee, allowance = int(escrowed["lock_fee"]), int(escrowed["fee_allowance"])
    compute = jobs * PRICE
    escrow_fees = jobs * (lock_fee + allowance)
    channel_fees = open_fee + claim_fee + close_fee + drain_fee
    renter_fees = open_fee + close_fee + drain_fee  # the provider pays its claim's fee
    per_job = -(-renter_fees // jobs)
    return {
        "jobs": jobs,
        "price_per_second_lovelace": PRICE,
        "compute_lovelace": compute,
        "escrow": {
            "lock_fee_lovelace": lock_fee,
            "fee_allowance_lovelace": allowance,
            "settle_fee_share_lovelace": settle_fee,
            "per_job_beyond_compute_lovelace": lock_fee + allowance,
            "renter_pays_lovelace": compute + escrow_fees,
            "chain_fees_lovelace": jobs * (lock_fee + settle_fee),
            "transactions": f"{jobs} locks + settles (batched)",
        },
        "channel": {
            "open_fee_lovelace": open_fee,
            "claim_fee_lovelace": claim_fee,
            "start_close_fee_lovelace": close_fee,
            "drain_fee_lovelace": drain_fee,
            "fees_lovelace": channel_fees,
            "per_job_beyond_compute_lovelace": per_job,
            "renter_pays_lovelace": compute + renter_fees,
            "chain_fees_lovelace": channel_fees,
            "transactions": "1 open + 1 claim + start close + drain",
            "job_wall_s_median": round(statistics.median(walls), 3),
            "job_wall_s_max": round(max(walls), 3),
        },
        "saved_per_job_lovelace": lock_fee + allowance - per_job,  # the renter's
    }


def table(results: dict[str, Any]) -> str:
    escrow, channel = results["escrow"], results["channel"]
    jobs = results["jobs"]
    lines = [
        f"{jobs} one-second jobs at {results['price_per_second_lovelace']:,} lovelace per second "
        f"({results['compute_lovelace']:,} lovelace of compute)",
        f"{'way':<10}{'renter pays':>16}{'beyond compute':>18}{'per job':>12}{'chain fees':>14}",
    ]
    for name, row in (("escrows", escrow), ("channel", channel)):
        beyond = row["renter_pays_lovelace"] - results["compute_lovelace"]
        lines.append(
            f"{name:<10}{row['renter_pays_lovelace']:>16,}{beyond:>18,}"
            f"{row['per_job_beyond_compute_lovelace']:>12,}{row['chain_fees_lovelace']:>14,}"
        )
    lines += [
        f"escrow per job: lock fee {escrow['lock_fee_lovelace']:,} + fee allowance "
        f"{escrow['fee_allowance_lovelace']:,} (pays its settle share "
        f"{escrow['settle_fee_share_lovelace']:,})",
        f"channel: open {channel['open_fee_lovelace']:,} + claim {channel['claim_fee_lovelace']:,}"
        f" + start close {channel['start_close_fee_lovelace']:,} + drain "
        f"{channel['drain_fee_lovelace']:,}, for all {jobs}",
        f"channel job wall time (deploy to verified results): median "
        f"{channel['job_wall_s_median']} s, max {channel['job_wall_s_max']} s",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="one-second jobs over the channel")
    args = parser.parse_args()
    logging.getLogger("PyCardano").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(measure(args.jobs, Path(tmp)))
    print(table(results))
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
