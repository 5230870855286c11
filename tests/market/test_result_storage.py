"""Results live in the database (`offchain.market.services.storage`): two market processes on
different data directories sharing one PostgreSQL both serve a result either took, byte for
byte and in several rows; the retention deletes a finished job's files and logs once its time
has passed (a file another job still keeps stays), and the result route then says why; files
an earlier version kept on disk are read into the database when a market starts."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import httpx
import pytest
from sqlmodel import Session, select

from offchain.market.db import make_engine
from offchain.market.models import Job, JobState, LogLine
from offchain.market.services import storage
from offchain.market.services.jobs import now_ms
from tests.market.database import served_at_head
from tests.market.processes import MarketProcess
from tests.market.test_evidence import running

DAY_MS = 24 * 3600_000


async def test_two_markets_on_one_database_serve_each_others_results(
    devnet, market_deployment, settings, tmp_path, postgresql_url
):
    shared = settings.model_copy(
        update={"database_url": postgresql_url, "result_limit_bytes": 8 << 20}
    )
    hosts = [
        MarketProcess(shared.model_copy(update={"data_dir": tmp_path / name}),
                      tmp_path / f"{name}.log").start()
        for name in ("a", "b")
    ]  # fmt: skip
    try:
        async with (httpx.AsyncClient(base_url=hosts[0].url, timeout=60) as a,
                    httpx.AsyncClient(base_url=hosts[1].url, timeout=60) as b):  # fmt: skip
            provider, locked = await running(devnet, market_deployment, a, shared)
            archive = os.urandom(2 * storage.CHUNK_BYTES + 5)  # three rows
            put = await provider.send("PUT", f"/jobs/{locked.job}/result", raw=archive)
            assert put.status_code == 200, put.text
            for http in (a, b):
                consumer = dataclasses.replace(locked.consumer, http=http)
                got = await consumer.send("GET", f"/jobs/{locked.job}/result")
                assert got.status_code == 200, got.text
                assert got.content == archive
                assert got.headers["x-result-sha256"] == hashlib.sha256(archive).hexdigest()
        on_disk = [f for name in ("a", "b") for f in (tmp_path / name / "blobs").glob("??/*")]
        assert on_disk == []  # nothing of it on either host's disk
    finally:
        for host in hosts:
            host.stop()


@pytest.fixture
def database_url() -> str:
    """The other tests here: the default SQLite is enough."""
    return ""


async def test_the_retention_forgets_a_finished_jobs_files_and_logs(
    devnet, market_deployment, http, settings
):
    archive = b"the same result archive, for two jobs"
    sha256 = hashlib.sha256(archive).hexdigest()
    first, second = [await running(devnet, market_deployment, http, settings) for _ in "ab"]
    for provider, locked in (first, second):
        put = await provider.send("PUT", f"/jobs/{locked.job}/result", raw=archive)
        assert put.is_success, put.text
    logged = await first[0].send("POST", f"/jobs/{first[1].job}/logs", {"lines": ["hello"]})
    assert logged.is_success, logged.text
    engine = make_engine(settings)
    ended(engine, first[1].job)  # ten days ago; the second job still keeps the same file

    assert storage.forget_results(engine, 30 * DAY_MS, now_ms()) == 0  # within 30 days
    assert storage.forget_results(engine, 7 * DAY_MS, now_ms()) == 1
    with Session(engine) as session:
        assert session.exec(select(LogLine).where(LogLine.job_id == first[1].job)).all() == []
        assert storage.blob_bytes(session, sha256) == archive  # the second job's
    ended(engine, second[1].job)
    assert storage.forget_results(engine, 7 * DAY_MS, now_ms()) == 1
    with Session(engine) as session:
        assert storage.blob_bytes(session, sha256) is None  # its record stays, its bytes go
    engine.dispose()
    gone = await first[1].consumer.send("GET", f"/jobs/{first[1].job}/result")
    assert gone.status_code == 404 and "deleted after its retention" in gone.text
    provider, third = await running(devnet, market_deployment, http, settings)
    put = await provider.send("PUT", f"/jobs/{third.job}/result", raw=archive)  # the same bytes
    assert put.is_success, put.text
    again = await third.consumer.send("GET", f"/jobs/{third.job}/result")
    assert again.status_code == 200 and again.content == archive  # stored anew


def ended(engine, job_id: str) -> None:
    """The job settled ten days ago."""
    with Session(engine) as session:
        job = session.get(Job, job_id)
        job.state, job.updated_at_ms = JobState.SETTLED, now_ms() - 10 * DAY_MS
        session.add(job)
        session.commit()


def test_files_an_earlier_version_kept_on_disk_are_read_in(tmp_path, settings):
    at_head = served_at_head(settings)
    body = b"a metering record kept on disk"
    sha256 = hashlib.sha256(body).hexdigest()
    (at_head.blob_dir / sha256[:2]).mkdir(parents=True)
    (at_head.blob_dir / sha256[:2] / sha256).write_bytes(body)
    liar = at_head.blob_dir / "00" / ("00" * 32)
    liar.parent.mkdir()
    liar.write_bytes(b"not what its name says")
    engine = make_engine(at_head)
    assert storage.import_disk_blobs(engine, at_head.blob_dir) == 1
    with Session(engine) as session:
        assert storage.blob_bytes(session, sha256) == body
    assert not (at_head.blob_dir / sha256[:2] / sha256).exists() and liar.exists()
    engine.dispose()
