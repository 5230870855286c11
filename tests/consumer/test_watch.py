"""`job status --watch` of a job that fails: not in a terminal, each state change is a line
written when it happens (it printed nothing for 15 s); in a terminal (tmux), the live display
stops at the failure with its reason, the metered time stopped where the job stopped (it kept
counting the cost and never ended: the market's stream goes on to the refund)."""

from __future__ import annotations

import asyncio

from tests.consumer.cli import UNCHAINED, Terminal, ready_to_submit, run, run_json

REASON = "the container could not start: image not found"
REFUSAL = "refused by the provider: its slot has 8 MiB disk"


async def funded_job(market, provider, devnet, tmp_path) -> tuple[dict[str, str], dict]:
    """A job locked and funded through the CLI, and the provider's assignment of it."""
    *_, env = await ready_to_submit(market, provider, devnet, tmp_path)
    code, submitted = run_json(env, "job", "submit", "job.yaml", "--yes", "--detach",
                               cwd=tmp_path)  # fmt: skip
    assert code == 0, submitted
    return env, await asyncio.wait_for(provider.assignment(), 60)


async def fail(provider, job: dict) -> None:
    await provider.send("POST", f"/jobs/{job['job_id']}/failure",
                        {"reason": REASON, "exit_code": None})  # fmt: skip


async def test_watch_without_a_terminal_prints_each_state_change_at_once(
    market, provider, devnet, tmp_path
):
    env, job = await funded_job(market, provider, devnet, tmp_path)
    watch = await asyncio.create_subprocess_exec(
        *UNCHAINED, "job", "status", job["job_id"][:8], "--watch", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:

        async def line() -> str:
            return (await asyncio.wait_for(watch.stdout.readline(), 15)).decode().rstrip()

        name = f"job {job['job_id']}"
        seen = [await line()]
        while seen[-1] != f"{name}: funded":  # the states it went through, from the first
            seen.append(await line())
        assert seen[0] == f"{name}: requested", seen
        await provider.accept(job)
        assert await line() == f"{name}: accepted"  # while the job goes on, not at its end
        await provider.run(job, ["epoch 1"])
        assert await line() == f"{name}: running"
        await fail(provider, job)
        assert await line() == f"{name}: failed"
        ended = await line()
        assert ended.startswith(f"{name} ended failed: {REASON} (") and "metered)" in ended, ended
        assert await asyncio.wait_for(watch.wait(), 15) == 0
    finally:
        if watch.returncode is None:
            watch.kill()
            await watch.wait()


async def test_a_refused_jobs_watch_ends_at_its_refund_settle(market, provider, devnet, tmp_path):
    """A zero-unit receipt with the refusal: the job is settled in the next batch, and the
    watch (and status, and list) say why it never ran and that the lock came back."""
    env, job = await funded_job(market, provider, devnet, tmp_path)
    watch = await asyncio.create_subprocess_exec(
        *UNCHAINED, "job", "status", job["job_id"], "--watch", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await provider.refuse(job, REFUSAL)
        out, _ = await asyncio.wait_for(watch.communicate(), 60)
    finally:
        if watch.returncode is None:
            watch.kill()
            await watch.wait()
    name = f"job {job['job_id']}"
    lines = out.decode().splitlines()
    end = next(i for i, text in enumerate(lines) if text.startswith(f"{name} ended "))
    assert lines[end - 3 : end] == [f"{name}: failed", f"{name}: settling", f"{name}: settled"]
    assert lines[end].startswith(f"{name} ended settled: {REFUSAL}; refunded in that settle")
    # then the status: why it never ran, and what came back
    status = lines[end + 1 :]
    assert f"  failure  {REFUSAL}" in status and any(t.startswith("  back ") for t in status)
    code, status = run_json(env, "job", "status", job["job_id"], cwd=tmp_path)
    assert code == 0 and status["failure_reason"] == REFUSAL and status["receipt_units"] == 0
    listed = run({**env, "COLUMNS": "400"}, "job", "list", cwd=tmp_path)
    assert f"settled: {REFUSAL}" in listed.stdout, listed.stdout


async def test_the_live_display_stops_at_a_failure_with_its_reason(
    market, provider, devnet, tmp_path
):
    env, job = await funded_job(market, provider, devnet, tmp_path)
    terminal = Terminal(env, ["job", "status", job["job_id"], "--watch"], tmp_path)
    try:
        terminal.wait_for("funded")
        await provider.accept(job)
        await provider.run(job, ["epoch 1"])
        terminal.wait_for("running", "epoch 1", "(so far)")
        await fail(provider, job)
        screen = terminal.wait_for("failed", REASON, "EXIT=0", timeout_s=20)
        assert "(metered)" in screen and "(so far)" not in screen, screen
        cost = [row for row in screen.splitlines() if "cost" in row]
        await asyncio.sleep(2)
        assert [row for row in terminal.screen().splitlines() if "cost" in row] == cost
    finally:
        terminal.close()
