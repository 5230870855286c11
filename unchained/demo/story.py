"""The demo's story, step by step, every step a real transaction on a fresh devnet, a real
service or a real container on this machine; each step is narrated with its transaction id."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import TypeVar

import docker
import httpx
import typer
from pycardano import Address, Transaction

from offchain.chain.context import chain_context
from offchain.chain.submit import submit_confirmed
from offchain.devnet.process import DevnetProcess, free_port
from offchain.protocol import deployment_file
from offchain.protocol.amounts import ada
from offchain.protocol.deployment import deploy
from offchain.protocol.split import settle_split
from offchain.protocol.txbuild import Wallet
from provider.images import workloads_image
from provider.keys import ensure_key
from unchained.demo import children
from unchained.demo.children import Child, DemoFailed
from unchained.demo.consumers import FUNDS, DemoConsumer, follow, fund, open_consumers
from unchained.deploy import NOTICE_MS, SLASH_SHARE_BPS

SLOT_LENGTH_MS = 100  # an empty block every 2 s: confirmations come quickly
FOLLOW_TIMEOUT_S = 600  # the job's 120 s at most, its settlement, and a loaded machine
T = TypeVar("T")


def say(text: str = "") -> None:
    typer.echo(text)


def step(text: str) -> None:
    say(f"\n{text}")


@contextlib.contextmanager
def stopped_at_exit(*started: Child | DevnetProcess) -> Iterator[None]:
    """Stop the children, last started first, whatever happens (no process outlives the demo)."""
    try:
        yield
    finally:
        for child in reversed(started):
            child.stop()


def fresh(data_dir: Path, provider_state: Path) -> None:
    """Forget the last run's market, consumer records and provider jobs (their chain is
    replaced by a fresh one); keys, the image and the virtualenv stay."""
    for old in (data_dir / "market", data_dir / "consumers", data_dir / "results"):
        shutil.rmtree(old, ignore_errors=True)
    for old in provider_state.glob("*"):
        if old.is_dir():
            shutil.rmtree(old)
        elif old.name != "provider.skey":
            old.unlink()


def run(data_dir: Path, port: int | None, jobs: int, stay: bool) -> None:
    """The whole demo: its devnet, market and provider stop when it returns or fails."""
    provider_state = data_dir / "provider"
    fresh(data_dir, provider_state)
    many = f"{jobs} jobs from {jobs} consumers" if jobs > 1 else "one job"
    say(f"Unchained demo: {many}, from escrow to a verified result and a settled payout")

    step("1. The sample job's image: NumPy in a container (built once, then cached)")
    image = workloads_image(docker.from_env())
    say(f"   image {image}")

    step("2. A fresh local Cardano chain (devnet)")
    devnet = DevnetProcess(data_dir / "devnet", slot_length_ms=SLOT_LENGTH_MS, port=port)
    with stopped_at_exit(devnet.start(reset=True)):
        say(f"   {devnet.url}, its chain in {devnet.data_dir} (log devnet.log there)")
        deployment = deployed(devnet, data_dir / "deployment.json")
        market_port = free_port()
        market_url = f"http://127.0.0.1:{market_port}"
        market_key = devnet.data_dir / "wallets" / "market.skey"
        market = children.market(
            data_dir, devnet.url, deployment, market_key, market_port, jobs
        ).start()
        provider = children.provider(
            data_dir, provider_state, devnet.url, deployment, market_url, jobs
        )
        with stopped_at_exit(market, provider):
            provider_key, _ = ensure_key(provider_state)  # what `unchained provider init` makes
            provider.start()
            step("4. The market with its explorer, and a provider daemon")
            market.wait_for(lambda: children.market_up(market_url), "start")
            say(f"   market   {market_url} (log {market.log})")
            say(f"   explorer {market_url}/explorer")
            provider.wait_for(lambda: provider.logged("offer published"), "publish its offer")
            say(f"   provider daemon: offer published, {jobs} slot(s) of 1 core, 512 MiB, "
                f"64 MiB disk (log {provider.log})")  # fmt: skip
            consumers = open_consumers(data_dir, jobs, image, devnet.url, deployment, market_url)
            parties = {"provider": Wallet.of(provider_key).address,
                       **{c.name: c.sdk.key.address for c in consumers},
                       "market": Wallet.of(devnet.key("market")).address}  # fmt: skip
            asyncio.run(trade(devnet, market_url, consumers, parties, data_dir, [market, provider]))
            if stay:
                stay_up(market_url, consumers, data_dir, deployment, [market, provider])


def deployed(devnet: DevnetProcess, path: Path) -> Path:
    step("3. The market deploys the validators")
    market = Wallet.of(devnet.key("market"))
    tx, deployment = deploy(chain_context(devnet.url), market.address, 0, NOTICE_MS,
                            SLASH_SHARE_BPS)  # fmt: skip
    confirm(devnet.url, market.sign(tx), "deploy")
    deployment_file.save(deployment, path)
    say(f"   escrow script {deployment.escrow_hash.payload.hex()}")
    say(f"   bond script   {deployment.bond_hash.payload.hex()}")
    say(f"   deployment file {path}")
    return path


def confirm(url: str, tx: Transaction, what: str) -> None:
    height = asyncio.run(submit_confirmed(url, tx))
    say(f"   {what}: tx {tx.id} (block {height}, fee {ada(tx.transaction_body.fee)})")


async def trade(
    devnet: DevnetProcess, market_url: str, consumers: list[DemoConsumer],
    parties: dict[str, Address], data_dir: Path, alive: list[Child],
) -> None:  # fmt: skip
    step("5. The parties")
    for name, address in parties.items():
        say(f"   {name:<11}{address}")
    funded = await asyncio.gather(*(fund(devnet.url, str(c.sdk.key.address)) for c in consumers))
    for consumer, tx_id in zip(consumers, funded, strict=True):
        say(f"   {consumer.name} funded with {ada(FUNDS)} by the devnet's faucet: tx {tx_id}")
    before = {name: balance(devnet.url, address) for name, address in parties.items()}

    step("6. Each consumer submits the sample job: a quote checked against the provider's "
         "signed offer, the escrow locked from its own wallet")  # fmt: skip
    await asyncio.gather(*(c.submit() for c in consumers))
    for c in consumers:
        assert c.quote is not None and c.lock is not None
        say(
            f"   {c.name}: job {c.job_id}, {c.spec.command[-1]} epochs, "
            f"{ada(c.quote.datum.price_per_unit)}/s for at most {c.quote.datum.max_units} s"
        )
        say(
            f"   {c.name} lock: tx {c.lock.id} (fee {ada(c.lock.transaction_body.fee)}); "
            f"escrow {c.escrow} holds {ada(c.quote.lovelace)}"
        )
        say(f"   explorer {market_url}/explorer/jobs/{c.job_id}")

    step("7. The provider checks each escrow on chain, accepts, runs the job in a hardened "
         "container and signs a receipt; the market settles")  # fmt: skip
    states = await guarded(follow(consumers), alive, data_dir)
    failed = {name: state for name, state in states.items() if state != "settled"}
    if failed:
        raise DemoFailed(f"not settled: {failed}; see the logs in {data_dir}")

    step("8. Settlement")
    settle_fee = await settlement(market_url, consumers)

    step("9. The verified results")
    for c in consumers:
        verified, metrics = await c.result(data_dir / "results" / c.job_id)
        accuracy = f", accuracy {metrics['accuracy']:.3f}" if "accuracy" in metrics else ""
        say(
            f"   {c.name}: sha256 {verified.sha256} matches the receipt signed by the "
            f"escrow's provider key ({verified.size} bytes{accuracy}); in {verified.unpacked}"
        )

    after = {name: balance(devnet.url, address) for name, address in parties.items()}
    show_balances(before, after)
    check_balances(before, after, consumers, settle_fee)


async def guarded(work: Awaitable[T], alive: list[Child], data_dir: Path) -> T:
    """`work`'s result, unless a child exits or FOLLOW_TIMEOUT_S passes first (DemoFailed):
    a demo never waits for a job nobody is running."""
    task = asyncio.ensure_future(work)
    deadline = time.monotonic() + FOLLOW_TIMEOUT_S
    try:
        while not task.done():
            for child in alive:
                child.check()
            if time.monotonic() > deadline:
                raise DemoFailed(f"not settled in {FOLLOW_TIMEOUT_S} s: see the logs in {data_dir}")
            await asyncio.wait([task], timeout=1)
        return task.result()
    finally:
        task.cancel()


async def settlement(market_url: str, consumers: list[DemoConsumer]) -> int:
    """Print the settle transaction(s) and each escrow's split; the settle fees paid."""
    statuses = [await c.sdk.status(c.job_id) for c in consumers]
    fees = 0
    async with httpx.AsyncClient(base_url=market_url, timeout=30) as http:
        for tx_id in sorted({s["settle_tx"] for s in statuses}):
            tx = (await http.get(f"/api/explorer/txs/{tx_id}")).json()["tx"]
            spent = {i["ref"] for i in tx["inputs"]}
            held = [c for c in consumers if c.escrow in spent]
            fees += tx["fee"]
            say(
                f"   settle: tx {tx_id} (block {tx['height']}, fee {ada(tx['fee'])}) spends "
                f"{len(held)} escrow(s) in one batch, paid by the market's wallet"
            )
            say(f"   explorer {market_url}/explorer/txs/{tx_id}")
    for c, status in zip(consumers, statuses, strict=True):
        record = c.sdk.store.get(c.job_id)
        datum, units = record.datum, status["receipt_units"]
        split = settle_split(
            record.lovelace, datum.price_per_unit, units, datum.max_units, datum.fee_allowance
        )
        say(
            f"   {c.name}'s escrow: {units} units x "
            f"{datum.price_per_unit:,} lovelace = {ada(split.provider)} to the provider, "
            f"{ada(split.consumer)} back to {c.name}, {ada(split.fee)} fee allowance to the market"
        )
    return fees


def balance(url: str, address: Address) -> int:
    return sum(u.output.amount.coin for u in chain_context(url).utxos(address))


def show_balances(before: dict[str, int], after: dict[str, int]) -> None:
    step("Balances on the chain")
    say(f"   {'':<11}{'before':>22}{'after':>22}{'change':>22}")
    for name in before:
        change = after[name] - before[name]
        say(f"   {name:<11}{ada(before[name]):>22}{ada(after[name]):>22}"
            f"{('+' if change > 0 else '') + ada(change):>22}")  # fmt: skip


def check_balances(before: dict[str, int], after: dict[str, int],
                   consumers: list[DemoConsumer], settle_fee: int) -> None:  # fmt: skip
    """The changes are exactly the receipts, the lock fees and the allowances: else fail."""
    expected = {"provider": 0, "market": -settle_fee}
    for c in consumers:
        datum = c.sdk.store.get(c.job_id).datum
        assert c.lock is not None
        cost = datum.price_per_unit * c.units
        expected["provider"] += cost
        expected[c.name] = -(cost + datum.fee_allowance + c.lock.transaction_body.fee)
        expected["market"] += datum.fee_allowance
    changes = {name: after[name] - before[name] for name in before}
    if changes != expected:
        raise DemoFailed(f"the balances do not add up: changed {changes}, expected {expected}")
    say("\nChecked: the provider earned exactly its receipts; each consumer paid its job's units,")
    say("its lock fee and the fee allowance; the market kept the allowances less the settle fee.")


def stay_up(market_url: str, consumers: list[DemoConsumer], data_dir: Path, deployment: Path,
            alive: list[Child]) -> None:  # fmt: skip
    """Keep the devnet, market and provider up for a person to look around, until Ctrl-C."""
    first = consumers[0]
    step(f"The explorer stays up at {market_url}/explorer; Ctrl-C stops everything.")
    say(f"Try the consumer CLI as {first.name}, in another terminal:")
    say(
        f"   export UNCHAINED_CONSUMER_MARKET_URL={market_url} "
        f"UNCHAINED_OGMIOS_URL={first.sdk.ogmios_url} UNCHAINED_DEPLOYMENT={deployment}"
    )
    say(
        f"   export UNCHAINED_CONSUMER_KEY={data_dir / 'keys' / 'consumer-1.skey'} "
        f"UNCHAINED_CONSUMER_STATE_DIR={data_dir / 'consumers' / '1'}"
    )
    say(f"   .venv/bin/unchained job list; .venv/bin/unchained job status {first.job_id}")
    sys.stdout.flush()
    while True:
        for child in alive:
            child.check()
        time.sleep(1)
