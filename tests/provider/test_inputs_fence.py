"""Input fetching is fenced (it runs as root on the host's network): real HTTP servers on
127.0.0.1 stand in for the Internet (the policy allows 127.0.0.1/32 where a test needs to
reach them) and for the machine's own services (where it does not)."""

from __future__ import annotations

import hashlib
import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from ipaddress import ip_address
from pathlib import Path

import pytest

from offchain.protocol.job.jobspec import InputFile
from provider.config import ConfigError, load_config
from provider.sandbox import inputs
from provider.sandbox.inputs import FetchPolicy, InputError, stage_inputs

BODY = b"weights" * 1000
LOOPBACK = FetchPolicy.of(30, ["127.0.0.1/32"])
Route = Callable[[http.server.BaseHTTPRequestHandler], None]


def send(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes = b"",
         **headers: str) -> None:  # fmt: skip
    handler.send_response(status)
    for name, value in {"Content-Length": str(len(body)), **headers}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Route]], str]]:
    """Start an HTTP server on 127.0.0.1 answering `routes` (path -> handler); its base URL."""
    servers: list[http.server.ThreadingHTTPServer] = []
    seen: list[dict[str, str]] = []

    def start(routes: dict[str, Route]) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append({"path": self.path, "host": self.headers["Host"]})
                routes[self.path](self)

            def log_message(self, *_: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        # polled every 10 ms, so the teardown's shutdown waits no half second for it
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    start.seen = seen  # type: ignore[attr-defined]
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def item(url: str, body: bytes = BODY) -> InputFile:
    return InputFile(path="data.bin", url=url, sha256=hashlib.sha256(body).hexdigest())


def test_a_public_host_is_fetched_with_its_own_host_header(serve, tmp_path):
    base = serve({"/data": lambda h: send(h, 200, BODY)})
    port = base.rsplit(":", 1)[1]
    stage_inputs([item(f"http://localhost:{port}/data")], tmp_path, 1 << 20, LOOPBACK)
    assert (tmp_path / "data.bin").read_bytes() == BODY
    assert serve.seen[-1]["host"] == f"localhost:{port}"  # the name, though the address was used


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "169.254.169.254"])
def test_loopback_and_link_local_are_refused_before_any_connection(serve, tmp_path, host):
    base = serve({"/data": lambda h: send(h, 200, BODY)})
    port = base.rsplit(":", 1)[1]
    with pytest.raises(InputError, match="not a public address"):
        stage_inputs([item(f"http://{host}:{port}/data")], tmp_path, 1 << 20)
    assert serve.seen == []


@pytest.mark.parametrize(
    "target",
    ["http://10.1.2.3/x", "http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/x",
     "http://100.64.0.1/x", "http://192.168.1.1/x", "http://[::ffff:10.0.0.1]/x"],
)  # fmt: skip
def test_a_redirect_chain_to_a_private_address_is_refused(serve, tmp_path, target):
    base = serve({
        "/a": lambda h: send(h, 302, Location="/b"),
        "/b": lambda h: send(h, 307, Location=target),
    })  # fmt: skip
    with pytest.raises(InputError, match="not a public address"):
        stage_inputs([item(f"{base}/a")], tmp_path, 1 << 20, LOOPBACK)
    assert [request["path"] for request in serve.seen] == ["/a", "/b"]


def test_a_redirect_to_another_scheme_or_an_endless_chain_is_refused(serve, tmp_path):
    base = serve({
        "/ftp": lambda h: send(h, 301, Location="ftp://example.org/x"),
        "/https": lambda h: send(h, 301, Location="https://example.org/x"),
        "/loop": lambda h: send(h, 302, Location="/loop"),
    })  # fmt: skip
    for path in ("/ftp", "/https"):
        with pytest.raises(InputError, match="redirects to another scheme"):
            stage_inputs([item(base + path)], tmp_path, 1 << 20, LOOPBACK)
    with pytest.raises(InputError, match=f"more than {inputs.MAX_REDIRECTS} redirects"):
        stage_inputs([item(f"{base}/loop")], tmp_path, 1 << 20, LOOPBACK)


def test_a_name_is_resolved_once_and_that_address_is_used(serve, tmp_path, monkeypatch):
    """DNS rebinding: the first answer (checked) is the one connected to, whatever comes next."""
    base = serve({"/data": lambda h: send(h, 200, BODY)})
    port = int(base.rsplit(":", 1)[1])
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1", "169.254.169.254"])
    lookups: list[str] = []

    def rebinding(host: str, *args: object, **kwargs: object) -> list:
        if host != "rebind.example":
            return real(host, *args, **kwargs)
        lookups.append(address := next(answers))
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    stage_inputs([item(f"http://rebind.example:{port}/data")], tmp_path, 1 << 20, LOOPBACK)
    assert lookups == ["127.0.0.1"] and serve.seen[-1]["host"] == f"rebind.example:{port}"


def test_a_name_with_one_private_address_among_public_ones_is_refused(monkeypatch):
    def mixed(host: str, port: int, **_: object) -> list:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
                for address in ("93.184.216.34", "10.0.0.7")]  # fmt: skip

    monkeypatch.setattr(socket, "getaddrinfo", mixed)
    with pytest.raises(InputError, match=r"resolves to 10\.0\.0\.7, not a public address"):
        inputs.public_addresses("mixed.example", 80, FetchPolicy())
    assert FetchPolicy().permits(ip_address("93.184.216.34"))


def test_a_slow_server_hits_the_total_deadline(serve, tmp_path):
    def drip(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(BODY)))
        handler.end_headers()
        with suppress(OSError):  # a byte every 50 ms: each read is quick, the whole is not
            for byte in BODY:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(0.05)

    base = serve({"/slow": drip})
    slow = FetchPolicy.of(1.5, ["127.0.0.1/32"])
    began = time.monotonic()
    with pytest.raises(InputError, match=r"inputs took over 1\.5 s"):
        stage_inputs([item(f"{base}/slow")], tmp_path, 1 << 20, slow)
    assert time.monotonic() - began < 3


def test_an_oversized_body_hits_the_cap(serve, tmp_path):
    def unannounced(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.end_headers()  # no Content-Length: the cap is met while reading
        handler.wfile.write(b"x" * (2 << 20))

    base = serve({
        "/announced": lambda h: send(h, 200, b"x" * (2 << 20)),
        "/unannounced": unannounced,
    })  # fmt: skip
    for path in ("/announced", "/unannounced"):
        with pytest.raises(InputError, match="exceed the job's 1048576 bytes"):
            stage_inputs([item(base + path)], tmp_path / path[1:], 1 << 20, LOOPBACK)
    assert (tmp_path / "unannounced" / "data.bin").stat().st_size <= 1 << 20


def test_allowed_networks_must_be_networks(tmp_path: Path):
    config = tmp_path / "provider.toml"
    config.write_text('[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 8\n'
                      '[runner]\ninputs_allow = ["lan"]\n')  # fmt: skip
    with pytest.raises(ConfigError, match="inputs_allow"):
        load_config(config)
