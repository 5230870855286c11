"""PyTorch jobs on the devnet market with the real provider daemon (the demo's provider config:
one slot, `unchained provider run` in its own process, jobs in the docker engine, Debian's
PyTorch on the CPU, its image built by `unchained provider build-image pytorch`). The spec
`job init --example pytorch` writes runs as written: locked, trained, settled, its model,
metrics and last checkpoint in its verified results. A training job cancelled mid-run keeps
its last checkpoint in its results, and `job submit --resume JOB` trains on from that
checkpoint's step to the end; a provider that stops (SIGTERM) stops the running job and
delivers its last checkpoint. `--resume` of a job that is not the renter's or holds no
checkpoint is refused before anything is locked. Balances to the lovelace. The checkpoint's
step is read with torch itself, in the image (this venv has no torch)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import yaml

from consumer.sdk.store import JobStore
from offchain.chain.follower import tip_point
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx.txbuild import Wallet
from provider.images import recipes as images
from provider.images.torch import TORCH_JOB_EXAMPLE
from tests.consumer.cli import cli_env, funded_key, run, run_json, tx_fee
from tests.consumer.conftest import Market
from tests.consumer.test_cancel import wait_log
from tests.consumer.test_job_init import demo_provider
from tests.market.client import Party
from tests.protocol.onchain import balance
from tests.provider.daemon_harness import ProviderProcess, wait_state
from unchained.demo import children

FUNDS = 100_000_000
LONG_STEPS = "1000000"  # a run that outlives the test: it is cancelled or its provider stops
STEPS_OF = (
    "import sys, torch; print(*(torch.load(f, map_location='cpu')['step'] for f in sys.argv[1:]))"
)


@dataclasses.dataclass
class World:
    market: Market
    daemon: children.Child
    renter: Wallet
    env: dict[str, str]
    here: Path
    example: dict[str, Any]


@pytest.fixture(scope="module")
async def world(devnet, tmp_path_factory) -> AsyncIterator[World]:
    """A settling market, the demo's one-slot provider (its grace short: the stop test is
    last) with the PyTorch image, and a renter holding FUNDS with the example spec written."""
    built = run({**os.environ}, "provider", "build-image", "pytorch", cwd=Path.cwd())
    assert built.returncode == 0, built.stdout + built.stderr  # before the daemon: offered
    images.busybox_image(docker.from_env())
    tmp = tmp_path_factory.mktemp("torch")
    here = tmp / "consumer"
    here.mkdir()
    renter, key = await funded_key(devnet, here, FUNDS)
    try:
        async with demo_provider(devnet, tmp, grace_ms=500) as (market, daemon):
            env = cli_env(market, devnet, key, here / "state", children.IDENTITY)
            written = run(env, "job", "init", "--example", "pytorch", cwd=here)
            assert written.returncode == 0, written.stdout + written.stderr
            example = yaml.safe_load((here / "job.yaml").read_text())
            code, unknown = run_json(env, "job", "init", "--example", "tensorflow", "x.yaml",
                                     cwd=here)  # fmt: skip
            assert code == 1 and "no example 'tensorflow'" in unknown["message"], unknown
            assert not (here / "x.yaml").exists()
            yield World(market, daemon, renter, env, here, example)
    finally:  # what the stopped daemon's jobs left, if anything
        config, state, log = tmp / "provider.toml", tmp / "provider-state", tmp / "provider.log"
        ProviderProcess(config, state, devnet.url, tmp / "deployment.json", log).reap()


def with_steps(example: dict[str, Any], steps: int | str) -> dict[str, Any]:
    """The example spec training to `steps`."""
    command = list(example["command"])
    command[command.index("--steps") + 1] = str(steps)
    return {**example, "command": command}


def submit(w: World, name: str, spec: dict[str, Any], *more: str) -> dict[str, Any]:
    (w.here / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    code, job = run_json(w.env, "job", "submit", f"{name}.yaml", "--yes", *more, cwd=w.here)
    assert code == 0, job
    return job


async def settled(w: World, job_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=w.market.url, timeout=60) as http:
        party = Party.new(http, children.IDENTITY, w.renter)
        return await wait_state(party, job_id, {"settled"}, timeout_s=180)


def results(w: World, job_id: str, into: str) -> Path:
    """The job's verified results, unpacked: its /out."""
    code, result = run_json(w.env, "job", "results", job_id, "--out", into, cwd=w.here)
    assert code == 0, result
    return w.here / into / "out"


def steps(out: Path, *names: str) -> list[int]:
    """The step each of the checkpoints `names` in `out` holds, as torch reads it (in the
    PyTorch image: one container for all)."""
    said = docker.from_env().containers.run(
        TORCH_JOB_EXAMPLE, ["python3", "-c", STEPS_OF, *(f"/c/{name}" for name in names)],
        remove=True, network_disabled=True, volumes={str(out): {"bind": "/c", "mode": "ro"}},
    )  # fmt: skip
    return [int(step) for step in said.split()]


async def log_lines(w: World, job_id: str) -> list[str]:
    async with httpx.AsyncClient(base_url=w.market.url, timeout=60) as http:
        party = Party.new(http, children.IDENTITY, w.renter)
        return [line["text"] for line in (await party.send("GET", f"/jobs/{job_id}/logs")).json()]


async def spent(devnet, since, job: dict[str, Any], units: int) -> int:
    """What the job cost its renter: the lock's fee and what the settle did not return."""
    split = settle_split(job["lock_lovelace"], job["price_per_unit"], units, job["max_units"],
                         job["fee_allowance"])  # fmt: skip
    return await tx_fee(devnet, job["lock_tx"], since) + job["lock_lovelace"] - split.consumer


async def test_the_pytorch_example_trains_through_the_market(devnet, world):
    w = world
    assert w.example["image"] == TORCH_JOB_EXAMPLE
    start, since = balance(devnet, w.renter.address), await tip_point(devnet.url)
    job = submit(w, "job", w.example)  # the spec as `job init --example pytorch` wrote it
    status = await settled(w, job["job_id"])
    assert status["outcome"] == "succeeded" and status["exit_code"] == 0, status
    out = results(w, job["job_id"], "first")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "metrics.json", "model.pt"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["started_at_step"], metrics["steps"], metrics["device"]) == (0, 300, "cpu")
    assert metrics["accuracy"] > 0.25  # four classes: better than chance after 300 steps
    assert steps(out, "checkpoint.pt", "model.pt") == [300, 300]
    texts = await log_lines(w, job["job_id"])
    assert [t.split(" loss")[0] for t in texts if t.startswith("checkpoint step")] == [
        f"checkpoint step {step}" for step in range(50, 301, 50)
    ]
    assert balance(devnet, w.renter.address) == start - await spent(
        devnet, since, job, status["receipt_units"]
    )


async def test_a_cancelled_training_keeps_its_checkpoint_and_resumes_from_its_step(devnet, world):
    w = world
    start, since = balance(devnet, w.renter.address), await tip_point(devnet.url)
    long = submit(w, "long", with_steps(w.example, LONG_STEPS))
    async with httpx.AsyncClient(base_url=w.market.url, timeout=60) as http:
        await wait_log(Party.new(http, children.IDENTITY, w.renter), long["job_id"],
                       "checkpoint step 100", timeout_s=120)  # fmt: skip
    code, cancelled = run_json(w.env, "job", "cancel", long["job_id"], cwd=w.here)
    assert code == 0, cancelled
    assert (cancelled["how"], cancelled["state"]) == ("stopped", "settled"), cancelled
    status = await settled(w, long["job_id"])
    assert status["outcome"] == "cancelled"
    out = results(w, long["job_id"], "cancelled")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt"]  # no model: it never ended
    (saved,) = steps(out, "checkpoint.pt")
    assert saved >= 100 and saved % 50 == 0, saved

    # the renter trains on to 100 steps past the checkpoint, from a prefix of the job's id
    resumed = submit(w, "resumed", with_steps(w.example, saved + 100), "--resume",
                     long["job_id"][:10])  # fmt: skip
    given = JobStore(w.here / "state").get(resumed["job_id"]).spec["inputs"]
    checkpoint = (out / "checkpoint.pt").read_bytes()
    assert [(i["path"], i["sha256"]) for i in given] == [
        ("checkpoint.pt", hashlib.sha256(checkpoint).hexdigest())
    ]
    again = await settled(w, resumed["job_id"])
    assert again["outcome"] == "succeeded", (again, await log_lines(w, resumed["job_id"]))
    out = results(w, resumed["job_id"], "resumed")
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["started_at_step"], metrics["steps"]) == (saved, saved + 100)
    assert steps(out, "model.pt") == [saved + 100]
    assert (await log_lines(w, resumed["job_id"]))[0] == f"resumed from step {saved}"

    costs = [await spent(devnet, since, job, units) for job, units in
             [(long, status["receipt_units"]), (resumed, again["receipt_units"])]]  # fmt: skip
    assert balance(devnet, w.renter.address) == start - sum(costs)


async def test_resume_is_refused_before_any_lock(devnet, world):
    w = world
    none = submit(w, "plain", {**w.example, "image": images.busybox_image(docker.from_env()),
                               "command": ["sh", "-c", "echo 42 > /out/answer"]})  # fmt: skip
    await settled(w, none["job_id"])
    start = balance(devnet, w.renter.address)
    before = run_json(w.env, "job", "list", cwd=w.here)
    code, refused = run_json(w.env, "job", "submit", "job.yaml", "--resume", none["job_id"],
                             "--yes", cwd=w.here)  # fmt: skip
    assert code == 1 and refused["error"] == "ConsumerError", refused
    assert (
        "hold no checkpoint.pt" in refused["message"]
        and "nothing was submitted" in (refused["message"])
    )

    other_dir = w.here / "other"  # another renter, who never submitted that job
    other_dir.mkdir()
    other, key = await funded_key(devnet, other_dir, 20_000_000)
    env = cli_env(w.market, devnet, key, other_dir / "state", children.IDENTITY)
    (other_dir / "job.yaml").write_text((w.here / "job.yaml").read_text())
    code, refused = run_json(env, "job", "submit", "job.yaml", "--resume", none["job_id"],
                             "--yes", cwd=other_dir)  # fmt: skip
    assert code == 1 and "not a job of yours recorded here" in refused["message"], refused

    assert balance(devnet, w.renter.address) == start
    assert balance(devnet, other.address) == 20_000_000
    assert run_json(w.env, "job", "list", cwd=w.here) == before  # nothing was quoted


async def test_a_provider_that_stops_delivers_the_last_checkpoint(devnet, world):
    w = world  # last in the module: the daemon stops here, then comes back to settle
    start, since = balance(devnet, w.renter.address), await tip_point(devnet.url)
    long = submit(w, "stopped", with_steps(w.example, LONG_STEPS), "--again")  # as cancelled
    async with httpx.AsyncClient(base_url=w.market.url, timeout=60) as http:
        party = Party.new(http, children.IDENTITY, w.renter)
        await wait_log(party, long["job_id"], "checkpoint step 100", timeout_s=120)
        await asyncio.to_thread(w.daemon.stop)  # SIGTERM: grace_ms, then the job is stopped
        assert w.daemon.process is not None and w.daemon.process.returncode == 0
        assert w.daemon.logged(f"stopped 1 job(s) still running: {long['job_id']}")
        status = await wait_state(party, long["job_id"], {"completed", "settled"})
        assert status["outcome"] == "stopped", status
        out = results(w, long["job_id"], "stopped")  # delivered before the daemon exited
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt"]
        assert steps(out, "checkpoint.pt")[0] >= 100
        w.daemon.start()  # back: it settles its small payout itself
        status = await wait_state(party, long["job_id"], {"settled"}, timeout_s=120)
    assert balance(devnet, w.renter.address) == start - await spent(
        devnet, since, long, status["receipt_units"]
    )
