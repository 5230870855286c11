"""The market's log as `unchained market serve` writes it under uvicorn: with
`UNCHAINED_LOG_FORMAT=json` one JSON object a line, each with its time, level, component and
logger, our INFO lines (the leader's) and uvicorn's own alike; human lines otherwise; a bad
setting refused naming its variable."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest

from offchain.core import logs
from tests.market.processes import MarketProcess

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.mark.parametrize(
    "database_url", [""], ids=["sqlite"]
)  # the log is the same on every database
async def test_serve_logs_json_lines_with_our_info_and_uvicorns(settings, tmp_path, monkeypatch):
    monkeypatch.setenv(logs.FORMAT_VARIABLE, "json")
    market = MarketProcess(settings, tmp_path / "market.log").start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while "this process leads" not in market.log.read_text():
            assert loop.time() < deadline, market.log.read_text()
            await asyncio.sleep(0.1)
    finally:
        market.stop()
    lines = [json.loads(line) for line in market.log.read_text().splitlines()]
    assert all({"time", "level", "component", "logger", "message"} <= set(line) for line in lines)
    assert all(line["component"] == "market" for line in lines)
    leads = next(line for line in lines if line["message"].startswith("this process leads"))
    assert (leads["level"], leads["logger"]) == ("INFO", "offchain.market.services.leadership")
    assert any(line["logger"] == "uvicorn.error" and line["level"] == "INFO" for line in lines)
    assert all(re.fullmatch(TIME, line["time"]) for line in lines)


def test_human_lines_and_ids_in_json(capsys):
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        logs.configure("provider", {})
        logging.getLogger("unchained.test").info("job %s started", "j1")
        logs.configure("provider", {logs.FORMAT_VARIABLE: "JSON", logs.LEVEL_VARIABLE: "debug"})
        extra = {"job_id": "j1", "channel": "ab"}
        logging.getLogger("unchained.test").debug("accepted", extra=extra)
    finally:  # pytest's own capture back
        root.handlers[:] = handlers
        root.setLevel(level)
    human, line = capsys.readouterr().err.splitlines()[-2:]
    assert re.fullmatch(TIME + " INFO provider unchained.test: job j1 started", human)
    fields = json.loads(line)
    assert (fields["level"], fields["job_id"], fields["channel"]) == ("DEBUG", "j1", "ab")


@pytest.mark.parametrize(
    "environ",
    [{logs.FORMAT_VARIABLE: "xml"}, {logs.LEVEL_VARIABLE: "loud"}],
    ids=["format", "level"],
)
def test_a_bad_log_setting_is_refused_by_name(environ):
    with pytest.raises(logs.LogSettingError, match=next(iter(environ))):
        logs.configure("market", environ)
