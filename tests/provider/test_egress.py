"""A `network: true` job on the real engine cannot reach the host or its LAN. A network
namespace plays the LAN and the cloud: behind a veth pair it holds 10.254.77.2 and
169.254.169.254, each with an HTTP server; the host serves on all its addresses too. A
container on docker's plain bridge reaches all of them (so the test can see a hole); the
job's own network reaches none, while DNS still answers. This machine has no route to the
Internet, so only the blocking side is tested."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from ipaddress import ip_address, ip_network

import pytest

from provider.sandbox import egress
from provider.sandbox.inputs import FetchPolicy
from provider.selftest.checks import job, log_text

LAN = "10.254.77.2"
METADATA = "169.254.169.254"
PORT = 8081


def sh(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True)


@pytest.fixture(scope="module")
def lan() -> Iterator[None]:
    """The namespace, its veth pair, routes and server; all gone afterwards."""
    namespace, veth = f"unch-lan{os.getpid()}", f"uvl{os.getpid() % 100_000}"
    sh("ip", "netns", "add", namespace)
    server = None
    try:
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "lan0", "netns", namespace)
        sh("ip", "addr", "add", "10.254.77.1/24", "dev", veth)
        sh("ip", "link", "set", veth, "up")
        inside = ["ip", "netns", "exec", namespace]
        sh(*inside, "ip", "addr", "add", f"{LAN}/24", "dev", "lan0")
        sh(*inside, "ip", "addr", "add", f"{METADATA}/32", "dev", "lan0")
        sh(*inside, "ip", "link", "set", "lan0", "up")
        sh(*inside, "ip", "link", "set", "lo", "up")
        sh(*inside, "ip", "route", "add", "default", "via", "10.254.77.1")
        sh("ip", "route", "add", f"{METADATA}/32", "dev", veth)
        server = subprocess.Popen(
            [*inside, sys.executable, "-m", "http.server", str(PORT), "--bind", "0.0.0.0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)
        yield
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)  # takes the veth


@pytest.fixture(scope="module")
def host_server() -> Iterator[int]:
    """An HTTP server on every address of the host; its port."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def host_address() -> str:
    """The host's first global-scope IPv4 address outside docker's bridges."""
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    for line in shown.splitlines():
        name, address = line.split()[1], line.split()[3].split("/")[0]
        if not name.startswith(("docker", "br-", egress.BRIDGE_PREFIX, "uvl")):
            return address
    pytest.fail("the host has no address outside docker's bridges to try reaching")


def script(host_port: int) -> str:
    """Try each target, saying REACHED or blocked for each, then look a name up."""
    targets = [f"{METADATA} {PORT}", f"{LAN} {PORT}", f"$gateway {host_port}",
               f"{host_address()} {host_port}"]  # fmt: skip
    request = r'printf "GET / HTTP/1.0\r\n\r\n"'  # busybox's static wget crashes here: nc
    tries = "; ".join(
        f"if {request} | nc -w 3 {target} | grep -q '^HTTP/1'; then echo REACHED {target}; "
        f"else echo blocked {target}; fi"
        for target in targets
    )
    gateway = "gateway=$(ip route | awk '/default/ {print $3}')"
    return f"{gateway}; {tries}; nslookup example.org 2>&1 | tail -2"


def test_the_plain_bridge_reaches_lan_metadata_and_host(lan, host_server, client, busybox):
    """The control: without the job's network every target answers."""
    output = client.containers.run(
        busybox, ["sh", "-c", script(host_server)], network_mode="bridge", remove=True
    ).decode()
    assert output.count("REACHED") == 4, output


def test_a_networked_job_reaches_none_of_them_and_still_resolves(
    lan, host_server, runner, busybox, client
):  # fmt: skip
    spec = job(busybox, ["sh", "-c", script(host_server)]).model_copy(update={"network": True})
    result = runner.run("egress", spec)
    output = log_text(result)
    assert result.status == "succeeded", output
    assert "REACHED" not in output and output.count("blocked") == 4, output
    assert "no servers could be reached" not in output and "timed out" not in output, output
    name = egress.network_name(runner.runner_id, "egress")
    assert client.networks.list(names=[name]) == []  # the job's bridge went with it


def test_networked_jobs_are_refused_where_iptables_cannot_fence_them(
    runner, busybox, client, monkeypatch
):  # fmt: skip
    monkeypatch.setattr(egress, "IPTABLES", "/nonexistent/iptables")
    spec = job(busybox, ["true"]).model_copy(update={"network": True})
    result = runner.run("unfenced", spec)
    assert result.status == "error" and result.record is None
    assert result.error.startswith("networked jobs are refused: cannot run"), result.error
    assert not client.networks.list(names=[egress.network_name(runner.runner_id, "unfenced")])


def test_the_rules_are_installed_once_however_often_they_are_asked_for():
    egress.install_rules()
    egress.install_rules()
    for parent in ("DOCKER-USER", "INPUT"):
        rules = subprocess.run(["iptables", "-S", parent], capture_output=True, text=True).stdout
        assert rules.count(f"-i {egress.BRIDGE_PREFIX}+") == 1, rules


def test_blocked_ranges_cover_what_fetching_refuses():
    for text in (METADATA, LAN, "127.0.0.1", "100.64.0.1", "172.17.0.1", "192.168.0.1"):
        address = ip_address(text)
        assert not FetchPolicy().permits(address)
        assert any(address in ip_network(blocked) for blocked in egress.BLOCKED)
