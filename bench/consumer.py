"""The consumer's two waits, measured on a devnet of its own (1 s slots, as `unchained devnet`)
with the real market (`unchained market serve` in its own process, SQLite, one confirmation)
and a scripted provider:

- submit_to_funded_s: wall seconds of `unchained job submit --yes --detach` (a new process:
  start-up, quote and its checks, lock built, signed, submitted, confirmed and the market
  told), which returns once the job is funded; and the blocks the chain made meanwhile
  (target: funded within 3 blocks);
- cli_start_s: how long `unchained` takes to start and answer, the larger of two medians of
  CLI_RUNS child processes each: `unchained --help`, and `unchained job list` on an empty store
  (the bench's key, asking its market); target <= 0.3 s. A component is imported only when
  one of its commands runs, so neither imports pycardano, the OpShin compiler or the market;
- cli_chain_command_s: the same for the commands that read the chain or sign for it, the
  largest of the medians of `unchained job status JOB` (a job submitted here), `unchained
  wallet balance`, `unchained wallet address` and `unchained endpoint call` (one paid request
  to a test double of a provider's gateway, answered at once, on a channel recorded in the
  state directory): target <= 0.5 s each; and cli_endpoint_call_added_ms, what the call adds
  to the request itself (its median less one httpx GET of the gateway in a fresh interpreter):
  target <= 50 ms;
- results_verify_mb_per_s: a 100 MB result archive downloaded, hashed as it arrives, checked
  against the provider's signed receipt and kept on disk (`Consumer.results`, no unpacking).

Prints a table and writes bench/results/consumer.json. Run: .venv/bin/python -m bench.consumer
(`--cli-only`: the devnet and market, one job submitted, cli_start_s and cli_chain_command_s
measured, the other figures kept from the last full run and named in `kept_from_earlier_run`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from pycardano import PaymentSigningKey, ScriptHash

from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.client import MarketClient
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.session import Consumer
from consumer.sdk.store import JobStore
from devnet.process import DevnetProcess
from offchain.chain.ogmios import request_sync
from offchain.market.settings import MarketSettings
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.deployment_file import DeploymentFile
from tests.consumer.cli import UNCHAINED
from tests.consumer.endpoint_double import GatewayDouble, serving
from tests.consumer.scripted import ScriptedProvider
from tests.consumer.test_channels import record
from tests.consumer.test_endpoint_client import CHANNEL, PRICE
from tests.consumer.test_sdk import SPEC
from tests.market.processes import MarketProcess
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS, deployed
from tests.protocol.onchain import wallet

RESULTS = Path(__file__).parent / "results" / "consumer.json"
IDENTITY = "unchained-market:bench"
RUNS = 3
CLI_RUNS = 5
ARCHIVE_MB = 100
MB = 1_000_000


async def measure(work: Path, cli_only: bool) -> dict[str, Any]:
    devnet = DevnetProcess(work / "devnet", slot_length_ms=1000).start()
    try:
        deployment = await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS)
        deployment_file.save(deployment, work / "deployment.json")
        settings = MarketSettings(
            data_dir=work / "market", ogmios_url=devnet.url, deployment=work / "deployment.json",
            identity=IDENTITY, confirmations=1, result_limit_bytes=2 * ARCHIVE_MB * MB,
        )  # fmt: skip
        market = MarketProcess(settings, work / "market.log").start()
        try:
            return await runs(devnet, deployment, market.url, work, cli_only)
        finally:
            market.stop()
    finally:
        devnet.stop()


async def runs(
    devnet: DevnetProcess, deployment, url: str, work: Path, cli_only: bool
) -> dict[str, Any]:
    provider = await ScriptedProvider.start(devnet, deployment, url, IDENTITY)
    await provider.offer(slots=RUNS)
    funded = await wallet(devnet, 1_000 * 1_000_000)
    funded.key.save(str(work / "consumer.skey"))
    (work / "job.yaml").write_text(yaml.safe_dump(SPEC))
    env = {
        **os.environ, "UNCHAINED_CONSUMER_MARKET_URL": url,
        "UNCHAINED_CONSUMER_MARKET_IDENTITY": IDENTITY, "UNCHAINED_OGMIOS_URL": devnet.url,
        "UNCHAINED_DEPLOYMENT": str(work / "deployment.json"),
        "UNCHAINED_CONSUMER_KEY": str(work / "consumer.skey"),
        "UNCHAINED_CONSUMER_STATE_DIR": str(work / "state"),
    }  # fmt: skip
    cli = cli_start(env, work)
    submits: list[int] = []  # ms
    blocks: list[int] = []
    jobs: list[str] = []
    for _ in range(1 if cli_only else RUNS):  # --cli-only: one job, for `job status`
        height = _height(devnet)
        began = time.perf_counter_ns()
        done = subprocess.run([*UNCHAINED, "job", "submit", "job.yaml", "--yes", "--again",
                               "--detach", "--json"], env=env, cwd=work, capture_output=True,
                              text=True, check=True)  # fmt: skip
        submits.append((time.perf_counter_ns() - began) // 1_000_000)
        blocks.append(_height(devnet) - height)
        jobs.append(json.loads(done.stdout)["job_id"])
    cli |= cli_chain_commands(env, work, jobs[0], funded.key)
    if cli_only:
        return cli

    key = ConsumerKey(funded.key)
    consumer = Consumer(key, MarketClient.open(url, IDENTITY, key), devnet.context(), devnet.url,
                        deployment, JobStore(work / "state"))  # fmt: skip
    archive = os.urandom(ARCHIVE_MB * MB)
    rates = []
    assigned = await provider.assignments()
    assert sorted(a["job_id"] for a in assigned) == sorted(jobs)
    for assignment in assigned:
        await provider.accept(assignment)
        await provider.run(assignment, ["bench"])
        await provider.deliver(assignment, archive, 10)
        started = time.perf_counter_ns()
        result = await consumer.results(
            assignment["job_id"], work / "results" / assignment["job_id"], False
        )
        elapsed_ns = time.perf_counter_ns() - started
        assert result.size == len(archive)
        rates.append(len(archive) * 1_000_000_000 // elapsed_ns // MB)
    await consumer.market.aclose()
    await provider.http.aclose()
    return {
        "submit_to_funded_s": statistics.median(submits) / 1000,
        "submit_to_funded_blocks": statistics.median(blocks),
        "submit_to_funded_ms_runs": submits,
        **cli,
        "results_verify_mb_per_s": statistics.median(rates),
        "results_verify_mb_per_s_runs": rates,
        "archive_mb": ARCHIVE_MB,
        "slot_length_ms": 1000,
        "runs": RUNS,
    }


def cli_start(env: dict[str, str], work: Path) -> dict[str, Any]:
    """Medians of CLI_RUNS wall times (ms) of `unchained --help` and of `unchained job list`
    (this bench's key and market, nothing submitted yet); cli_start_s the larger."""
    commands = {"help": [*UNCHAINED, "--help"], "job_list": [*UNCHAINED, "job", "list"]}
    figures = cli_medians(commands, env, work, "cli_load_avg_1m")
    return {"cli_start_s": largest(figures, commands), **figures}


def cli_chain_commands(
    env: dict[str, str], work: Path, job_id: str, key: PaymentSigningKey
) -> dict[str, Any]:
    """Medians of CLI_RUNS wall times (ms) of the commands that read the chain or sign for it:
    `job status` of a job submitted here, `wallet balance`, `wallet address` and `endpoint
    call` (a test double of a gateway, serving `echo` on a channel recorded in the state
    directory, for the deployment's channel script); cli_chain_command_s the largest. And
    what `endpoint call` adds to the request itself: its median less that of one GET of the
    gateway's listing in a fresh interpreter, with httpx as the call's client (`bare_request`)."""
    deployment = DeploymentFile.model_validate_json((work / "deployment.json").read_text())
    ChannelStore(work / "state").save(record(ConsumerKey(key), CHANNEL, 1_000 * 1_000_000))
    vkey = key.to_verification_key().payload[:32]
    double = GatewayDouble(vkey, deployment.network_id,
                           ScriptHash(bytes.fromhex(deployment.channel_hash)),
                           bytes.fromhex(CHANNEL), PRICE)  # fmt: skip
    with serving(double) as gateway:
        commands = {
            "job_status": ["job", "status", job_id], "wallet_balance": ["wallet", "balance"],
            "wallet_address": ["wallet", "address"],
            "endpoint_call": ["endpoint", "call", "echo", "--gateway", gateway, "--channel",
                              CHANNEL, "--data", "{}"],
        }  # fmt: skip
        bare = [sys.executable, "-c", BARE_REQUEST, f"{gateway}/endpoints"]
        runs = {name: [*UNCHAINED, *args] for name, args in commands.items()}
        figures = cli_medians({**runs, "bare_request": bare}, env, work, "cli_chain_load_avg_1m")
    assert double.ious[-1].amount == CLI_RUNS * PRICE, double.ious  # each call paid
    added = figures["cli_endpoint_call_s"] - figures["cli_bare_request_s"]
    return {"cli_chain_command_s": largest(figures, commands), **figures,
            "cli_endpoint_call_added_ms": round(added * 1000)}  # fmt: skip


BARE_REQUEST = "import sys, httpx; httpx.get(sys.argv[1]).raise_for_status()"


def largest(figures: dict[str, Any], commands: dict[str, list[str]]) -> float:
    """The largest median (s) of `commands`."""
    return max(figures[f"cli_{name}_s"] for name in commands)


def cli_medians(
    commands: dict[str, list[str]], env: dict[str, str], work: Path, load_name: str
) -> dict[str, Any]:
    """CLI_RUNS runs of each command line, interleaved: the median wall time of each (s);
    beside them the CPU time each child used (less sensitive to a busy machine than the wall
    time) and `load_name`, the load average when they began. Each starts as an installed
    `unchained` does, its modules' bytecode cached (the first run writes what is missing),
    whatever PYTHONDONTWRITEBYTECODE this shell sets: compiling them took tens of ms a run."""
    env = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    times: dict[str, list[int]] = {name: [] for name in commands}
    cpu: dict[str, list[int]] = {name: [] for name in commands}
    load = os.getloadavg()[0]
    for _ in range(CLI_RUNS):
        for name, args in commands.items():
            used = _children_cpu_ms()
            started = time.perf_counter_ns()
            subprocess.run(args, env=env, cwd=work, capture_output=True, check=True)
            times[name].append((time.perf_counter_ns() - started) // 1_000_000)
            cpu[name].append(_children_cpu_ms() - used)
    medians = {name: statistics.median(runs) for name, runs in times.items()}
    return {
        **{f"cli_{name}_s": ms / 1000 for name, ms in medians.items()},
        **{f"cli_{name}_ms_runs": runs for name, runs in times.items()},
        **{f"cli_{name}_cpu_ms_median": statistics.median(runs) for name, runs in cpu.items()},
        load_name: round(load, 1),
    }


def _children_cpu_ms() -> int:
    """User + system CPU time of this process's finished children, ms."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((usage.ru_utime + usage.ru_stime) * 1000)


def _height(devnet: DevnetProcess) -> int:
    return request_sync(devnet.url, "queryNetwork/blockHeight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli-only", action="store_true", help="measure cli_start_s alone")
    cli_only = parser.parse_args().cli_only
    with tempfile.TemporaryDirectory() as tmp:
        measured = asyncio.run(measure(Path(tmp), cli_only))
    if cli_only:
        earlier = json.loads(RESULTS.read_text())
        earlier.pop("kept_from_earlier_run", None)
        kept = [name for name in earlier if name not in measured]
        measured = {**earlier, **measured, "kept_from_earlier_run": kept}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(measured, indent=2) + "\n")
    print(f"{'measure':<34} value")
    for name, value in measured.items():
        print(f"{name:<34} {value}")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
