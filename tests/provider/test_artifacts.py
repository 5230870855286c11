"""What a job leaves: /out packed into a tar whose sha256 is right, logs, and verified inputs."""

from __future__ import annotations

import hashlib
import http.server
import tarfile
import threading
from collections.abc import Iterator

import pytest

from offchain.protocol.job.jobspec import InputFile
from provider.config import RunnerSettings
from provider.selftest.checks import archive_files, data_input, job, log_text

WRITE_OUT = (
    "mkdir -p /out/a/b /out/empty && echo hello > /out/a/b/c.txt && printf x > /out/x "
    "&& ln -s a/b/c.txt /out/link && chmod 755 /out/x"
)


def test_out_is_archived_with_its_tree_and_the_hash_of_the_archive(runner, busybox):
    result = runner.run("artifacts", job(busybox, ["sh", "-c", WRITE_OUT]))
    assert result.status == "succeeded"
    archive = result.output
    data = archive.path.read_bytes()
    assert archive.sha256 == hashlib.sha256(data).hexdigest() and archive.size_bytes == len(data)
    assert archive_files(archive) == {
        "a": None,
        "a/b": None,
        "a/b/c.txt": b"hello\n",
        "empty": None,
        "link": None,
        "x": b"x",
    }  # mkfs's lost+found is not the job's
    with tarfile.open(archive.path) as tar:
        assert tar.getmember("link").linkname == "a/b/c.txt"
        assert tar.getmember("x").mode == 0o755
        assert {(m.uid, m.gid, m.mtime) for m in tar.getmembers()} == {(0, 0, 0)}


def test_the_same_output_gives_the_same_archive_hash(runner, busybox):
    first = runner.run("same_1", job(busybox, ["sh", "-c", WRITE_OUT])).output
    second = runner.run("same_2", job(busybox, ["sh", "-c", f"sleep 1; {WRITE_OUT}"])).output
    assert first.sha256 == second.sha256


def test_logs_stream_while_the_job_runs_and_are_kept(runner, busybox):
    lines: list[str] = []
    spec = job(busybox, ["sh", "-c", "echo one; sleep 0.3; echo two >&2"])
    result = runner.run("logs", spec, on_log=lines.append)
    assert "".join(lines) == "one\ntwo\n"
    assert log_text(result) == "one\ntwo\n"


def test_failing_jobs_report_their_exit_code_and_still_deliver_out(runner, busybox):
    result = runner.run("exit_3", job(busybox, ["sh", "-c", "echo partial > /out/p; exit 3"]))
    assert result.status == "failed" and result.exit_code == 3 and result.record.exit_code == 3
    assert archive_files(result.output) == {"p": b"partial\n"}


@pytest.fixture
def settings(tmp_path) -> RunnerSettings:
    """The runner may fetch inputs from this machine's loopback: `web` stands in for a host
    on the Internet (test_inputs_fence.py shows loopback refused by default)."""
    return RunnerSettings(state_dir=tmp_path / "state", inputs_allow=["127.0.0.1/32"])


@pytest.fixture
def web(tmp_path) -> Iterator[str]:
    """A local HTTP server for input files."""
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "weights.bin").write_bytes(b"\x00\x01" * 1000)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path / "served"), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_inputs_are_fetched_checked_and_mounted_read_only(runner, busybox, web):
    weights = b"\x00\x01" * 1000
    inputs = [
        data_input("config/params.txt", b"lr=0.1\n"),
        InputFile(
            path="weights.bin", url=f"{web}/weights.bin", sha256=hashlib.sha256(weights).hexdigest()
        ),
    ]
    read = "cat /in/config/params.txt; wc -c < /in/weights.bin; touch /in/new 2>&1 || echo ro"
    spec = job(busybox, ["sh", "-c", read]).model_copy(update={"inputs": inputs})
    result = runner.run("inputs", spec)
    assert result.status == "succeeded"
    assert log_text(result).split("\n")[:2] == ["lr=0.1", "2000"]
    assert log_text(result).strip().endswith("ro")


def test_an_input_with_another_hash_fails_the_job_before_it_starts(runner, busybox):
    bad = data_input("a.txt", b"real").model_copy(update={"sha256": "0" * 64})
    result = runner.run("bad_input", job(busybox, ["true"]).model_copy(update={"inputs": [bad]}))
    assert result.status == "error" and result.record is None
    assert "input a.txt: sha256 is" in result.error


def test_inputs_larger_than_the_jobs_disk_are_refused(runner, busybox):
    big = data_input("big.bin", b"x" * ((1 << 20) + 1))
    spec = job(busybox, ["true"], disk_mib=1).model_copy(update={"inputs": [big]})
    result = runner.run("big_input", spec)
    assert result.status == "error" and "exceed the job's" in result.error


def test_an_unreachable_input_is_an_error_naming_it(runner, busybox):
    gone = InputFile(path="gone", url="http://127.0.0.1:9/x", sha256="0" * 64)
    result = runner.run("gone", job(busybox, ["true"]).model_copy(update={"inputs": [gone]}))
    assert result.status == "error" and result.error.startswith("input gone: cannot fetch")
