"""The demo's consumers: each a key of its own, funded from the devnet's faucet, that runs the
consumer CLI a newcomer uses next, as child processes: `unchained job submit SPEC --yes`, then
`unchained job results JOB`. Its key, market, chain, deployment and job store are given by
`UNCHAINED_*` variables. What the demo tells about a job it reads back where a person would:
the consumer's job store (what the CLI recorded) and the market's explorer."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from consumer.cli.progress import FINAL
from consumer.sdk.job_record import JobRecord
from consumer.sdk.keys import ConsumerKey, load_key, new_wallet
from consumer.sdk.store import JobStore
from devnet.process import funded
from offchain.protocol.job.jobspec import JobSpec, Resources
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.ledger.split import SettleSplit
from provider.images.recipes import WORKLOADS_IN_IMAGE
from unchained.demo.children import SLOT, DemoFailed

FUNDS = 100 * ADA
EPOCHS = 200  # consumer n trains for EPOCHS + 10 (n - 1): each job its own spec, its own id
MAX_DURATION_S = 120
POLL_S = 1


def sample_job(image: str, epochs: int) -> JobSpec:
    """A 2-64-64-2 network learns two spirals with NumPy, on one CPU bundle."""
    command = ["python3", f"{WORKLOADS_IN_IMAGE}/train_mlp.py", "--epochs", str(epochs)]
    return JobSpec(
        image=image, command=command, resources=Resources(**SLOT),
        max_duration_s=MAX_DURATION_S, max_price_lovelace=100 * ADA,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Paid:
    """What a settlement gave each party of one escrow (as the explorer's index splits it: a
    settle's payouts are merged and untagged) and which party submitted it."""

    owed: SettleSplit
    settler: str


@dataclasses.dataclass
class DemoConsumer:
    """One consumer, its job spec file and, once submitted, what its CLI recorded."""

    name: str
    key: ConsumerKey
    env: dict[str, str]  # the UNCHAINED_* settings of its CLI
    spec: Path
    epochs: int
    record: JobRecord | None = None  # its job store's record of the job, once submitted
    lock_fee: int = 0  # from the explorer, once the lock is indexed
    units: int = 0  # from the verified result
    paid: Paid | None = None  # what the settlement paid out of the escrow, once settled

    @property
    def job_id(self) -> str:
        assert self.record is not None, "submit first"
        return self.record.job_id

    async def cli(self, *args: str, terminal: bool = False) -> Any:
        """`unchained ARGS...` as this consumer (`run_cli`), its --json document parsed."""
        return await run_cli(self.name, self.env, *args, terminal=terminal)

    async def submit(self, terminal: bool) -> None:
        """`unchained job submit SPEC --yes`; the record it made in the (fresh) job store."""
        await self.cli("job", "submit", str(self.spec), "--yes", terminal=terminal)
        self.record = JobStore(Path(self.env["UNCHAINED_CONSUMER_STATE_DIR"])).all()[-1]

    async def result(self, into: Path) -> dict[str, Any]:
        """`unchained job results JOB`: the result verified against the signed receipt."""
        verified = await self.cli("job", "results", self.job_id, "--out", str(into))
        self.units = verified["units"]
        return verified


async def run_cli(who: str, env: dict[str, str], *args: str, terminal: bool = False,
                  as_json: bool = True) -> Any:  # fmt: skip
    """`unchained ARGS...` with `env`'s settings: its output in the terminal (`terminal`), its
    --json document parsed (`as_json`), or its output. DemoFailed if it fails; killed if the
    demo gives up."""
    piped = None if terminal else subprocess.PIPE
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "unchained.cli", *args,
        *(["--json"] if as_json and not terminal else []), env={**os.environ, **env},
        stdin=subprocess.DEVNULL, stdout=piped, stderr=piped,
    )  # fmt: skip
    try:
        out, err = await process.communicate()
    except BaseException:
        process.kill()
        await process.wait()
        raise
    if process.returncode:
        said = (out or b"").decode() + (err or b"").decode()
        raise DemoFailed(f"{who}: `unchained {' '.join(args)}` failed "
                         f"({process.returncode}): {said.strip()[-2000:]}")  # fmt: skip
    if terminal:
        return None
    return json.loads(out) if as_json else out.decode()


def party(data_dir: Path, name: str, state_dir: Path, ogmios_url: str, deployment: Path,
          market_url: str) -> tuple[ConsumerKey, dict[str, str]]:  # fmt: skip
    """A consumer's key (made on the first run: the chain is new each run, the key is not) and
    the UNCHAINED_* settings of its CLI, its state in `state_dir` (made)."""
    key_file = data_dir / "keys" / f"{name}.skey"
    key = load_key(key_file) if key_file.exists() else new_wallet(key_file, mnemonic=False)
    env = {"UNCHAINED_CONSUMER_KEY": str(key_file), "UNCHAINED_CONSUMER_MARKET_URL": market_url,
           "UNCHAINED_OGMIOS_URL": ogmios_url, "UNCHAINED_DEPLOYMENT": str(deployment),
           "UNCHAINED_CONSUMER_STATE_DIR": str(state_dir)}  # fmt: skip
    state_dir.mkdir(parents=True, exist_ok=True)
    return key, env


def open_consumers(data_dir: Path, count: int, image: str, ogmios_url: str, deployment: Path,
                   market_url: str) -> list[DemoConsumer]:  # fmt: skip
    """`count` consumers, each with its key, its job store and its spec file."""
    consumers = []
    for n in range(1, count + 1):
        state_dir = data_dir / "consumers" / str(n)
        key, env = party(data_dir, f"consumer-{n}", state_dir, ogmios_url, deployment,
                         market_url)  # fmt: skip
        epochs = EPOCHS + 10 * (n - 1)
        spec = state_dir / "job.yaml"
        spec.write_text(yaml.safe_dump(sample_job(image, epochs).model_dump(mode="json"),
                                       sort_keys=False))  # fmt: skip
        consumers.append(DemoConsumer(f"consumer-{n}", key, env, spec, epochs))
    return consumers


async def fund(ogmios_url: str, address: str) -> str:
    """FUNDS from the devnet's faucet, confirmed; the transaction id."""
    return await funded(ogmios_url, address, FUNDS)


async def explorer(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """The explorer's JSON for `path`, once it has indexed it (not found until then)."""
    while True:
        response = await http.get(f"/api/explorer/{path}")
        if response.status_code != httpx.codes.NOT_FOUND:
            return response.raise_for_status().json()
        await asyncio.sleep(POLL_S)


async def follow(http: httpx.AsyncClient, consumers: list[DemoConsumer]) -> dict[str, Any]:
    """A live table of every job, from the explorer, until each is final; their pages, by
    consumer."""
    pages: dict[str, dict[str, Any]] = {}

    def table() -> Table:
        shown = Table("consumer", "job", "state", "units", "settled by", title="jobs")
        for c in consumers:
            page = pages.get(c.name, {"job": {"state": "…", "settle_tx": None}, "receipt": None})
            units = (page["receipt"] or {}).get("units")
            shown.add_row(c.name, c.job_id[:16], page["job"]["state"],
                          "-" if units is None else str(units),
                          (page["job"]["settle_tx"] or "-")[:16])  # fmt: skip
        return shown

    with Live(table(), console=Console(), refresh_per_second=4) as live:
        while True:
            found = await asyncio.gather(*(explorer(http, f"jobs/{c.job_id}") for c in consumers))
            pages = {c.name: page for c, page in zip(consumers, found, strict=True)}
            live.update(table())
            if all(page["job"]["state"] in FINAL for page in found):
                return pages
            await asyncio.sleep(POLL_S)
