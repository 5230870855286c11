"""`unchained job init` writes a spec that runs on the demo's provider as written: the demo's
own provider config (its slot, its prices, `unchained provider run`) on the real market and
the devnet, the spec submitted unchanged, run in the docker engine and settled (by the
provider's daemon: its pay is below the ledger's minimum output, which the market leaves to
it, and nobody tops it up), the renter's balance exact to the lovelace. Before that, on the
same offer, what the market refuses at quote time (an image the provider does not have, more
memory than it offers, a max price below its price) is refused before any lock, in the
renter's units, and costs nothing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import httpx
import yaml

from consumer.sdk.store import JobStore
from devnet.process import DevnetProcess
from offchain.chain.follower import tip_point
from offchain.protocol.ledger.amounts import per_hour
from offchain.protocol.ledger.split import settle_split
from provider.images import recipes as images
from tests.consumer.cli import cli_env, funded_key, run, run_json, tx_fee
from tests.consumer.conftest import Market
from tests.market.client import Party, serve
from tests.protocol.onchain import balance, wallet
from tests.provider.daemon_harness import settling_market, wait_state
from unchained.demo import children

FUNDS = 50_000_000
DEMO_PRICE = children.PRICES.cpu_core + children.PRICES.memory_gib + children.PRICES.disk_gib


async def test_the_example_spec_runs_as_written_and_refusals_cost_nothing(devnet, tmp_path):
    images.python_image(docker.from_env())  # also tags the example's image
    async with demo_provider(devnet, tmp_path) as (market, _):
        await walk(devnet, tmp_path, market)


@contextlib.asynccontextmanager
async def demo_provider(
    devnet: DevnetProcess, tmp_path: Path, **daemon_settings: Any
) -> AsyncIterator[tuple[Market, children.Child]]:
    """A settling market and the demo's one-slot provider daemon on it (its state in
    `tmp_path/provider-state`; `daemon_settings` over the demo's), started: its offer
    published. Stopped (SIGTERM) at the end."""
    deployment_file, _deployment, settings = await settling_market(devnet, tmp_path)
    settings = settings.model_copy(update={"identity": children.IDENTITY})
    with serve(settings) as url:
        state = tmp_path / "provider-state"
        state.mkdir()
        (await wallet(devnet)).key.save(str(state / "provider.skey"))
        daemon = children.provider(tmp_path, state, devnet.url, deployment_file, url, slots=1,
                                   **daemon_settings)  # fmt: skip
        try:
            daemon.start().wait_for(lambda: daemon.logged("offer published"), "offer")
            yield Market(settings, url, deployment_file), daemon
        finally:
            daemon.stop()


async def walk(devnet, tmp_path, market: Market) -> None:
    here = tmp_path / "consumer"
    here.mkdir()
    funded, key = await funded_key(devnet, here, FUNDS)
    env = cli_env(market, devnet, key, here / "state", children.IDENTITY)
    written = run(env, "job", "init", cwd=here)
    assert written.returncode == 0, written.stderr
    example = yaml.safe_load((here / "job.yaml").read_text())
    assert example["image"] == images.PYTHON_EXAMPLE

    said = {}
    for name, changes, words in [
        ("slim", {"image": "python:3.11-slim"}, (
            "no provider has image python:3.11-slim; images offered by the 1 online offers "
            "that meet the rest of the job: ")),
        ("big", {"resources": {**example["resources"], "memory_mib": 4096}},
         "the job asks 4096 MiB memory, the largest of those has 512 MiB"),
        ("cheap", {"max_price_lovelace": 1000}, (
            "your max price 0.006000 ADA/h (0.001000 ADA for up to 600 s) is below "
            f"{per_hour(DEMO_PRICE)}, the price of the cheapest of those")),
    ]:  # fmt: skip
        (here / f"{name}.yaml").write_text(yaml.safe_dump({**example, **changes}))
        code, refused = run_json(env, "job", "submit", f"{name}.yaml", "--yes", cwd=here)
        assert code == 1 and refused["error"] == "NoMatchingProvider", refused
        assert words in refused["message"] and "lovelace/" not in refused["message"], refused
        said[name] = refused["message"]
    offered = said["slim"].split("meet the rest of the job: ")[1].split(", ")
    assert images.PYTHON_EXAMPLE in offered  # the daemon's offer lists what it has
    assert balance(devnet, funded.address) == FUNDS  # nothing was locked

    since = await tip_point(devnet.url)
    code, job = run_json(env, "job", "submit", "job.yaml", "--yes", cwd=here)
    assert code == 0, job
    async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
        status = await wait_state(Party.new(http, children.IDENTITY, funded), job["job_id"],
                                  {"settled"}, timeout_s=120)  # fmt: skip
    code, result = run_json(env, "job", "results", job["job_id"], "--out", "res", cwd=here)
    assert code == 0 and result["sha256"] == status["result_sha256"], result
    assert (here / "res" / "out" / "hello.txt").read_text() == "hi"
    split = settle_split(job["lock_lovelace"], job["price_per_unit"], status["receipt_units"],
                         job["max_units"], job["fee_allowance"])  # fmt: skip
    assert job["lock_lovelace"] == JobStore(here / "state").get(job["job_id"]).lovelace
    fee = await tx_fee(devnet, job["lock_tx"], since)
    assert balance(devnet, funded.address) == FUNDS - fee - job["lock_lovelace"] + split.consumer
