"""The demo's story, step by step, every step a real transaction on a fresh devnet, a real
service or a real container on this machine; each step is narrated with its transaction id."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import docker
import httpx
from pycardano import Address

from devnet.process import DevnetProcess
from offchain.chain.context import chain_context
from offchain.protocol.ledger.amounts import ada, per_hour
from offchain.protocol.ledger.split import SettleSplit
from offchain.protocol.tx.batch import payout_minimum
from provider.images.recipes import workloads_image
from unchained.demo import children
from unchained.demo.children import Child, DemoFailed
from unchained.demo.consumers import (
    DemoConsumer,
    Paid,
    explorer,
    follow,
    open_consumers,
)
from unchained.demo.join import join_lines
from unchained.demo.stage import (
    balance,
    fresh,
    guarded,
    introduced,
    say,
    show_balances,
    staged,
    stay_up,
    step,
    took,
)

TRADE_TIMEOUT_S = 600  # the job's 120 s at most, its settlement, and a loaded machine


def run(data_dir: Path, chain: DevnetProcess, jobs: int, stay: bool) -> None:
    """The whole demo: its devnet, market and provider stop when it returns or fails. One job
    in a terminal: the consumer CLI shows its own live display there."""
    started = time.monotonic()
    terminal = jobs == 1 and sys.stdout.isatty()
    provider_state = data_dir / "provider"
    fresh(data_dir, provider_state)
    many = f"{jobs} jobs from {jobs} consumers" if jobs > 1 else "one job"
    say(f"Unchained demo: {many}, from escrow to a verified result and a settled payout")

    step("1. The sample job's image: NumPy in a container (built once, then cached)")
    image = workloads_image(docker.from_env())
    say(f"   image {image}")

    offered = f"{jobs} slot(s) of 1 core, 512 MiB, 64 MiB disk"

    def provider(ogmios_url: str, deployment: Path, market_url: str) -> Child:
        return children.provider(data_dir, provider_state, ogmios_url, deployment, market_url,
                                 jobs)  # fmt: skip

    with staged(data_dir, chain, provider_state, jobs, provider, offered) as stage:
        consumers = open_consumers(data_dir, jobs, image, stage.devnet.url, stage.deployment,
                                   stage.market_url)  # fmt: skip
        parties = {"provider": stage.provider_address,
                   **{c.name: c.key.address for c in consumers},
                   "market": stage.devnet.address("market")}  # fmt: skip
        alive = [stage.market, stage.provider]
        asyncio.run(guarded(trade(stage.devnet, stage.market_url, consumers, parties, data_dir,
                                  terminal), alive, data_dir, TRADE_TIMEOUT_S))  # fmt: skip
        step("\n".join(join_lines(stage.market_url, stage.devnet.url, stage.deployment,
                                  data_dir)))  # fmt: skip
        took(started, stay)
        if stay:
            first = consumers[0]
            stay_up(stage.market_url, first.name, first.env, ".venv/bin/unchained job list; "
                    f".venv/bin/unchained job status {first.job_id}", alive)  # fmt: skip


async def trade(
    devnet: DevnetProcess, market_url: str, consumers: list[DemoConsumer],
    parties: dict[str, Address], data_dir: Path, terminal: bool,
) -> None:  # fmt: skip
    before = await introduced(devnet.url, parties, "(it pays the fee of a settle it submits "
                              "itself)")  # fmt: skip

    step("6. Each consumer submits the sample job with the consumer CLI (its key, market and "
         "job store in UNCHAINED_CONSUMER_* variables): a quote checked against the provider's "
         "signed offer, the escrow locked from its own wallet")  # fmt: skip
    for c in consumers:
        say(f"   {c.name}$ unchained job submit {c.spec} --yes{'' if terminal else ' --json'}")
    sys.stdout.flush()  # before the CLI's own output, in a terminal
    await asyncio.gather(*(c.submit(terminal) for c in consumers))
    async with httpx.AsyncClient(base_url=market_url, timeout=30) as http:
        for c in consumers:
            await locked(http, market_url, c)

        step("7. The provider checks each escrow on chain, accepts, runs the job in a hardened "
             "container and signs a receipt; then the escrow is settled")  # fmt: skip
        pages = await follow(http, consumers)
        failed = {name: p["job"]["state"] for name, p in pages.items()
                  if p["job"]["state"] != "settled"}  # fmt: skip
        if failed:
            raise DemoFailed(f"not settled: {failed}; see the logs in {data_dir}")

        step("8. Settlement")
        settle_fees = await settlement(http, market_url, devnet.url, consumers, pages, parties)

    step("9. The verified results")
    for c in consumers:
        say(f"   {c.name}$ unchained job results {c.job_id} --out "
            f"{data_dir / 'results' / c.job_id} --json")  # fmt: skip
    verified = await asyncio.gather(*(c.result(data_dir / "results" / c.job_id) for c in consumers))
    for c, result in zip(consumers, verified, strict=True):
        say(
            f"   {c.name}: sha256 {result['sha256']} matches the receipt signed by the "
            f"escrow's provider key ({result['size']} bytes{accuracy(result['unpacked'])}); "
            f"in {result['unpacked']}"
        )

    after = {name: balance(devnet.url, address) for name, address in parties.items()}
    show_balances(before, after)
    check_balances(before, after, consumers, settle_fees)


async def locked(http: httpx.AsyncClient, market_url: str, c: DemoConsumer) -> None:
    """Print the job and its lock as the CLI recorded them, the lock's fee as the explorer
    indexed it (kept for the balance check)."""
    assert c.record is not None
    datum = c.record.datum
    c.lock_fee = (await explorer(http, f"txs/{c.record.lock_tx_id}"))["tx"]["fee"]
    deposit = c.record.lovelace - datum.price_per_unit * datum.max_units - datum.fee_allowance
    say(f"   {c.name}: job {c.job_id}, {c.epochs} epochs, "
        f"{per_hour(datum.price_per_unit)} for at most {datum.max_units} s, fee allowance "
        f"{ada(datum.fee_allowance)} (not refunded), return deposit {ada(deposit)} "
        "(always refunded)")  # fmt: skip
    say(f"   {c.name} lock: tx {c.record.lock_tx_id} (fee {ada(c.lock_fee)}); "
        f"escrow {c.record.escrow} holds {ada(c.record.lovelace)}")  # fmt: skip
    say(f"   explorer {market_url}/explorer/jobs/{c.job_id}")


def accuracy(unpacked: str) -> str:
    """What the job's metrics.json says it learnt, if it wrote one."""
    metrics = Path(unpacked) / "metrics.json"
    if not metrics.exists():
        return ""
    return f", accuracy {json.loads(metrics.read_text())['accuracy']:.3f}"


async def settlement(
    http: httpx.AsyncClient, market_url: str, ogmios_url: str, consumers: list[DemoConsumer],
    pages: dict[str, Any], parties: dict[str, Address],
) -> dict[str, int]:  # fmt: skip
    """Print the settle transaction(s), who submitted each (the market, when the job's
    timeline shows it put the job in it; else the provider), and each escrow's split as the
    explorer's index reads it; the settle fees each party paid."""
    fees: dict[str, int] = {}
    for tx_id in sorted({page["job"]["settle_tx"] for page in pages.values()}):
        tx = (await explorer(http, f"txs/{tx_id}"))["tx"]
        rows = {row["escrow"]: row for row in tx["settled"]}
        held = [c for c in consumers if c.record and c.record.escrow in rows]
        settler = "market" if any(
            event["to_state"] == "settling" and event["tx_id"] == tx_id
            for c in held for event in pages[c.name]["events"]
        ) else "provider"  # fmt: skip
        fees[settler] = fees.get(settler, 0) + tx["fee"]
        say(
            f"   settle: tx {tx_id} (block {tx['height']}, fee {ada(tx['fee'])}) spends "
            f"{len(held)} escrow(s) in one batch, paid by the {settler}'s wallet"
        )
        say(f"   explorer {market_url}/explorer/txs/{tx_id}")
        for c in held:
            assert c.record is not None and c.record.escrow is not None
            row = rows[c.record.escrow]
            owed = SettleSplit(row["provider_lovelace"], row["consumer_lovelace"],
                               row["fee_lovelace"])  # fmt: skip
            c.paid = Paid(owed, settler)
    least = payout_minimum(chain_context(ogmios_url), parties["provider"])
    for c in consumers:
        assert c.record is not None and c.paid is not None
        datum, units, owed = c.record.datum, pages[c.name]["receipt"]["units"], c.paid.owed
        say(
            f"   {c.name}'s escrow: {units} units x {datum.price_per_unit:,} lovelace = "
            f"{ada(owed.provider)} to the provider, {ada(owed.consumer)} back to {c.name}, "
            f"{ada(owed.fee)} fee allowance to the {c.paid.settler} (it paid the settle fee)"
        )
        if 0 < owed.provider < least:
            say(f"   {c.name}'s escrow: the provider's pay is below the ledger's minimum "
                f"output ({ada(least)}): the market tops up nothing and leaves it to the "
                "provider, whose daemon settles it itself (its own change raises its own "
                "output)")  # fmt: skip
    return fees


def check_balances(before: dict[str, int], after: dict[str, int],
                   consumers: list[DemoConsumer], settle_fees: dict[str, int]) -> None:  # fmt: skip
    """The changes are exactly the receipts, the lock fees, the allowances and the settle
    fees, with no top-up by anyone: else fail."""
    expected = {name: -settle_fees.get(name, 0) for name in ("provider", "market")}
    for c in consumers:
        assert c.record is not None and c.paid is not None
        owed = c.paid.owed
        assert owed.provider == c.record.datum.price_per_unit * c.units  # the receipt's
        assert owed.fee == c.record.datum.fee_allowance  # the lock's deposit covers the refund
        expected["provider"] += owed.provider
        expected[c.name] = owed.consumer - c.record.lovelace - c.lock_fee
        expected[c.paid.settler] += owed.fee
    changes = {name: after[name] - before[name] for name in before}
    if changes != expected:
        raise DemoFailed(f"the balances do not add up: changed {changes}, expected {expected}")
    say("\nChecked: the provider earned exactly its receipts; each consumer paid its job's units,")
    say("its lock fee and the fee allowance, and got its return deposit back; whoever settled")
    say("kept the allowances less the settle fee. Nobody topped up a payout.")
