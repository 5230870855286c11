"""What a starting daemon does about the jobs of the one before it: the runner finishes the
containers that outlived it (`Runner.recover`), a run that finished gets its receipt and is
delivered, an interrupted one is reported failed, and a receipt not yet delivered is delivered.
Recovered jobs hold their slots until they are done, so nothing is promised twice."""

from __future__ import annotations

import asyncio
import logging

from provider.daemon.chain import in_daemon_thread
from provider.daemon.jobs import Worker
from provider.daemon.journal import JobEntry
from provider.sandbox.runner import RunResult

log = logging.getLogger("unchained.provider")


async def recover(worker: Worker) -> None:
    """Resume every open job in the journal (call before taking new work)."""
    entries = {entry.job_id: entry for entry in worker.journal.open_jobs()}
    running = [entry for entry in entries.values() if entry.stage in ("accepted", "running")]
    for entry in running:
        worker.seen.add(entry.job_id)
        worker.capacity.take(entry.job_id, entry.slot)
    for entry in entries.values():
        if entry.stage in ("finished", "delivered"):
            worker.seen.add(entry.job_id)
            if entry.stage == "finished":
                worker.spawn(worker.deliver(entry))
    if running:
        log.info("recovering %d job(s): %s", len(running), ", ".join(e.job_id for e in running))
    worker.spawn(_finish_runs(worker, running))


async def _finish_runs(worker: Worker, running: list[JobEntry]) -> None:
    """Let the runner finish what survived (it waits for live containers), then settle up."""
    recovered = await in_daemon_thread(worker.runner.recover)
    results = {result.job_id: result for result in recovered}
    await asyncio.gather(*(_resume(worker, entry, results.get(entry.job_id)) for entry in running))


async def _resume(worker: Worker, entry: JobEntry, result: RunResult | None) -> None:
    saved = worker.runner.results_dir / entry.job_id / "result.json"
    if result is None and saved.exists():  # finished and cleaned up before the crash
        result = RunResult.model_validate_json(saved.read_text())
    worker.release(entry.job_id)
    if result is None:
        await worker.fail(entry, "interrupted: the provider stopped before the job started")
    elif result.status == "reaped":
        await worker.fail(entry, f"interrupted: {result.error}")
    else:
        await worker.finish(entry, result)
