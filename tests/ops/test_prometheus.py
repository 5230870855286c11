"""A real Prometheus scrapes the three services as an operator runs them: the market (uvicorn
in this process), `unchained provider run` and `unchained provider gateway` (processes of
their own), each target seen up through its API, a metric of each read back by a query, and
the project's alert rules loaded and evaluated; the daemon killed, its offline alert seen
pending."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from devnet.process import free_port
from offchain.market.models import JobState
from tests.ops.prometheus import prometheus
from tests.provider.daemon_harness import daemon_on_market, quiet_market

WAIT_S = 60
T = TypeVar("T")


def until(what: str, found: Callable[[], T]) -> T:
    """`found()` once it is truthy (polled: the evidence, not a clock)."""
    deadline = time.monotonic() + WAIT_S
    while not (value := found()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)
    return value


@contextmanager
def gateway_process(config: Path, ogmios_url: str, deployment: Path, log: Path) -> Iterator[str]:
    """`unchained provider gateway` on a free port; yields its URL once it answers."""
    url = f"http://127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "unchained.cli", "provider", "gateway", "--config",
               str(config), "--ogmios-url", ogmios_url, "--deployment", str(deployment),
               "--listen", url.removeprefix("http://")]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        until("the gateway answers", lambda: _get(f"{url}/endpoints") == 200)
        assert process.poll() is None, log.read_text()
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _get(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None


def query(prom: httpx.Client, expression: str) -> list[dict[str, Any]]:
    """The instant vector `expression` evaluates to now (empty until scraped)."""
    answer = prom.get("/api/v1/query", params={"query": expression}).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


@pytest.mark.docker  # the daemon and the gateway open the engine
async def test_prometheus_scrapes_market_daemon_and_gateway(devnet, tmp_path):
    deployment_file, _, settings = await quiet_market(devnet, tmp_path)
    targets = {"unchained-provider": f"127.0.0.1:{free_port()}",
               "unchained-gateway": f"127.0.0.1:{free_port()}"}  # fmt: skip
    async with daemon_on_market(
        devnet, tmp_path, deployment_file, settings, bundles=2,
        metrics_listen=targets["unchained-provider"],
        gateway_metrics_listen=targets["unchained-gateway"],
    ) as (daemon, _, market_url):  # fmt: skip
        with gateway_process(daemon.config, devnet.url, deployment_file, tmp_path / "gw.log"):
            targets["unchained-market"] = market_url.removeprefix("http://")
            with prometheus(tmp_path / "prometheus", targets) as prom:

                def all_up() -> bool:
                    active = prom.get("/api/v1/targets").json()["data"]["activeTargets"]
                    up = {t["labels"]["job"] for t in active if t["health"] == "up"}
                    return up == set(targets)

                until("every target up", all_up)
                free = until(
                    "the daemon's slots",
                    lambda: query(
                        prom, 'unchained_provider_slots{job="unchained-provider",state="free"}'
                    ),
                )
                assert free[0]["value"][1] == "2"
                listed = until(
                    "the gateway's requests",
                    lambda: query(
                        prom,
                        'unchained_gateway_http_requests_total{route="/endpoints",status="200"}',
                    ),
                )
                assert float(listed[0]["value"][1]) >= 1
                offers = until(
                    "the daemon's offer at the market",
                    lambda: query(prom, 'unchained_market_http_requests_total{method="POST"}'),
                )
                routes = {series["metric"]["route"] for series in offers}
                assert "/offers" in routes, routes  # a template: never a raw path
                jobs = until("jobs by state", lambda: query(prom, "unchained_market_jobs"))
                states = {j["metric"]["state"]: j["value"][1] for j in jobs}
                assert states == {state.value: "0" for state in JobState}  # no job yet

                def rules() -> dict[str, str]:
                    groups = prom.get("/api/v1/rules").json()["data"]["groups"]
                    return {rule["name"]: rule["health"] for g in groups for rule in g["rules"]}

                until("the alert rules evaluated", lambda: set(rules().values()) == {"ok"})
                assert set(rules()) == {"UnchainedFollowerStalled", "UnchainedSettlerWalletLow",
                                        "UnchainedSettleBatchesFailing",
                                        "UnchainedProviderDaemonOffline"}  # fmt: skip

                daemon.stop()  # SIGKILL: its scrape fails, the offline alert goes pending

                def daemon_alert() -> list[dict[str, Any]]:
                    alerts = prom.get("/api/v1/alerts").json()["data"]["alerts"]
                    name = "UnchainedProviderDaemonOffline"
                    return [a for a in alerts if a["labels"]["alertname"] == name]

                (alert,) = until("the daemon offline alert", daemon_alert)
                assert alert["state"] == "pending"  # for 2 minutes before it fires
                assert alert["labels"]["instance"] == targets["unchained-provider"]
