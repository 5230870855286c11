"""The pod agent: a small background process (`unchained pod start` starts it detached, one per
channel) that pays for the renter's pods on that channel, second by second, while they run.

Every `interval_s` it reads each of the channel's pods at its gateway (`GET /deployments/<name>`:
state and `due`, what the channel owes now, every deployment on it) and, when the due is above
the last IOU, signs an IOU for exactly that due and sends it (`POST /deployments/<name>/pay`);
a 402 that names a newer due (a second passed on the way) is paid once more. Paying the exact
due keeps the channel's last IOU equal to what the provider's book says was run, so when the
pods stop the last IOU, the one the provider claims, is price per second times the whole
seconds they ran. Once none of the channel's pods is pending or running it pays the final due
(frozen by the stops) and exits.

The renter does not take the gateway's word for the due: an IOU is signed only up to what the
channel's pods could have earned since they were deployed (`allowed`: each pod's price per
second times the seconds since its deploy was sent, plus SLACK_S seconds, over the channel's
last IOU when the agent first started for it). A gateway asking more gets nothing signed and
the agent stops paying: the provider then stops the pods (their IOUs lag), the renter loses
at most the provider's credit.

One process signs a channel's IOUs at a time (`IouSigner`): the agent holds a lock file per
channel for its whole life, and `pod stop` waits for it to finish rather than sign itself.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from consumer.deployment_store import DeploymentRecord, DeploymentStore
from consumer.errors import ConsumerError
from consumer.iou_signer import IouSigner
from offchain.protocol.iou import IOU_HEADER

log = logging.getLogger("unchained.pod_agent")

INTERVAL_S = 2.0
SLACK_S = 2  # the seconds of clock skew and latency a due may run ahead of the renter's count
LIVE = ("pending", "running")
POD = "pod"
HTTP_TIMEOUT_S = 10.0
AGENTS = "pod-agents"


@dataclass(frozen=True)
class Round:
    """What one round saw and did."""

    live: list[str]  # the channel's pods still pending or running
    due: int  # what the channel owes, as the gateway said (0: no pod answered)
    signed: int  # the channel's last IOU after the round


class PodAgent:
    """Pays for the pods recorded on one channel (`DeploymentStore`), one round at a time."""

    def __init__(
        self,
        signer: IouSigner,
        store: DeploymentStore,
        http: httpx.Client,
        base: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signer = signer
        self.store = store
        self.http = http
        self.base = base  # the channel's last IOU before any of these pods was paid for
        self.clock = clock
        self.channel_id = signer.channel.hex()

    def pods(self) -> list[DeploymentRecord]:
        return [r for r in self.store.on_channel(self.channel_id) if r.kind == POD]

    def allowed(self, pods: list[DeploymentRecord], states: dict[str, dict[str, Any]]) -> int:
        """The most the channel may owe now by the renter's own count (see the module)."""
        now_ms = int(self.clock() * 1000)
        total = self.base
        for pod in pods:
            state = states.get(pod.name, {})
            end_ms = state.get("stopped_ms") or now_ms
            seconds = max(0, min(end_ms, now_ms) - pod.created_ms) / 1000
            total += pod.price_per_second * (math.ceil(seconds) + SLACK_S)
        return total

    def round(self) -> Round:
        """Read the pods, pay the due if it grew; ConsumerError when a due is refused."""
        pods = self.pods()
        states = {}
        for pod in pods:
            answer = self.http.get(f"{pod.gateway_url.rstrip('/')}/deployments/{pod.name}")
            if answer.status_code == 200:
                states[pod.name] = answer.json()
        live = sorted(name for name, state in states.items() if state["state"] in LIVE)
        if not states:
            return Round(live, 0, self.signer.signed)
        due = max(int(state["due"]) for state in states.values())
        payee = next(pod for pod in pods if pod.name in states)
        for _ in range(3):  # a due that grew while the IOU was on its way: once or twice more
            if due <= self.signer.signed:
                break
            iou = self.signer.pay(due, self.allowed(pods, states))
            url = f"{payee.gateway_url.rstrip('/')}/deployments/{payee.name}/pay"
            answer = self.http.post(url, headers={IOU_HEADER: iou.to_header()})
            if answer.status_code == 200:
                break
            if answer.status_code != 402:
                raise ConsumerError(f"{url} answered {answer.status_code}: {answer.text[:200]}")
            due = int(answer.json()["due"])
        return Round(live, due, self.signer.signed)


def agent_dir(state_dir: Path) -> Path:
    return state_dir / AGENTS


def lock_path(state_dir: Path, channel_id: str) -> Path:
    return agent_dir(state_dir) / f"{channel_id}.lock"


def base_path(state_dir: Path, channel_id: str) -> Path:
    return agent_dir(state_dir) / f"{channel_id}.json"


@contextmanager
def holding(state_dir: Path, channel_id: str) -> Iterator[IO[str] | None]:
    """The channel's agent lock, held for the block (None: another process holds it)."""
    path = lock_path(state_dir, channel_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        yield lock


def running(state_dir: Path, channel_id: str) -> bool:
    """Whether an agent pays for the channel now (it holds the lock)."""
    with holding(state_dir, channel_id) as lock:
        return lock is None


def wait_done(state_dir: Path, channel_id: str, timeout_s: float) -> bool:
    """Wait for the channel's agent to exit; True if it did (or none ran)."""
    deadline = time.monotonic() + timeout_s
    while running(state_dir, channel_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def run(
    signer: IouSigner, store: DeploymentStore, state_dir: Path, interval_s: float = INTERVAL_S
) -> int:
    """The agent's life for the signer's channel: rounds until no pod is live (after its final
    payment), or SIGTERM (one last round first). 0 when done, 1 when it stopped paying, 2 if
    another agent holds the channel."""
    channel_id = signer.channel.hex()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with holding(state_dir, channel_id) as lock, httpx.Client(timeout=HTTP_TIMEOUT_S) as http:
        if lock is None:
            log.warning("another agent pays for channel %s", channel_id)
            return 2
        base_file = base_path(state_dir, channel_id)
        if not base_file.exists():
            base_file.write_text(json.dumps({"base": signer.signed}))
        agent = PodAgent(signer, store, http, json.loads(base_file.read_text())["base"])
        errors = 0
        while True:
            try:
                done = agent.round()
                errors = 0
                log.info("channel %s: due %d, signed %d, live %s", channel_id, done.due,
                         done.signed, done.live)  # fmt: skip
                if not done.live or stopping:
                    base_file.unlink(missing_ok=True)
                    return 0
            except ConsumerError as exc:  # a due it will not sign: pay no more
                log.error("channel %s: not paying: %s", channel_id, exc)
                return 1
            except (httpx.HTTPError, ValueError, KeyError) as exc:  # the gateway away a while
                errors += 1
                log.warning("channel %s: round failed (%d in a row): %r", channel_id, errors, exc)
            time.sleep(interval_s)


def spawn(arguments: list[str], state_dir: Path, channel_id: str) -> int:
    """Start the agent detached (its own session, output to a log beside its lock); its pid.
    `arguments` are the CLI's connection options the agent needs (key, deployment, ...)."""
    log_file = agent_dir(state_dir) / f"{channel_id}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "consumer.pod_agent", *arguments, "--channel", channel_id],
            stdin=subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True,
        )  # fmt: skip
    return process.pid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m consumer.pod_agent", description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--deployment", type=Path, required=True)
    parser.add_argument("--network", default="testnet")
    parser.add_argument("--channel", required=True)
    parser.add_argument("--interval", type=float, default=INTERVAL_S)
    flags = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from consumer.cli import Env
    from consumer.endpoint_cli import signer_of

    env = Env(key=flags.key, deployment=flags.deployment, state_dir=flags.state_dir,
              network=flags.network)  # fmt: skip
    signer = signer_of(env, flags.channel)
    return run(signer, DeploymentStore(flags.state_dir), flags.state_dir, flags.interval)


if __name__ == "__main__":
    sys.exit(main())
