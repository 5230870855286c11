"""Each consumer command a user types, as a real process: `job init`, `wallet new | address |
balance`, `offers search`, `job logs` and `job status --watch`, against the devnet and a market
with an offer where they need one. With `--json` every command prints one JSON document, its
errors too; an Ogmios that does not answer is named with the option that points at it, by the
commands that read the chain (`job status` without --watch reads the market alone)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from offchain.protocol.job.jobspec import load_jobspec
from tests.consumer.cli import UNCHAINED, cli_env, funded_key, ready_to_submit, run, run_json
from tests.consumer.scripted import GPU
from tests.consumer.test_sdk import UNITS, archive


def test_job_init_writes_a_spec_that_loads_and_never_overwrites(tmp_path: Path):
    env = {**os.environ}
    done = run(env, "job", "init", cwd=tmp_path)
    assert done.returncode == 0 and "wrote job.yaml" in done.stdout, done.stderr
    written = (tmp_path / "job.yaml").read_text()
    spec = load_jobspec(tmp_path / "job.yaml")
    assert spec.max_duration_s > 0 and spec.command

    (tmp_path / "job.yaml").write_text("image: mine\n")
    done = run(env, "job", "init", cwd=tmp_path)
    assert done.returncode == 1 and "exists (use --force" in done.stderr
    code, error = run_json(env, "job", "init", cwd=tmp_path)
    assert code == 1 and error == {
        "error": "FileExists", "message": "job.yaml exists (use --force to replace it)",
        "path": "job.yaml",
    }  # fmt: skip
    assert (tmp_path / "job.yaml").read_text() == "image: mine\n"

    code, made = run_json(env, "job", "init", "job.yaml", "--force", cwd=tmp_path)
    assert code == 0 and made == {"path": "job.yaml"}
    assert (tmp_path / "job.yaml").read_text() == written


async def test_wallet_balance_and_offers_search(market, provider, devnet, tmp_path: Path):
    funded, key = await funded_key(devnet, tmp_path, 12_345_678)
    env = cli_env(market, devnet, key, tmp_path / "state")
    code, shown = run_json(env, "wallet", "balance", cwd=tmp_path)
    assert code == 0 and shown == {"address": str(funded.address), "lovelace": 12_345_678,
                                   "locked_lovelace": 0, "channels_lovelace": 0,
                                   "total_lovelace": 12_345_678}  # fmt: skip
    done = run(env, "wallet", "balance", cwd=tmp_path)
    assert done.stdout.strip().splitlines() == [
        f"12.345678 ADA spendable at {funded.address}",
        "0.000000 ADA locked in open escrows (your jobs recorded here, on chain now)",
        "0.000000 ADA in open channels (yours recorded here, on chain now: what is not claimed "
        "comes back at the close)",
        "12.345678 ADA in all",
    ]

    offer = await provider.offer()
    query = "gpus>=1 vram>=24GiB price<=200ADA/h sort=price"
    code, found = run_json(env, "offers", "search", query, cwd=tmp_path)
    assert code == 0 and found["matched"] == 1, found
    (listed,) = found["offers"]
    assert listed["provider_id"] == offer["provider_id"] and listed["terms"]["gpu_model"] == GPU
    table = run(env, "offers", "search", query, cwd=tmp_path).stdout
    assert "1 of 1 offers match" in table and f"1 x {GPU}" in table, table
    assert "180.000000 ADA" in table  # 50,000 lovelace a second, an hour of it

    none = run(env, "offers", "search", "gpus>=2", cwd=tmp_path)
    assert none.returncode == 0 and none.stdout.startswith("no offer matches (1 searched)")


async def test_job_logs_and_status_watch_in_json(market, provider, devnet, tmp_path: Path):
    *_, env = await ready_to_submit(market, provider, devnet, tmp_path)
    code, submitted = run_json(env, "job", "submit", "job.yaml", "--yes", cwd=tmp_path)
    assert code == 0, submitted
    job = await provider.assignment()
    await provider.accept(job)
    await provider.run(job, ["epoch 1 loss 0.50", "epoch 2 loss 0.25"])

    code, logs = run_json(env, "job", "logs", job["job_id"], cwd=tmp_path)
    assert code == 0 and logs["job_id"] == job["job_id"]
    assert [line["text"] for line in logs["lines"]] == ["epoch 1 loss 0.50", "epoch 2 loss 0.25"]
    plain = run(env, "job", "logs", job["job_id"], cwd=tmp_path).stdout
    assert plain == "epoch 1 loss 0.50\nepoch 2 loss 0.25\n"

    with (
        background(env, tmp_path, "job", "status", job["job_id"], "--watch", "--json") as watch,
        background(env, tmp_path, "job", "logs", job["job_id"], "-f", "--json") as follow,
    ):
        await provider.deliver(job, archive({"a.txt": b"a"}), UNITS)
        final = await asyncio.to_thread(finished, watch)
        followed = await asyncio.to_thread(finished, follow)
    assert final["state"] == "settled" and final["receipt_units"] == UNITS, final
    assert followed["lines"] == logs["lines"]


async def test_an_unreachable_ogmios_is_named(market, devnet, tmp_path: Path):
    _, key = await funded_key(devnet, tmp_path, 5_000_000)
    with closed_port() as port:
        env = {**cli_env(market, devnet, key, tmp_path), "UNCHAINED_OGMIOS_URL":
               f"ws://127.0.0.1:{port}"}  # fmt: skip
        for command in (["wallet", "balance"], ["job", "status", "some-job", "--watch"]):
            done = run(env, *command, cwd=tmp_path)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert done.stderr.startswith(f"error: cannot reach Ogmios at ws://127.0.0.1:{port}")
            assert "--ogmios-url" in done.stderr and "UNCHAINED_OGMIOS_URL" in done.stderr
            code, error = run_json(env, *command, cwd=tmp_path)
            assert code == 1 and error["error"] == "OgmiosUnreachable"
            assert error["ogmios_url"] == f"ws://127.0.0.1:{port}"


@contextmanager
def background(env: dict[str, str], cwd: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`unchained ARGS` running while the test drives the job; `finished` waits for it."""
    process = subprocess.Popen(
        [*UNCHAINED, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def finished(process: subprocess.Popen[str]) -> dict:
    """The one JSON document a command printed, once it exited 0."""
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return json.loads(out)


@contextmanager
def closed_port() -> Iterator[int]:
    """A local port that is bound but not listening: a connection to it is refused."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]
