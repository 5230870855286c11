"""Debian's Prometheus for tests (scripts/setup.sh installs it): `promtool`, and a server
started on a generated config that scrapes the given targets every second, its data in a
temp folder, stopped at the end."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from devnet.process import free_port

ALERTS = Path(__file__).parents[2] / "docs" / "ops" / "alerts.yml"
START_TIMEOUT_S = 30


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run scripts/setup.sh (Debian's prometheus)")
    return found


def config(jobs: dict[str, str]) -> dict:
    """Scrape each job's one HOST:PORT every second; evaluate the project's alert rules."""
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target]}]}
            for job, target in jobs.items()
        ],
    }


@contextlib.contextmanager
def prometheus(folder: Path, jobs: dict[str, str]) -> Iterator[httpx.Client]:
    """A Prometheus server scraping `jobs` (name -> HOST:PORT); yields a client of its API."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config(jobs)))
    port = free_port()
    command = [
        tool("prometheus"), f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
    ]  # fmt: skip
    with (folder / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _answers(client):
                assert process.poll() is None, (folder / "prometheus.log").read_text()
                assert time.monotonic() < deadline, "Prometheus did not start"
                time.sleep(0.1)
            yield client
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/-/ready").status_code == 200
    except httpx.HTTPError:
        return False
