"""Every consumer command that takes a job takes a unique prefix of its id or its escrow ref
(TXID#IX), resolved against the local store first; a prefix two jobs here share is refused
listing both. `job logs` of a job with no lines says so instead of printing nothing. The same
spec submitted again is refused before anything is quoted or locked, unless `--again`."""

from __future__ import annotations

import json

from tests.consumer.cli import ready_to_submit, run, run_json
from tests.protocol.onchain import balance


async def test_a_job_is_named_by_a_prefix_or_its_escrow_and_a_shared_prefix_is_refused(
    market, provider, devnet, tmp_path
):
    funded, _, env = await ready_to_submit(market, provider, devnet, tmp_path)
    state = tmp_path / "state"
    code, submitted = run_json(env, "job", "submit", "job.yaml", "--yes", "--detach",
                               cwd=tmp_path)  # fmt: skip
    assert code == 0 and submitted["escrow"], submitted
    job, escrow = submitted["job_id"], submitted["escrow"]

    for name in (job[:8], escrow):
        code, status = run_json(env, "job", "status", name, cwd=tmp_path)
        assert code == 0 and status["id"] == job and status["escrow"] == escrow, status

    before = balance(devnet, funded.address)
    again = run(env, "job", "submit", "job.yaml", "--yes", "--detach", cwd=tmp_path)
    assert again.returncode == 1, again.stdout
    assert f"job {job} of this same spec was locked from here at " in again.stderr, again.stderr
    assert "pass --again to submit another paid job" in again.stderr
    assert len(list((state / "jobs").glob("*.json"))) == 1  # nothing quoted, nothing locked
    assert balance(devnet, funded.address) == before

    done = run(env, "job", "logs", job[:8], cwd=tmp_path)  # the provider never ran it
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert f"job {job} has no log lines (it is " in done.stderr
    code, logs = run_json(env, "job", "logs", job[:8], cwd=tmp_path)
    assert code == 0 and logs == {"job_id": job, "lines": []}

    # another job recorded here whose id shares the first 8 characters
    other = job[:8] + ("0" if job[8] != "0" else "1") + job[9:]
    record = json.loads((state / "jobs" / f"{job}.json").read_text())
    (state / "jobs" / f"{other}.json").write_text(json.dumps({**record, "job_id": other}))
    code, error = run_json(env, "job", "status", job[:8], cwd=tmp_path)
    assert code == 1 and sorted(error["matches"]) == sorted([job, other]), error
    assert f"'{job[:8]}' names 2 jobs here: " in error["message"] and other in error["message"]
    code, status = run_json(env, "job", "status", job[:9], cwd=tmp_path)
    assert code == 0 and status["id"] == job, status
