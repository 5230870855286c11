"""The demo's consumers, each with the consumer SDK (what `unchained job submit` runs): a key
of its own, funded from the devnet's faucet, the sample job quoted, checked and locked, its
progress followed live, its result downloaded and verified against the provider's receipt."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from pycardano import Transaction
from rich.console import Console
from rich.live import Live
from rich.table import Table

from consumer.client import MarketClient
from consumer.keys import ConsumerKey, load_key, new_wallet
from consumer.progress import FINAL, watch
from consumer.quote import CheckedQuote
from consumer.session import Consumer, VerifiedResult
from consumer.store import JobStore
from offchain.chain.context import chain_context
from offchain.chain.ogmios import request
from offchain.chain.submit import tip_point, wait_for_confirmations
from offchain.devnet.genesis import ADA
from offchain.protocol import deployment_file
from offchain.protocol.jobspec import JobSpec, Resources
from provider.images import WORKLOADS_IN_IMAGE
from unchained.demo.children import IDENTITY, SLOT

FUNDS = 100 * ADA
EPOCHS = 200  # consumer n trains for EPOCHS + 10 (n - 1): each job its own spec, its own id
MAX_DURATION_S = 120


def sample_job(image: str, epochs: int) -> JobSpec:
    """A 2-64-64-2 network learns two spirals with NumPy, on one CPU bundle."""
    command = ["python3", f"{WORKLOADS_IN_IMAGE}/train_mlp.py", "--epochs", str(epochs)]
    return JobSpec(
        image=image, command=command, resources=Resources(**SLOT),
        max_duration_s=MAX_DURATION_S, max_price_lovelace=100 * ADA,
    )  # fmt: skip


@dataclasses.dataclass
class DemoConsumer:
    """One consumer and, once submitted, its job."""

    name: str
    sdk: Consumer
    spec: JobSpec
    quote: CheckedQuote | None = None
    lock: Transaction | None = None
    escrow: str = ""
    units: int = 0  # from the signed receipt, once verified

    @property
    def job_id(self) -> str:
        """The market's id for the job, once quoted."""
        assert self.quote is not None, "submit first"
        return self.quote.job_id

    async def submit(self) -> None:
        """Quote (checked by the SDK), lock built and signed here, escrow reported."""
        self.quote = await self.sdk.quote(self.spec)
        unsigned = await self.sdk.build_lock(self.job_id)
        self.lock = self.sdk.key.sign(unsigned)
        self.escrow = await self.sdk.submit_lock(self.job_id, self.lock)

    async def result(self, into: Path) -> tuple[VerifiedResult, dict[str, Any]]:
        """The result verified against the signed receipt, and the job's metrics.json."""
        verified = await self.sdk.results(self.job_id, into)
        self.units = verified.units
        metrics = (verified.unpacked / "metrics.json") if verified.unpacked else None
        return verified, json.loads(metrics.read_text()) if metrics and metrics.exists() else {}


def consumer_key(path: Path) -> ConsumerKey:
    """The key at `path`, made on the first run (the chain is new each run, the key is not)."""
    return load_key(path) if path.exists() else new_wallet(path, mnemonic=False)


def open_consumers(data_dir: Path, count: int, image: str, ogmios_url: str, deployment: Path,
                   market_url: str) -> list[DemoConsumer]:  # fmt: skip
    consumers = []
    for n in range(1, count + 1):
        key = consumer_key(data_dir / "keys" / f"consumer-{n}.skey")
        context = chain_context(ogmios_url)
        sdk = Consumer(
            key, MarketClient.open(market_url, IDENTITY, key), context, ogmios_url,
            deployment_file.load(deployment, context), JobStore(data_dir / "consumers" / str(n)),
        )  # fmt: skip
        spec = sample_job(image, EPOCHS + 10 * (n - 1))
        consumers.append(DemoConsumer(f"consumer-{n}", sdk, spec))
    return consumers


async def fund(ogmios_url: str, address: str) -> str:
    """FUNDS from the devnet's faucet, confirmed; the transaction id."""
    since = await tip_point(ogmios_url)
    answer = await request(ogmios_url, "devnet/fund", {"address": address, "lovelace": FUNDS})
    tx_id = answer["transaction"]["id"]
    await wait_for_confirmations(ogmios_url, tx_id, since, timeout_s=60)
    return tx_id


async def follow(consumers: list[DemoConsumer]) -> dict[str, str]:
    """Live progress until every job is final: the consumer's own display for one job, a
    table of all for several. The final state of each job, by consumer."""
    console = Console()
    if len(consumers) == 1:
        only = consumers[0]
        return {only.name: await watch(only.sdk, only.job_id, console)}
    states: dict[str, dict[str, Any]] = {}

    def table() -> Table:
        shown = Table("consumer", "job", "state", "units", "settled by", title="jobs")
        for c in consumers:
            status = states.get(c.name, {})
            units = status.get("receipt_units")
            shown.add_row(c.name, c.job_id[:16], status.get("state", "…"),
                          "-" if units is None else str(units),
                          (status.get("settle_tx") or "-")[:16])  # fmt: skip
        return shown

    with Live(table(), console=console, refresh_per_second=4) as live:
        while len(states) < len(consumers) or any(s["state"] not in FINAL for s in states.values()):
            found = await asyncio.gather(*(c.sdk.status(c.job_id) for c in consumers))
            states = {c.name: s for c, s in zip(consumers, found, strict=True)}
            live.update(table())
            await asyncio.sleep(0.5)
    return {name: status["state"] for name, status in states.items()}
