"""Run `unchained devnet` as a child process (for the demo and tests), reached over its socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from pycardano import Address, Network, PaymentSigningKey, PaymentVerificationKey

from offchain.chain.context import OgmiosContext, chain_context
from offchain.chain.ogmios import request
from offchain.chain.submit import confirmed_after

# The realistic profile with time scaled down 40 times for tests and the demo: 25 ms slots, so
# Praos's one block in 20 slots comes every 0.5 s on average (mainnet: 20 s), forks included.
SCALED_SLOT_LENGTH_MS = 25


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def funded(url: str, address: str, lovelace: int, timeout_s: float = 60) -> str:
    """`devnet/fund`, confirmed: the transaction's id once it is in a block (through forks)."""
    sent: list[str] = []

    async def send() -> str:
        answer = await request(url, "devnet/fund", {"address": address, "lovelace": lovelace})
        sent.append(answer["transaction"]["id"])
        return sent[0]

    await confirmed_after(url, send, timeout_s=timeout_s)
    return sent[0]


class DevnetProcess:
    """A devnet server process with its own data directory."""

    def __init__(
        self,
        data_dir: Path,
        slot_length_ms: int = 100,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        profile: str = "instant",
    ) -> None:
        """`extra_args` go to `unchained devnet` (`realistic()` for Praos's blocks)."""
        self.data_dir = data_dir
        self.profile = profile
        self.slot_length_ms = slot_length_ms
        self.port = port or free_port()
        self.extra_args = extra_args
        self.process: subprocess.Popen[str] | None = None

    @classmethod
    def realistic(cls, data_dir: Path, *extra_args: str, port: int | None = None) -> DevnetProcess:
        """A devnet of the realistic profile on scaled time (`SCALED_SLOT_LENGTH_MS`)."""
        return cls(data_dir, SCALED_SLOT_LENGTH_MS, port, extra_args, profile="realistic")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, reset: bool = False) -> DevnetProcess:
        command = [
            sys.executable, "-m", "unchained.cli", "devnet",
            "--port", str(self.port),
            "--data-dir", str(self.data_dir),
            "--slot-length", str(self.slot_length_ms),
            *self.extra_args,
        ]  # fmt: skip
        if reset:
            command.append("--reset")
        if self.profile != "instant":  # else the settings' (a --config file's) profile holds
            command += ["--profile", self.profile]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "devnet.log", "a")  # noqa: SIM115 - the child writes to it
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, text=True, env=os.environ.copy()
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"devnet exited with {self.process.returncode}; see {log.name}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("devnet did not start listening within 60 s")

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask for a clean stop (SIGTERM or SIGINT) and wait until the process has exited."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signum)
            self.process.wait(timeout=20)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)

    def context(self) -> OgmiosContext:
        """A fresh pycardano context (pycardano caches the tip for 1 s per context)."""
        return chain_context(self.url)

    def key(self, name: str) -> PaymentSigningKey:
        return PaymentSigningKey.load(str(self.data_dir / "wallets" / f"{name}.skey"))

    def address(self, name: str) -> Address:
        vkey = PaymentVerificationKey.from_signing_key(self.key(name))
        return Address(vkey.hash(), network=Network.TESTNET)
