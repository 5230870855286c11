"""`unchained job results` on a result archive a hostile provider signed and delivered (the
devnet, the real market, a scripted provider): with `--json` one JSON error document, without
it a clear message, never a traceback; exit 1; the verified archive and its receipt kept,
no `out/` (nor a partial one) and nothing written beside them. Each kind of hostile archive
is refused in tests/consumer/test_archive.py; a few travel the whole way here."""

from __future__ import annotations

from pathlib import Path

from tests.consumer.cli import cli_env, run, run_json
from tests.consumer.test_archive import HOSTILE
from tests.consumer.test_sdk import UNITS, funded_job

DELIVERED = ("dot-dot", "absolute path", "symlink out", "char device", "truncated")


async def test_a_hostile_archive_is_a_json_error_not_a_traceback(
    consumer, provider, market, devnet, tmp_path: Path
):
    key = tmp_path / "consumer.skey"
    consumer.key.key.save(str(key))
    env = cli_env(market, devnet, key, consumer.store.dir.parent)
    for kind in DELIVERED:
        data, reason = HOSTILE[kind]
        job_id, job, _ = await funded_job(consumer, provider)
        await provider.accept(job)
        await provider.run(job, ["writing /out"])
        await provider.deliver(job, data, UNITS)

        results = tmp_path / kind
        code, error = run_json(env, "job", "results", job_id, "--out", str(results),
                               cwd=tmp_path)  # fmt: skip
        assert code == 1 and error["error"] == "UnpackRefused", (kind, error)
        assert reason in error["reason"] and "nothing was unpacked" in error["message"], error
        assert error["archive"] == str(results / "result.tar")
        assert sorted(p.name for p in results.iterdir()) == ["receipt.json", "result.tar"]

        done = run(env, "job", "results", job_id, "--out", str(results), cwd=tmp_path)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith("error: the result archive is the one the provider signed")
        assert done.stdout == ""
    assert not Path("/tmp/unchained-evil.txt").exists()
