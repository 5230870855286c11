"""The network of a `network: true` job: a bridge of its own (no other job on it), whose traffic
may go to the public Internet only. Packets from any such bridge (interfaces `unchj*`) to
loopback, private, link-local (169.254.169.254, the cloud metadata service), shared CGNAT,
test, multicast and reserved ranges are rejected in the DOCKER-USER chain (which docker runs
before its own forwarding rules), and anything addressed to the host itself is rejected in
INPUT. The one hole is DNS (port 53) to the host's own resolvers: docker's embedded resolver
forwards a job's lookups to them from the job's network namespace.

A service's bridge (interfaces `unchs*`, `provider.rentals.services`) is fenced harder: only replies
to connections made to it pass (conntrack ESTABLISHED/RELATED), in DOCKER-USER and in INPUT,
so a service answers the gateway and opens no connection to the host, its LAN or the world.

The rules are installed idempotently (one atomic `iptables-restore --noflush` of our chains,
then the jumps added only where missing) before each networked job starts. Where they cannot
be installed (no iptables, no DOCKER-USER chain because docker runs with `iptables=false`),
networked jobs are refused: never run unprotected.
"""

from __future__ import annotations

import hashlib
import ipaddress
import subprocess
from contextlib import suppress
from pathlib import Path

import docker
from docker.errors import APIError, NotFound

from offchain.core.errors import UnchainedError

IPTABLES = "iptables"
BRIDGE_PREFIX = "unchj"  # + 10 hex digits: 15 characters, the kernel's limit for a name
SERVICE_BRIDGE_PREFIX = "unchs"  # a service's bridge (provider.rentals.services), as long
FORWARD_CHAIN = "UNCHAINED-EGRESS"
INPUT_CHAIN = "UNCHAINED-EGRESS-IN"
SERVICE_FORWARD_CHAIN = "UNCHAINED-SERVICES"
SERVICE_INPUT_CHAIN = "UNCHAINED-SERVICES-IN"
REPLIES = ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"]
BLOCKED = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
    "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
)  # fmt: skip
REJECT = ["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"]
RESOLV_CONF = Path("/etc/resolv.conf")
LABEL = "unchained.egress"


class EgressUnavailable(UnchainedError, RuntimeError):
    """The egress rules cannot be installed here: networked jobs are refused."""


def network_name(runner_id: str, job_id: str) -> str:
    return f"unchained-{runner_id}-{job_id}"


def bridge_name(runner_id: str, job_id: str) -> str:
    digest = hashlib.sha256(f"{runner_id}/{job_id}".encode()).hexdigest()
    return BRIDGE_PREFIX + digest[:10]


def resolvers(resolv_conf: Path = RESOLV_CONF) -> list[str]:
    """The host's IPv4 nameservers outside loopback (docker queries loopback ones itself)."""
    found = []
    for line in resolv_conf.read_text().splitlines() if resolv_conf.exists() else []:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                address = ipaddress.ip_address(words[1])
            except ValueError:
                continue
            if address.version == 4 and not address.is_loopback:
                found.append(str(address))
    return found


def ruleset(nameservers: list[str]) -> str:
    """Our chains, replaced whole by `iptables-restore --noflush`: a networked job's (the
    public Internet only) and a service's (replies to connections made to it, nothing else)."""
    reject = " ".join(REJECT)
    chains = (FORWARD_CHAIN, INPUT_CHAIN, SERVICE_FORWARD_CHAIN, SERVICE_INPUT_CHAIN)
    lines = ["*filter", *(f":{chain} - [0:0]" for chain in chains)]
    for chain in (SERVICE_FORWARD_CHAIN, SERVICE_INPUT_CHAIN):
        lines += [f"-A {chain} {' '.join(REPLIES)}", f"-A {chain} {reject}"]
    for server in nameservers:
        for protocol in ("udp", "tcp"):
            lines.append(f"-A {FORWARD_CHAIN} -d {server}/32 -p {protocol} --dport 53 -j RETURN")
    lines += [f"-A {FORWARD_CHAIN} -d {network} {reject}" for network in BLOCKED]
    lines += [f"-A {INPUT_CHAIN} {reject}", "COMMIT", ""]
    return "\n".join(lines)


def _iptables(*arguments: str, stdin: str | None = None, tool: str = IPTABLES) -> int:
    try:
        done = subprocess.run(
            [tool, "-w", *arguments] if tool == IPTABLES else [tool, *arguments],
            input=stdin, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EgressUnavailable(f"networked jobs are refused: cannot run {tool}: {exc}") from exc
    if done.returncode not in (0, 1) or (done.returncode == 1 and stdin is not None):
        raise EgressUnavailable(
            f"networked jobs are refused: {tool} {' '.join(arguments)}: {done.stderr.strip()}"
        )
    return done.returncode


def install_rules() -> None:
    """Our chains (atomically replaced), and a jump to each from DOCKER-USER and INPUT."""
    if _iptables("-n", "-L", "DOCKER-USER") != 0:
        raise EgressUnavailable(
            "networked jobs are refused: no DOCKER-USER chain (is docker running with iptables?)"
        )
    _iptables("--noflush", stdin=ruleset(resolvers()), tool=IPTABLES + "-restore")
    jumps = (
        ("DOCKER-USER", BRIDGE_PREFIX, FORWARD_CHAIN), ("INPUT", BRIDGE_PREFIX, INPUT_CHAIN),
        ("DOCKER-USER", SERVICE_BRIDGE_PREFIX, SERVICE_FORWARD_CHAIN),
        ("INPUT", SERVICE_BRIDGE_PREFIX, SERVICE_INPUT_CHAIN),
    )  # fmt: skip
    for parent, prefix, chain in jumps:
        jump = ["-i", f"{prefix}+", "-j", chain]
        if _iptables("-C", parent, *jump) != 0:
            _iptables("-I", parent, "1", *jump)
            if _iptables("-C", parent, *jump) != 0:
                raise EgressUnavailable(f"networked jobs are refused: cannot add {jump}")


def create_network(client: docker.DockerClient, runner_id: str, job_id: str) -> str:
    """The job's own bridge, behind the rules (installed first); its name for the container."""
    install_rules()
    name = network_name(runner_id, job_id)
    try:
        client.networks.create(
            name, driver="bridge", labels={LABEL: runner_id}, check_duplicate=True,
            options={
                "com.docker.network.bridge.name": bridge_name(runner_id, job_id),
                "com.docker.network.bridge.enable_icc": "false",
            },
        )  # fmt: skip
    except APIError as exc:
        if exc.status_code != 409:  # 409: made already, by this job before a crash
            raise
    return name


def remove_network(client: docker.DockerClient, runner_id: str, job_id: str) -> None:
    """Remove the job's bridge if there is one (its container is gone by now)."""
    with suppress(NotFound):
        client.networks.get(network_name(runner_id, job_id)).remove()
