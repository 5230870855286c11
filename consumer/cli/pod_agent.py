"""The pod agent: a small background process (`unchained pod start` starts it detached, one per
channel) that pays for the renter's pods on that channel, second by second, while they run.

Every `interval_s` it reads the channel's deployments at their gateway (`GET
/deployments/<name>`) and pays what the channel owes now with `pay_due` (the endpoint
commands' rule: the exact due the gateway names, signed only up to the renter's own count of
the seconds run, a second of slack each; `POST /deployments/<name>/pay`); a 402 because a
second passed on the way is paid again at once. Paying the exact due keeps the channel's last
IOU equal to what the provider's book says was run, so when the pods stop the last IOU, the
one the provider claims, is price per second times the whole seconds they ran. Once none of
the channel's pods is pending or running it pays the final due (frozen by the stops) and
exits. A due above the renter's count is refused unsigned and the agent stops paying: the
provider then stops the pods (their IOUs lag), the renter loses at most the provider's credit.

One process signs a channel's IOUs at a time (`IouSigner`): the agent holds a lock file per
channel for its whole life, and `pod stop` waits for it to finish rather than sign itself.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.sdk.endpoint_client import EndpointRefused, GatewayControl, pay_due
from consumer.sdk.errors import ConsumerError
from consumer.sdk.iou_signer import IouNotSigned, IouSigner
from consumer.sdk.rental_store import RentalRecord, RentalStore
from offchain.chain.network import DEFAULT_NETWORK

log = logging.getLogger("unchained.pod_agent")

INTERVAL_S = 2.0
LIVE = ("pending", "running")
POD = "pod"
PAYMENT_REQUIRED = 402
NOT_FOUND = 404
ATTEMPTS = 3
MAX_FAILURES = 30  # rounds in a row the gateway did not take the due: the agent gives up
AGENTS = "pod-agents"


@dataclass(frozen=True)
class Round:
    """What one round saw and did."""

    live: list[str]  # the channel's pods still pending or running
    signed: int  # the channel's last IOU after the round


class PodAgent:
    """Pays what one channel owes for the deployments recorded on it, one round at a time."""

    def __init__(
        self,
        control: GatewayControl,
        signer: IouSigner,
        records: Callable[[], list[RentalRecord]],
    ) -> None:
        self.control = control
        self.signer = signer
        self.records = records

    def round(self) -> Round:
        """Read the deployments, pay the due if it grew; ConsumerError when it is refused."""
        statuses: dict[str, dict[str, Any]] = {}
        known = []
        for record in self.records():
            try:
                channel = bytes.fromhex(record.channel_id)
                statuses[record.name] = self.control.status(record.name, channel)
            except ConsumerError as exc:
                if exc.details.get("status") != NOT_FOUND:  # 404: gone, workspace and all
                    raise
                continue
            known.append((record.name, record.created_ms))
        for attempt in range(ATTEMPTS):
            try:
                pay_due(self.control, self.signer, known)
                break
            except ConsumerError as exc:  # 402: a second passed since the due was read
                if exc.details.get("status") != PAYMENT_REQUIRED or attempt == ATTEMPTS - 1:
                    raise
        live = sorted(name for name, status in statuses.items()
                      if status["kind"] == POD and status["state"] in LIVE)  # fmt: skip
        return Round(live, self.signer.signed)


def agent_dir(state_dir: Path) -> Path:
    return state_dir / AGENTS


def lock_path(state_dir: Path, channel_id: str) -> Path:
    return agent_dir(state_dir) / f"{channel_id}.lock"


def pid_path(state_dir: Path, channel_id: str) -> Path:
    """The process id of the agent that holds the channel's lock (written once it holds it)."""
    return agent_dir(state_dir) / f"{channel_id}.pid"


@contextmanager
def holding(state_dir: Path, channel_id: str, wait: bool = False) -> Iterator[bool]:
    """Whether this process holds the channel's agent lock for the block: False if another
    does (with `wait`, it waits for it instead)."""
    path = lock_path(state_dir, channel_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def running(state_dir: Path, channel_id: str) -> bool:
    """Whether an agent pays for the channel now (it holds the lock)."""
    with holding(state_dir, channel_id) as held:
        return not held


def wait_done(state_dir: Path, channel_id: str, timeout_s: float) -> bool:
    """Wait for the channel's agent to exit; True if it did (or none ran)."""
    deadline = time.monotonic() + timeout_s
    while running(state_dir, channel_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def run(
    control: GatewayControl,
    channel_id: str,
    new_signer: Callable[[], IouSigner],
    store: RentalStore,
    state_dir: Path,
    interval_s: float = INTERVAL_S,
) -> int:
    """The agent's life for the signer's channel, once it holds the channel's lock (an agent
    started while another runs waits for it: that one may be paying its last round): rounds
    until no pod on it is live (after paying its final due), or SIGTERM (one last round
    first). 0 when done, 1 when it stopped paying (a due above the renter's count, or
    MAX_FAILURES rounds failed in a row). The signer is made once the lock is held: it starts
    from the channel's last IOU, whoever signed it."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with holding(state_dir, channel_id, wait=True):  # after an agent that is about to exit
        pid_path(state_dir, channel_id).write_text(str(os.getpid()))
        agent = PodAgent(control, new_signer(), lambda: store.on_channel(channel_id))
        failures = 0
        while True:
            try:
                done = agent.round()
                failures = 0
                log.info("channel %s: %d signed, live %s", channel_id, done.signed, done.live)
                if not done.live or stopping:
                    return 0
            except (EndpointRefused, IouNotSigned) as exc:  # a due above the renter's count
                log.error("channel %s: not paying any more: %s", channel_id, exc)
                return 1
            except ConsumerError as exc:  # the gateway away, a refusal it may take back
                failures += 1
                log.warning("channel %s: round failed (%d in a row): %s", channel_id, failures,
                            exc)  # fmt: skip
                if failures >= MAX_FAILURES:
                    return 1
            time.sleep(interval_s)


def spawn(arguments: list[str], state_dir: Path, channel_id: str) -> int:
    """Start the agent detached (its own session, output to a log beside its lock); its pid.
    `arguments` are the CLI's connection options the agent needs (key, deployment, ...)."""
    log_file = agent_dir(state_dir) / f"{channel_id}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "consumer.cli.pod_agent", *arguments, "--channel", channel_id],
            stdin=subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True,
        )  # fmt: skip
    return process.pid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m consumer.cli.pod_agent", description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--deployment", type=Path, required=True)
    parser.add_argument("--network", default=DEFAULT_NETWORK)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--interval", type=float, default=INTERVAL_S)
    flags = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from consumer.cli.endpoint import control_of, signer_of
    from consumer.cli.main import Env

    env = Env(key=flags.key, deployment=flags.deployment, state_dir=flags.state_dir,
              network=flags.network)  # fmt: skip
    store = RentalStore(flags.state_dir)
    pods = [r for r in store.on_channel(flags.channel) if r.kind == POD]
    if not pods:
        log.error("no pod recorded on channel %s in %s", flags.channel, flags.state_dir)
        return 1
    with control_of(env, pods[0]) as control:
        new_signer = functools.partial(signer_of, env, flags.channel)
        return run(control, flags.channel, new_signer, store, flags.state_dir, flags.interval)


if __name__ == "__main__":
    sys.exit(main())
