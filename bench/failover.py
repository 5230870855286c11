"""Failover's chain side (issue 36), measured on a devnet of the realistic profile (Praos's
blocks, one every 0.5 s on average: mainnet's 20 s scaled down 40 times) with the real
builders:

- what a start deadline costs: the lock, the provider's Start (memory, cpu, fee, bytes: the
  provider pays it), the renter's early refund, and the escrow script's size;
- how long a silent provider holds a renter's money: from the lock's block to the early
  refund's block, and the refund's blocks after the start deadline (the first block past it
  counts 1; target: 3 at most). The refund is the SDK's: built and signed ahead (valid from
  the first slot past the deadline), submitted when a chain-sync follower shows a block past
  it (`consumer.sdk.escrow_watch`);
- the chain part of a failover: from the start deadline passing with the provider silent to
  the job's new escrow Started by another provider: the early refund, a new lock from the
  money that came back, the second provider's Start, each waiting for its block;
- a whole failover on the devnet market (`--market`): real daemons and docker, a provider
  killed once it offered, the renter's SDK (`job submit --failover 1`): from the first lock
  (the provider silent from there) to the job running on the other provider, how long the
  money was held and the refund's blocks after the start deadline, with a start deadline
  `--start-within-s` (20 s by default).

Each chain round locks with a start deadline `--start-ms` after the lock's tip. Prints a table
and writes bench/results/failover.json. Run: .venv/bin/python -m bench.failover
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
from pycardano import Transaction, UTxO

from bench.contracts import ALLOWANCE, LOCKED, MAX_UNITS, PRICE, cost, deployed, wallet
from consumer.sdk.escrow_watch import tips
from consumer.sdk.failover import submit_with_failover
from devnet.process import DevnetProcess
from offchain.chain.follower import Point, RollForward, follow
from offchain.chain.submit import submit_and_wait, tip_point
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.tx import batch as batches
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Clock, Wallet
from provider.images.recipes import busybox_image
from tests.market.client import serve
from tests.protocol.onchain import holding_block, output, to_settle
from tests.provider.daemon_harness import provider_in, renter, settling_market, spec

RESULTS = Path(__file__).parent / "results" / "failover.json"
POLL_S = 0.05  # how often the bench reads the renter's store and the market


async def included(devnet: DevnetProcess, tx: Transaction) -> dict[str, Any]:
    """Submit `tx` and wait for its block (returned: its height and slot)."""
    return await submit_and_wait(devnet.url, tx, timeout_s=60)


async def lock(
    devnet: DevnetProcess, deployment: Deployment, renter: Wallet, provider: Wallet, start_ms: int
) -> tuple[UTxO, Transaction, dict[str, Any]]:
    """An escrow for `provider` to Start within `start_ms` of the tip, its lock and block."""
    context = devnet.context()
    now = Clock.now(context).tip_ms
    datum = escrows.new_escrow(
        renter.address, provider.address, provider.vkey, PRICE, MAX_UNITS, now + 10 * start_ms,
        60_000, bytes(32), ALLOWANCE, now + start_ms,
    )  # fmt: skip
    tx = renter.sign(escrows.lock(context, deployment, renter.address, datum, LOCKED))
    block = await included(devnet, tx)
    return output(tx, escrows.ESCROW_OUTPUT), tx, block


async def first_block_after(devnet: DevnetProcess, posix_ms: int) -> None:
    """The renter's wait, as the SDK waits (`consumer.sdk.escrow_watch.tips`): until a block
    later than `posix_ms` is the chain's tip, learned from the chain-sync follower."""
    first = Clock.now(devnet.context()).first_slot_after(posix_ms)
    async with contextlib.aclosing(tips(devnet.url)) as chain:
        async for tip in chain:
            if tip >= first:
                return


async def first_height_after(devnet: DevnetProcess, since: Point, posix_ms: int) -> int:
    """The height of the first block later than `posix_ms`, followed from `since` (the chain
    read afterwards: what the count of blocks after a deadline starts from)."""
    first = Clock.now(devnet.context()).first_slot_after(posix_ms)
    async with contextlib.aclosing(follow(devnet.url, [since, "origin"])) as events:
        async for event in events:
            if isinstance(event, RollForward) and event.block["slot"] >= first:
                return int(event.block["height"])
    raise AssertionError("a chain follower never ends")


async def round_trip(
    devnet: DevnetProcess, deployment: Deployment, start_ms: int
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One failover: provider A accepts in silence, the renter refunds early and locks again
    for provider B, who Starts. Returns the timeline and each transaction's cost."""
    renter, silent, second = [await wallet(devnet) for _ in range(3)]
    escrow, locked_tx, lock_block = await lock(devnet, deployment, renter, silent, start_ms)
    deadline = escrows.escrow_datum(deployment, escrow).start_deadline
    clock = Clock.now(devnet.context())
    time_of = clock.time.slot_to_posix_ms
    ahead = escrows.refund(devnet.context(), deployment, escrow, renter.address,
                           clock.first_slot_after(deadline))  # fmt: skip
    refund = renter.sign(ahead)  # built and signed ahead, as the SDK does
    refund_cost = await cost(devnet, refund)
    await first_block_after(devnet, deadline)
    wall = time.monotonic()
    refund_block = await included(devnet, refund)
    past = await first_height_after(devnet, point(lock_block), deadline)
    again, _, _ = await lock(devnet, deployment, renter, second, start_ms)
    start = second.sign(escrows.start(devnet.context(), deployment, again, second.address))
    start_cost = await cost(devnet, start)
    start_block = await included(devnet, start)
    timeline = {
        "money_held_ms": time_of(refund_block["slot"]) - time_of(lock_block["slot"]),
        "refund_blocks_after_start_deadline": refund_block["height"] - past + 1,
        "refund_after_start_deadline_ms": time_of(refund_block["slot"]) - deadline,
        "failover_chain_ms": time_of(start_block["slot"]) - deadline,
        "failover_wall_ms": round((time.monotonic() - wall) * 1000),
    }
    started = output(start, escrows.ESCROW_OUTPUT)
    receipt = to_settle(deployment, second.key, started, 1_000, bytes(32), bytes(32))
    settle = renter.sign(batches.settle(devnet.context(), deployment, [receipt], renter.address))
    settle_cost = await cost(devnet, settle)
    await included(devnet, settle)
    costs = {
        "lock": plain_cost(locked_tx),
        "start": start_cost,
        "early_refund": refund_cost,
        "settle_started": settle_cost,
        "refund_after_close": await refund_after_close(devnet, deployment, renter, second),
    }
    return timeline, costs


async def refund_after_close(
    devnet: DevnetProcess, deployment: Deployment, renter: Wallet, provider: Wallet
) -> dict[str, Any]:
    """The cost of a plain refund (an escrow without a start deadline, its consumer's in the
    refund window), to set beside bench/contracts.py's from before the start deadline."""
    context = devnet.context()
    now = Clock.now(context).tip_ms
    datum = escrows.new_escrow(
        renter.address, provider.address, provider.vkey, PRICE, MAX_UNITS, now + 1_000, 1_000,
        bytes(32), ALLOWANCE,
    )  # fmt: skip
    tx = renter.sign(escrows.lock(context, deployment, renter.address, datum, LOCKED))
    await included(devnet, tx)
    await first_block_after(devnet, datum.close)
    escrow = output(tx, escrows.ESCROW_OUTPUT)
    refund = renter.sign(escrows.refund(devnet.context(), deployment, escrow, renter.address))
    measured = await cost(devnet, refund)
    await included(devnet, refund)
    return measured


def point(block: dict[str, Any]) -> Point:
    """The chain-sync point of a block Ogmios gave."""
    return {"slot": block["slot"], "id": block["id"]}


def plain_cost(tx: Transaction) -> dict[str, Any]:
    """A transaction no script runs in: its fee and size."""
    return {"memory": 0, "cpu": 0, "fee_lovelace": tx.transaction_body.fee,
            "tx_bytes": len(tx.to_cbor())}  # fmt: skip


async def market_round(devnet: DevnetProcess, tmp: Path, start_within_s: int) -> dict[str, int]:
    """One failover through the market (see the module's doc): chain times of the first lock,
    its early refund and the second job's "running" (the tip when the market showed it)."""
    deployment_file, deployment, settings = await settling_market(devnet, tmp)
    job_spec = JobSpec.model_validate(spec(busybox_image(docker.from_env()), "sleep 5"))
    with serve(settings) as url:
        silent = await provider_in(devnet, tmp, "silent", deployment_file, url)
        silent.stop()  # killed once it offered: matched while its heartbeat is fresh
        second = None
        try:
            async with renter(devnet, deployment, url, tmp / "renter") as consumer:
                since = await tip_point(devnet.url)
                failover = asyncio.create_task(
                    submit_with_failover(consumer, job_spec, 1, start_within_s)
                )
                while not any(r.escrow for r in consumer.store.all()):
                    await asyncio.sleep(POLL_S)
                second = await provider_in(devnet, tmp, "second", deployment_file, url)
                while len(records := [r for r in consumer.store.all() if r.escrow]) < 2:
                    await asyncio.sleep(POLL_S)
                again = max(records, key=lambda r: r.created_ms).job_id
                while (await consumer.status(again)).state != "running":
                    await asyncio.sleep(POLL_S)
                running_ms = Clock.now(devnet.context()).tip_ms
                attempts = await failover  # the run, its receipt and settle: watched to its end
                assert [a.outcome for a in attempts] == ["refunded early", "ran"], attempts
        finally:
            for daemon in (silent, second):
                if daemon is not None:
                    daemon.stop()
                    daemon.reap()  # what its jobs left: containers, mounted workspaces
    (first,) = [r for r in consumer.store.all() if r.job_id == attempts[0].job_id]
    assert first.lock_tx_id is not None and attempts[0].refund_tx is not None
    time_of = Clock.now(devnet.context()).time.slot_to_posix_ms
    locked = await holding_block(devnet, first.lock_tx_id, since)
    refunded = await holding_block(devnet, attempts[0].refund_tx, since)
    deadline = first.datum.start_deadline
    past = await first_height_after(devnet, point(locked), deadline)
    return {
        "money_held_ms": time_of(refunded["slot"]) - time_of(locked["slot"]),
        "refund_blocks_after_start_deadline": refunded["height"] - past + 1,
        "refund_after_start_deadline_ms": time_of(refunded["slot"]) - first.datum.start_deadline,
        "silent_to_running_ms": running_ms - time_of(locked["slot"]),
        "start_deadline_to_running_ms": running_ms - first.datum.start_deadline,
    }


async def measure(rounds: int, start_ms: int, market: int, start_within_s: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        devnet = DevnetProcess.realistic(Path(tmp) / "data").start()
        try:
            deployment = await deployed(devnet)
            measured = [await round_trip(devnet, deployment, start_ms) for _ in range(rounds)]
            whole = [
                await market_round(devnet, Path(tmp) / f"market{n}", start_within_s)
                for n in range(market)
            ]
        finally:
            devnet.stop()
    timelines = [t for t, _ in measured]
    return {
        "market": {
            "rounds": market,
            "start_within_s": start_within_s,
            "median": _median(whole),
            "worst": _worst(whole),
            "timelines": whole,
        },
        "start_deadline_ms": start_ms,
        "rounds": rounds,
        "profile": "realistic, 25 ms slots (one block per 0.5 s on average)",
        "script_bytes": {"escrow": len(deployment.escrow_script)},
        "median": _median(timelines),
        "worst": _worst(timelines),
        "timelines": timelines,
        "actions": measured[-1][1],
    }


def _median(rows: list[dict[str, int]]) -> dict[str, int]:
    return {k: int(statistics.median(r[k] for r in rows)) for k in rows[0]} if rows else {}


def _worst(rows: list[dict[str, int]]) -> dict[str, int]:
    return {k: max(r[k] for r in rows) for k in rows[0]} if rows else {}


def table(results: dict[str, Any]) -> str:
    lines = [f"{'action':<16}{'memory':>12}{'cpu':>16}{'fee (lovelace)':>16}{'bytes':>8}"]
    for name, row in results["actions"].items():
        lines.append(
            f"{name:<16}{row['memory']:>12,}{row['cpu']:>16,}{row['fee_lovelace']:>16,}"
            f"{row['tx_bytes']:>8,}"
        )
    lines.append(f"escrow script: {results['script_bytes']['escrow']:,} B")
    lines.append(
        f"{'over ' + str(results['rounds']) + ' rounds, start deadline ' + str(results['start_deadline_ms']) + ' ms':<58}{'median':>10}{'worst':>10}"  # noqa: E501
    )
    for key in results["median"]:
        lines.append(f"{key:<58}{results['median'][key]:>10,}{results['worst'][key]:>10,}")
    market = results["market"]
    if market["rounds"]:
        lines.append(f"the market, {market['rounds']} round(s), start within "
                     f"{market['start_within_s']} s:")  # fmt: skip
        for key in market["median"]:
            lines.append(f"{key:<58}{market['median'][key]:>10,}{market['worst'][key]:>10,}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="failovers to measure")
    parser.add_argument("--start-ms", type=int, default=30_000, help="the start deadline")
    parser.add_argument("--market", type=int, default=3, help="failovers through the market")
    parser.add_argument(
        "--start-within-s", type=int, default=20, help="the market failovers' start deadline"
    )
    args = parser.parse_args()
    logging.getLogger("PyCardano").setLevel(logging.CRITICAL)
    results = asyncio.run(measure(args.rounds, args.start_ms, args.market, args.start_within_s))
    print(table(results))
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
