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

# The realistic profile with time scaled down 40 times for tests and the demo: 25 ms slots, so
# Praos's one block in 20 slots comes every 0.5 s on average (mainnet: 20 s), forks included.
SCALED_SLOT_LENGTH_MS = 25


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DevnetProcess:
    """A devnet server process with its own data directory."""

    def __init__(
        self,
        data_dir: Path,
        slot_length_ms: int = 100,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        """`extra_args` go to `unchained devnet` (e.g. `realistic()` for Praos blocks)."""
        self.data_dir = data_dir
        self.slot_length_ms = slot_length_ms
        self.port = port or free_port()
        self.extra_args = extra_args
        self.process: subprocess.Popen[str] | None = None

    @classmethod
    def realistic(cls, data_dir: Path, *extra_args: str) -> DevnetProcess:
        """A devnet of the realistic profile on scaled time (`SCALED_SLOT_LENGTH_MS`)."""
        args = ("--profile", "realistic", *extra_args)
        return cls(data_dir, slot_length_ms=SCALED_SLOT_LENGTH_MS, extra_args=args)

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
