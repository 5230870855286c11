"""The market as operators run it: `unchained market serve` in a process of its own, configured
through `UNCHAINED_MARKET_*` variables, that a test can SIGKILL (or that kills itself at a
`crash_at` point)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from devnet.process import free_port
from offchain.market.settings import ENV_PREFIX, MarketSettings

START_TIMEOUT_S = 60


class MarketProcess:
    """One market process; `start` returns once it answers /health."""

    def __init__(self, settings: MarketSettings, log: Path) -> None:
        self.settings, self.log = settings, log
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        values = self.settings.model_dump(exclude={"host", "port"}, exclude_none=True)
        return os.environ | {f"{ENV_PREFIX}{k.upper()}": str(v) for k, v in values.items()}

    def start(self, *flags: str) -> MarketProcess:
        """`flags` go to `unchained market serve` (`--workers 2`)."""
        command = [sys.executable, "-m", "unchained.cli", "market", "serve",
                   "--port", str(self.port), *flags]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.environment()
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.health() is None:
            assert self.process.poll() is None, f"the market exited: see {self.log}"
            assert time.monotonic() < deadline, "the market did not start"
            time.sleep(0.1)
        return self

    def health(self) -> dict | None:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).json()
        except httpx.HTTPError:
            return None

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as with `kill -9` or a power cut."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.wait_dead()

    def wait_dead(self, timeout_s: float = 60) -> int:
        """The exit status once the process has ended (-9 when killed)."""
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
