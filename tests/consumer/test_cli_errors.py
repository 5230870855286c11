"""Bad input a user can give any consumer command without a chain or market: a path that is a
folder, one that cannot be written, a file that is not text, a damaged job record in the
state directory, a market URL that is a web page. Each is one JSON error document with
`--json` and a one-line `error:` without it, exit 1, never a traceback (as `job results` on
a hostile archive: tests/consumer/test_results_cli.py)."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from consumer.sdk.keys import new_wallet
from tests.consumer.cli import run

pytestmark = pytest.mark.slow  # each case runs `unchained` twice, as child processes

CASES = {
    "spec written into a missing folder": (["job", "init", "no/such/folder/job.yaml"],
                                           "FileNotFoundError", "no/such/folder/job.yaml"),
    "key that is a folder": (["wallet", "address", "--key", "folder"], "IsADirectoryError",
                             "folder"),
    "new key where none can be written": (["wallet", "new", "--key", "/proc/unchained.skey"],
                                          "FileNotFoundError", "/proc/unchained.skey"),
    "market call signed with a folder": (["offers", "search", "--key", "folder"],
                                         "IsADirectoryError", "folder"),
    "a damaged job record": (["job", "list", "--local"], "ConsumerError",
                             "jobs/damaged.json is not a job record"),
    "a record of another shape": (["job", "list", "--local"], "ConsumerError",
                                  "market_url: Field required"),
    "a record that is not text": (["job", "list", "--local"], "ConsumerError",
                                  "jobs/damaged.json is not a job record"),
    "a key that is not text": (["wallet", "address", "--key", "binary"], "WalletError",
                               "binary is not a key file: not text"),
    "a market call signed with a key that is not text": (
        ["offers", "search", "--key", "binary"], "WalletError", "is not a key file: not text"),
    "a spec that is not text": (["job", "submit", "binary", "--yes"], "JobSpecError",
                                "binary is not text (byte 0: invalid start byte)"),
}  # fmt: skip
DAMAGED = {"a damaged job record": b'{"job_id": "j", "created', "a record that is not text":
           b'\xff{"job_id": "j"}'}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_an_error_document_not_a_traceback(case: str, tmp_path: Path):
    args, kind, said = CASES[case]
    (tmp_path / "folder").mkdir()
    jobs = tmp_path / "state" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "damaged.json").write_bytes(DAMAGED.get(case, b'{"job_id": "j"}'))
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00 not UTF-8")
    env = {**os.environ, "UNCHAINED_CONSUMER_STATE_DIR": str(tmp_path / "state")}

    done = run(env, *args, "--json", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    error = json.loads(done.stdout)
    assert error["error"] == kind and said in error["message"], error
    done = run(env, *args, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert done.stderr.startswith("error: ") and said in done.stderr, done.stderr[-3000:]


class NotAMarket(BaseHTTPRequestHandler):
    """A web server that is not a market: every GET answers 200 with a page."""

    def do_GET(self) -> None:
        page = b"<html>a web page, not a market</html>"
        self.send_response(200)
        self.send_header("content-length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("args", [["job", "list"], ["offers", "search", "gpus>=1"]])
def test_a_url_that_is_no_market_is_named_not_a_traceback(args: list[str], tmp_path: Path):
    new_wallet(tmp_path / "consumer.skey", mnemonic=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotAMarket)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        env = {**os.environ, "UNCHAINED_CONSUMER_KEY": str(tmp_path / "consumer.skey"),
               "UNCHAINED_CONSUMER_MARKET_URL": url,
               "UNCHAINED_CONSUMER_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
        done = run(env, *args, "--json", cwd=tmp_path)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        error = json.loads(done.stdout)
        assert error["error"] == "MarketRefused" and "is not JSON" in error["message"], error
        assert error["answer"] == "<html>a web page, not a market</html>"
        done = run(env, *args, cwd=tmp_path)
        assert done.returncode == 1 and done.stderr.startswith("error: the market's answer to GET")
    finally:
        server.shutdown()
        thread.join()
