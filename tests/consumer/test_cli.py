"""The consumer's CLI end to end: `unchained job submit` in a real terminal (tmux) showing the
quote, then live progress read back from the screen, detached with Ctrl-C and followed again,
to results verified on disk and the balance exact to the lovelace; and each mistake a user can
make answered with what to do, with nothing locked."""

from __future__ import annotations

import asyncio

import yaml

from consumer.sdk.store import JobStore
from offchain.chain.follower import tip_point
from offchain.chain.utxo import parse_out_ref, tx_id_of
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx.batch import payout_minimum
from tests.consumer.cli import (
    Terminal,
    cli_env,
    funded_key,
    ready_to_submit,
    run,
    run_json,
    tx_fee,
)
from tests.consumer.scripted import PRICE
from tests.consumer.test_sdk import SPEC, UNITS, archive
from tests.protocol.onchain import balance

LOCKED = PRICE * SPEC["max_duration_s"]


async def test_submit_in_a_terminal_to_verified_results(market, provider, devnet, tmp_path):
    funded, _, env = await ready_to_submit(market, provider, devnet, tmp_path)
    start = balance(devnet, funded.address)
    since = await tip_point(devnet.url)
    terminal = Terminal(env, ["job", "submit", "job.yaml"], tmp_path)
    try:
        screen = terminal.wait_for("lock ", "[y/N]")
        quoted = screen
        for shown in ("provider", "NVIDIA H100 80GB HBM3", "worst case", "deadline",
                      f"{ada(PRICE * 3600)}/h", "is not refunded", "always refunded"):  # fmt: skip
            assert shown in screen, screen
        terminal.keys("y", "Enter")
        job = await asyncio.wait_for(provider.assignment(), 60)
        terminal.wait_for("funded")
        await provider.accept(job)
        await provider.run(job, ["epoch 1 loss 0.50", "epoch 2 loss 0.25"])
        screen = terminal.wait_for("running", "epoch 2 loss 0.25", "units")
        assert "Ctrl-C detaches" in screen
        terminal.keys("C-c")
        terminal.wait_for("detached; the job goes on", "EXIT=0")
    finally:
        terminal.close()
    code, status = run_json(env, "job", "status", job["job_id"], cwd=tmp_path)
    assert code == 0 and status["state"] == "running"  # Ctrl-C cancelled nothing
    record = JobStore(tmp_path / "state").get(job["job_id"])
    allowance, locked = record.datum.fee_allowance, record.lovelace
    deposit = payout_minimum(devnet.context(), funded.address)  # its refund's minimum
    assert locked == LOCKED + allowance + deposit
    code, held = run_json(env, "wallet", "balance", cwd=tmp_path)
    assert code == 0 and held["locked_lovelace"] == locked  # its open escrow
    assert held["lovelace"] == balance(devnet, funded.address)

    await provider.deliver(job, archive({"model.bin": b"\x00" * 1000}), UNITS)
    terminal = Terminal(env, ["job", "status", job["job_id"], "--watch"], tmp_path)
    try:
        screen = terminal.wait_for("settled", "EXIT=0")
        assert f"{UNITS} / {SPEC['max_duration_s']} s (receipt)" in screen, screen
    finally:
        terminal.close()
    code, result = run_json(env, "job", "results", job["job_id"], "--out", "res", cwd=tmp_path)
    assert code == 0, result
    assert result["units"] == UNITS and result["cost"] == UNITS * PRICE
    assert (tmp_path / "res" / "out" / "model.bin").read_bytes() == b"\x00" * 1000

    lock_tx = tx_id_of(parse_out_ref(job["escrow"]))
    fee = await tx_fee(devnet, lock_tx, since)
    least = f"this job costs at least {ada(allowance + fee)}, even if it never runs"
    assert least in quoted.replace("\n", ""), quoted  # the first line of the quote, exact
    split = settle_split(locked, PRICE, UNITS, SPEC["max_duration_s"], allowance)
    assert balance(devnet, funded.address) == start - fee - locked + split.consumer
    assert split.consumer == LOCKED - PRICE * UNITS + deposit

    # what it cost, as `job spend`, `job status` and `job list` tell it: the net cost is the
    # wallet's difference, to the lovelace
    code, spent = run_json(env, "job", "spend", cwd=tmp_path)
    assert code == 0, spent
    (cost,) = spent["jobs"]
    assert cost["net_cost"] == start - balance(devnet, funded.address) == spent["total"]["net_cost"]
    assert (cost["locked"], cost["fee_allowance"], cost["lock_fee"], cost["refunded"]) == (
        locked,
        allowance,
        fee,
        split.consumer,
    )
    assert cost["due"] == split.provider == UNITS * PRICE == cost["provider_paid"]  # no top-up
    shown = run(env, "job", "spend", cwd=tmp_path).stdout
    assert job["job_id"][:8] in shown and ada(cost["net_cost"]) in shown, shown
    code, status = run_json(env, "job", "status", job["job_id"], cwd=tmp_path)
    assert code == 0 and status["cost"] == cost
    shown = run(env, "job", "status", job["job_id"], cwd=tmp_path).stdout
    assert f"{UNITS} units x {PRICE:,} lovelace = {ada(UNITS * PRICE)}" in shown, shown
    assert f"allowance {ada(allowance)} (not refunded), lock transaction {ada(fee)}" in shown
    code, (listed,) = run_json(env, "job", "list", cwd=tmp_path)
    assert code == 0 and listed["cost"] == cost


async def test_mistakes_are_explained_and_lock_nothing(market, provider, devnet, tmp_path):
    funded, key = await funded_key(devnet, tmp_path, 5_000_000)
    env = cli_env(market, devnet, key, tmp_path / "state")
    await provider.offer()
    start = balance(devnet, funded.address)

    (tmp_path / "bad.yaml").write_text("image: python\ncommand: [a\n")
    code, error = run_json(env, "job", "submit", "bad.yaml", "--yes", cwd=tmp_path)
    assert code == 1 and "not valid YAML" in error["message"]

    (tmp_path / "typo.yaml").write_text(yaml.safe_dump({**SPEC, "gpu": 1}))
    code, error = run_json(env, "job", "submit", "typo.yaml", "--yes", cwd=tmp_path)
    assert code == 1 and "gpu: unknown field" in error["message"]

    impossible = {**SPEC, "resources": {**SPEC["resources"], "gpus": 8}}
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(impossible))
    code, error = run_json(env, "job", "submit", "big.yaml", "--yes", cwd=tmp_path)
    assert code == 1 and error["error"] == "NoMatchingProvider", error
    assert "no offer can take the job: the job asks 8 GPU(s)" in error["message"], error

    (tmp_path / "job.yaml").write_text(yaml.safe_dump(SPEC))
    done = run(env, "job", "submit", "job.yaml", "--yes", cwd=tmp_path)
    assert done.returncode == 1
    assert "not enough funds" in done.stderr and str(funded.address) in done.stderr, done.stderr
    assert "Send at least" in done.stderr

    assert balance(devnet, funded.address) == start
    code, jobs = run_json(env, "job", "list", cwd=tmp_path)
    assert code == 0 and [job["escrow"] for job in jobs] == [None]  # quoted, never locked
    assert [(job["state"], job["where"]) for job in jobs] == [("quoted", "both")]
