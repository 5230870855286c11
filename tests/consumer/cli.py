"""The `unchained` CLI as a user runs it: a real process with the consumer's settings in its
environment, and in a real terminal (tmux) whose screen the test reads back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from offchain.protocol.tx.txbuild import Wallet
from tests.consumer.conftest import IDENTITY
from tests.consumer.test_sdk import SPEC
from tests.protocol.onchain import tx_fee as tx_fee  # where its users import it from
from tests.protocol.onchain import wallet

# `python -m unchained.cli`, each command a process of its own, forked from a zygote that has
# the third-party libraries imported already (tests/cli_launch.py): one per pytest worker
ZYGOTE = Path(tempfile.gettempdir()) / f"unchained-cli-{os.getpid()}.sock"
UNCHAINED = [sys.executable, "-I", "-S", str(Path(__file__).parent.parent / "cli_launch.py"),
             str(ZYGOTE), str(os.getpid())]  # fmt: skip


def cli_env(market, devnet, key: Path, state_dir: Path, identity: str = IDENTITY) -> dict[str, str]:
    return {
        **os.environ, "UNCHAINED_CONSUMER_MARKET_URL": market.url,
        "UNCHAINED_CONSUMER_MARKET_IDENTITY": identity, "UNCHAINED_OGMIOS_URL": devnet.url,
        "UNCHAINED_DEPLOYMENT": str(market.deployment_path), "UNCHAINED_CONSUMER_KEY": str(key),
        "UNCHAINED_CONSUMER_STATE_DIR": str(state_dir), "COLUMNS": "120",
    }  # fmt: skip


def run(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*UNCHAINED, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def run_json(env: dict[str, str], *args: str, cwd: Path) -> tuple[int, Any]:
    done = run(env, *args, "--json", cwd=cwd)
    return done.returncode, json.loads(done.stdout)


async def funded_key(devnet, tmp_path: Path, lovelace: int) -> tuple[Wallet, Path]:
    """A fresh key holding exactly `lovelace`, saved as `consumer.skey` for the CLI."""
    funded = await wallet(devnet, lovelace)
    path = tmp_path / "consumer.skey"
    funded.key.save(str(path))
    return funded, path


async def ready_to_submit(market, provider, devnet, tmp_path: Path) -> tuple[Wallet, Path, dict]:
    """A key holding 100 ADA, the CLI's environment (its state in `tmp_path/state`), the tests'
    job spec at `tmp_path/job.yaml` and the provider's offer up: `job submit job.yaml` next."""
    funded, key = await funded_key(devnet, tmp_path, 100_000_000)
    env = cli_env(market, devnet, key, tmp_path / "state")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(SPEC))
    await provider.offer()
    return funded, key, env


class Terminal:
    """One tmux session of 120x40 running a command; `screen()` is what a person would see."""

    def __init__(self, env: dict[str, str], args: list[str], cwd: Path) -> None:
        assert shutil.which("tmux"), "tmux is missing: run scripts/setup.sh"
        self.name = f"unchained-test-{uuid.uuid4().hex[:8]}"
        self.env = env
        command = " ".join(f"'{part}'" for part in [*UNCHAINED, *args])
        self._tmux("new-session", "-d", "-s", self.name, "-x", "120", "-y", "40", "-c", str(cwd),
                   f"{command}; echo EXIT=$?; sleep 600")  # fmt: skip

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", *args], env=self.env, capture_output=True, text=True,
                              check=True)  # fmt: skip
        return done.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def wait_for(self, *texts: str, timeout_s: float = 60) -> str:
        until = time.monotonic() + timeout_s
        while True:
            screen = self.screen()
            if all(text in screen for text in texts):
                return screen
            assert time.monotonic() < until, f"{texts} not on screen:\n{screen}"
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], env=self.env, check=False)
