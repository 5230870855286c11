"""Logging set up one way in every long-running process: each line with its time (UTC, ISO
8601, milliseconds), level, component (market, provider, gateway, devnet) and logger, as
JSON (one object per line, for a log shipper) when `UNCHAINED_LOG_FORMAT=json`, for people
otherwise; `UNCHAINED_LOG_LEVEL` sets the level (INFO by default).

The handler sits on the root logger and uvicorn is run with `log_config=None`, so uvicorn's
own loggers propagate to it: no INFO line of ours is dropped for want of a handler (Python's
last-resort handler prints warnings only), and none printed twice. A record's `job_id` or
`channel` (`log.info(..., extra={"job_id": ...})`) becomes a field of its JSON."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping

from offchain.core.errors import UnchainedError

FORMAT_VARIABLE = "UNCHAINED_LOG_FORMAT"
LEVEL_VARIABLE = "UNCHAINED_LOG_LEVEL"
FORMATS = ("human", "json")
IDS = ("job_id", "channel")  # record attributes a JSON line carries when a call gives them
QUIET = {"httpx": logging.WARNING, "websockets": logging.WARNING}  # a line per request: noise


class LogSettingError(UnchainedError, ValueError):
    """A log variable holds what it cannot: the message names it and the values it takes."""


def _utc(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class JsonLines(logging.Formatter):
    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": _utc(record), "level": record.levelname, "component": self.component,
                "logger": record.name, "message": record.getMessage()}  # fmt: skip
        line |= {name: str(getattr(record, name)) for name in IDS if hasattr(record, name)}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class HumanLines(logging.Formatter):
    def __init__(self, component: str) -> None:
        super().__init__(f"%(utc)s %(levelname)s {component} %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.utc = _utc(record)
        return super().format(record)


def configure(component: str, environ: Mapping[str, str] | None = None) -> None:
    """Send every logger's lines to stderr as the variables say (again: replaces the last)."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(FORMAT_VARIABLE, "human").lower()
    if chosen not in FORMATS:
        raise LogSettingError(f"{FORMAT_VARIABLE}={chosen!r}: takes one of {', '.join(FORMATS)}")
    level = environ.get(LEVEL_VARIABLE, "INFO").upper()
    if not isinstance(logging.getLevelName(level), int):
        raise LogSettingError(f"{LEVEL_VARIABLE}={level!r}: takes DEBUG, INFO, WARNING or ERROR")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines(component) if chosen == "json" else HumanLines(component))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name, quiet in QUIET.items():
        logging.getLogger(name).setLevel(quiet)
