"""The demo's long-running parties as child processes: the market (with its explorer) and the
provider daemon, each `unchained ...` in a session of its own, so a terminal's Ctrl-C reaches
the demo alone and it stops them in order. Their output goes to log files in the data dir."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from offchain.core.errors import UnchainedError
from provider.config import DaemonSettings, Offer, Prices, ProviderConfig, RunnerSettings, to_toml

START_TIMEOUT_S = 120  # three CLIs importing at once on a busy 2-core machine
STOP_TIMEOUT_S = 30
IDENTITY = "unchained-market"  # the default identity: the consumer CLI needs no flag for it
# The demo provider's prices, lovelace per second, as a rented machine costs: a GPU 0.60 ADA an
# hour, a core 0.05, a GiB of memory 0.01 and of /out 0.0036. Its slot (one core, 1 GiB memory
# and 1 GiB of /out, rounded up) costs 18 lovelace a second, 0.0648 ADA an hour; a short job's
# payout is below the ledger's minimum output, so the market leaves it to the provider's daemon,
# which settles such receipts itself (its own change raises its own output): no top-up.
PRICES = Prices(gpu=167, cpu_core=14, memory_gib=3, disk_gib=1)
SLOT = {"cpu_cores": 1, "memory_mib": 512, "disk_mib": 64}  # one job's bundle
# Quick rounds: a demo job settles seconds after its receipt, not minutes.
MARKET_TIMING = {"confirmations": 1, "settle_every_ms": 300, "schedule_every_ms": 300,
                 "leader_poll_ms": 200, "resubmit_after_ms": 2000}  # fmt: skip
DAEMON_TIMING = {"heartbeat_ms": 1000, "poll_s": 1, "payout_every_ms": 1000, "grace_ms": 20_000}
BATCH_WAIT_MS = 120_000  # --jobs N: the batch waits this long at most for all N receipts


class DemoFailed(UnchainedError):
    """A step of the demo did not happen; the message says which and where to look."""


@dataclasses.dataclass
class Child:
    """`unchained ARGS...` in the background, its output appended to `log` (which keeps
    earlier runs' output: only what this run wrote counts as `logged`)."""

    name: str
    args: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    log_start: int = 0  # the log's size when this run started

    def start(self) -> Child:
        command = [sys.executable, "-m", "unchained.cli", *self.args]
        with self.log.open("ab") as log:
            self.log_start = log.tell()
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return self

    def check(self) -> None:
        """DemoFailed once the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise DemoFailed(f"the {self.name} exited ({self.process.returncode}): see {self.log}")

    def wait_for(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            self.check()
            if time.monotonic() > deadline:
                raise DemoFailed(f"the {self.name} did not {what} in {START_TIMEOUT_S} s: "
                                 f"see {self.log}")  # fmt: skip
            time.sleep(0.2)

    def logged(self, text: str) -> bool:
        """Whether this run (not an earlier one appending to the same log) printed `text`."""
        with self.log.open("rb") as log:
            log.seek(self.log_start)
            return text in log.read().decode(errors="replace")

    def stop(self) -> None:
        """SIGTERM and wait (a clean stop); SIGKILL only if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def toml_table(values: dict[str, Any]) -> str:
    """Flat TOML: JSON's strings, integers and booleans are TOML's too."""
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


def market(data_dir: Path, ogmios_url: str, deployment: Path, wallet_key: Path, port: int,
           jobs: int) -> Child:  # fmt: skip
    """`unchained market serve` settling from `wallet_key`, all `jobs` receipts in one batch."""
    config = data_dir / "market.toml"
    config.write_text(toml_table({
        "data_dir": str(data_dir / "market"), "ogmios_url": ogmios_url,
        "deployment": str(deployment), "identity": IDENTITY, "port": port,
        "wallet_key": str(wallet_key), "settle_batch_max": jobs,
        "settle_wait_ms": BATCH_WAIT_MS if jobs > 1 else 0, **MARKET_TIMING,
    }))  # fmt: skip
    args = ["market", "serve", "--config", str(config)]
    return Child("market", args, data_dir / "market.log")


def market_up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).json().get("leader") is True
    except (httpx.HTTPError, ValueError):
        return False


def provider(data_dir: Path, state_dir: Path, ogmios_url: str, deployment: Path,
             market_url: str, slots: int, request_price: int | None = None,
             token_prices: list[int] | None = None, **daemon_settings: Any) -> Child:  # fmt: skip
    """`unchained provider run` offering `slots` CPU bundles of SLOT each, settling its small
    payouts itself as soon as all `slots` jobs' receipts are in (at once for one); endpoints
    at `request_price` a request, llm endpoints at `token_prices` (input, output) a token, and
    the `daemon_settings` (a gateway, its channels' rules)."""
    offer = Offer(gpus=[], **{name: size * slots for name, size in SLOT.items()},
                  cpu_bundles=slots, prices=PRICES, request_price=request_price,
                  token_prices=token_prices)  # fmt: skip
    daemon = DaemonSettings.model_validate({
        "market_url": market_url, "market_identity": IDENTITY, "settle_batch_max": slots,
        "small_payout_wait_ms": BATCH_WAIT_MS if slots > 1 else 0, **DAEMON_TIMING,
        **daemon_settings,
    })  # fmt: skip
    config = data_dir / "provider.toml"
    config.write_text(to_toml(ProviderConfig(
        offer=offer, daemon=daemon, runner=RunnerSettings(state_dir=state_dir)
    )))  # fmt: skip
    args = ["provider", "run", "--config", str(config), "--ogmios-url", ogmios_url,
            "--deployment", str(deployment)]  # fmt: skip
    return Child("provider daemon", args, data_dir / "provider.log")


def gateway(data_dir: Path, ogmios_url: str, deployment: Path, port: int) -> Child:
    """`unchained provider gateway` on 127.0.0.1:`port`, with the provider daemon's config
    (written by `provider` first): its channel book, its deployments, its terms."""
    args = [
        "provider",
        "gateway",
        "--config",
        str(data_dir / "provider.toml"),
        "--ogmios-url",
        ogmios_url,
        "--deployment",
        str(deployment),
        "--listen",
        f"127.0.0.1:{port}",
    ]
    return Child("provider gateway", args, data_dir / "gateway.log")


def gateway_up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/endpoints", timeout=2).status_code == httpx.codes.OK
    except httpx.HTTPError:
        return False
