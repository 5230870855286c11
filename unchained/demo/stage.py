"""The steps both demos share (`unchained demo` with its jobs, `unchained demo --services`
with its endpoints and pods): a fresh devnet, the validators deployed, the market with its
explorer and a provider daemon as child processes, and the narration's helpers (steps, the
balance table, staying up until Ctrl-C)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import typer
from pycardano import Address, Network, Transaction

from devnet.process import DevnetProcess, free_port
from offchain.chain.context import chain_context
from offchain.chain.submit import submit_confirmed
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.deployment import deploy
from offchain.protocol.tx.txbuild import Wallet
from provider.keys import ensure_key
from unchained.demo import children
from unchained.demo.children import Child, DemoFailed
from unchained.demo.consumers import FUNDS, fund
from unchained.deploy import NOTICE_MS, REFUND_WINDOW_MS, SLASH_SHARE_BPS

SLOT_LENGTH_MS = 100  # an empty block every 2 s: confirmations come quickly
# the provider daemon's child, made once the devnet's URL, the deployment file and the
# market's URL are known
ProviderChild = Callable[[str, Path, str], Child]
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


@dataclasses.dataclass(frozen=True)
class Stage:
    """What the shared steps set up: the chain, the deployment file, the market and the
    provider daemon (running), and the provider's address."""

    devnet: DevnetProcess
    deployment: Path
    market_url: str
    market: Child
    provider: Child
    provider_address: Address


def demo_chain(data_dir: Path, port: int | None, realistic: bool) -> DevnetProcess:
    """The demo's devnet (not started): instant blocks, or with `realistic` Praos's, forks
    included, on scaled time."""
    if realistic:
        return DevnetProcess.realistic(data_dir / "devnet", port=port)
    return DevnetProcess(data_dir / "devnet", slot_length_ms=SLOT_LENGTH_MS, port=port)


@contextlib.contextmanager
def staged(
    data_dir: Path, devnet: DevnetProcess, provider_state: Path, batch: int,
    provider: ProviderChild, offered: str,
) -> Iterator[Stage]:  # fmt: skip
    """Steps 2 to 4: the devnet, the validators, the market (settling `batch` escrows at once)
    and the provider daemon, whose published offer is `offered`; all stopped on the way out."""
    step("2. A fresh local Cardano chain (devnet)")
    with stopped_at_exit(devnet.start(reset=True)):
        say(
            f"   {devnet.url} ({devnet.profile} blocks), its chain in {devnet.data_dir} "
            "(log devnet.log there)"
        )
        deployment = deployed(devnet, data_dir / "deployment.json")
        market_port = free_port()
        market_url = f"http://127.0.0.1:{market_port}"
        market_key = devnet.data_dir / "wallets" / "market.skey"
        market = children.market(
            data_dir, devnet.url, deployment, market_key, market_port, batch
        ).start()
        daemon = provider(devnet.url, deployment, market_url)
        with stopped_at_exit(market, daemon):
            provider_key, _ = ensure_key(provider_state)  # what `unchained provider init` makes
            daemon.start()
            step("4. The market with its explorer, and a provider daemon")
            market.wait_for(lambda: children.market_up(market_url), "start")
            say(f"   market   {market_url} (log {market.log})")
            say(f"   explorer {market_url}/explorer")
            daemon.wait_for(lambda: daemon.logged("offer published"), "publish its offer")
            say(f"   provider daemon: offer published, {offered} (log {daemon.log})")
            address = Wallet.of(provider_key, Network.TESTNET).address
            yield Stage(devnet, deployment, market_url, market, daemon, address)


def deployed(devnet: DevnetProcess, path: Path) -> Path:
    step("3. The market deploys the validators")
    market = Wallet.of(devnet.key("market"), Network.TESTNET)
    txs, deployment = deploy(chain_context(devnet.url), market.address, 0, NOTICE_MS,
                             SLASH_SHARE_BPS, REFUND_WINDOW_MS)  # fmt: skip
    for tx in txs:
        confirm(devnet.url, market.sign(tx), "deploy")
    deployment_file.save(deployment, path)
    say(f"   escrow script {deployment.escrow_hash.payload.hex()}")
    say(f"   settle script {deployment.settle_hash.payload.hex()}")
    say(f"   bond script   {deployment.bond_hash.payload.hex()}")
    say(f"   deployment file {path}")
    return path


def confirm(url: str, tx: Transaction, what: str) -> None:
    height = asyncio.run(submit_confirmed(url, tx))
    say(f"   {what}: tx {tx.id} (block {height}, fee {ada(tx.transaction_body.fee)})")


def balance(url: str, address: Address) -> int:
    return sum(u.output.amount.coin for u in chain_context(url).utxos(address))


def show_balances(before: dict[str, int], after: dict[str, int]) -> None:
    step("Balances on the chain")
    say(f"   {'':<11}{'before':>22}{'after':>22}{'change':>22}")
    for name in before:
        change = after[name] - before[name]
        say(f"   {name:<11}{ada(before[name]):>22}{ada(after[name]):>22}"
            f"{('+' if change > 0 else '') + ada(change):>22}")  # fmt: skip


def stay_up(market_url: str, who: str, env: dict[str, str], commands: str,
            alive: list[Child]) -> None:  # fmt: skip
    """Keep the devnet, market and provider up for a person to look around, until Ctrl-C."""
    step(f"The explorer stays up at {market_url}/explorer; Ctrl-C stops everything.")
    say(f"Try the consumer CLI as {who}, in another terminal:")
    say("   export " + " ".join(f"{name}={value}" for name, value in env.items()))
    say(f"   {commands}")
    sys.stdout.flush()
    while True:
        for child in alive:
            child.check()
        time.sleep(1)


def took(started: float, stay: bool) -> None:
    """The closing lines of a run: how long it took (and that it stops, without a terminal)."""
    if not stay:
        say("   (this run stops now: `unchained demo` in a terminal stays up for them)")
    say(f"\ndemo took {time.monotonic() - started:.0f} s")


async def guarded(work: Awaitable[T], alive: list[Child], data_dir: Path, timeout_s: int) -> T:
    """`work`'s result, unless a child exits or `timeout_s` passes first (DemoFailed): a demo
    never waits for work nobody is doing."""
    task = asyncio.ensure_future(work)
    deadline = time.monotonic() + timeout_s
    try:
        while not task.done():
            for child in alive:
                child.check()
            if time.monotonic() > deadline:
                raise DemoFailed(f"not done in {timeout_s} s: see the logs in {data_dir}")
            await asyncio.wait([task], timeout=1)
        return task.result()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task  # a consumer CLI still running is killed before the children stop


async def introduced(
    ogmios_url: str, parties: dict[str, Address], provider_note: str
) -> dict[str, int]:
    """Step 5: each party's address, every one but the market funded by the devnet's faucet;
    their balances then."""
    step("5. The parties")
    for name, address in parties.items():
        say(f"   {name:<11}{address}")
    funded = [name for name in parties if name != "market"]
    tx_ids = await asyncio.gather(*(fund(ogmios_url, str(parties[name])) for name in funded))
    for name, tx_id in zip(funded, tx_ids, strict=True):
        note = f" {provider_note}" if name == "provider" else ""
        say(f"   {name} funded with {ada(FUNDS)} by the devnet's faucet: tx {tx_id}{note}")
    return {name: balance(ogmios_url, address) for name, address in parties.items()}
