"""A job's input files: fetched by the provider before the job starts, checked against their
sha256, and mounted read-only at /in. A wrong hash fails the job before any time is billed.

The fetch runs as root on the host's network, so a job's spec must not steer it at the
machine or its LAN: one total deadline for all of a job's inputs (a watchdog closes a socket
that is still busy at the deadline, so a slow drip cannot outlast it), the job's disk as the
size cap, at most MAX_REDIRECTS redirects and never to another scheme, and on every hop the
host resolved once, refused unless every address is global (no loopback, private, link-local
such as 169.254.169.254, unique-local, shared CGNAT, multicast or reserved), then connected to
that very address with the URL's own Host header and TLS name, so a second DNS answer cannot
swap the address after the check. `data:` inputs never touch the network.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, BinaryIO
from urllib.parse import urljoin, urlsplit

from offchain.core.errors import UnchainedError
from offchain.protocol.job.jobspec import InputFile

CHUNK = 1 << 20
FETCH_DEADLINE_S = 300
MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})
DEFAULT_PORTS = {"http": 80, "https": 443}
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class InputError(UnchainedError, RuntimeError):
    """An input could not be fetched, was too large, or had another hash than the spec says."""


@dataclasses.dataclass(frozen=True)
class FetchPolicy:
    """How far input fetching may go: `allow` names networks it may reach besides the public
    Internet (an operator's own mirror; tests' servers on 127.0.0.1)."""

    deadline_s: float = FETCH_DEADLINE_S
    allow: tuple[Network, ...] = ()

    @classmethod
    def of(cls, deadline_s: float, allow: list[str]) -> FetchPolicy:
        return cls(deadline_s, tuple(ipaddress.ip_network(net) for net in allow))

    def permits(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:127.0.0.1 is loopback
        if any(address in network for network in self.allow):
            return True
        return address.is_global and not address.is_multicast


def stage_inputs(
    inputs: list[InputFile], directory: Path, max_bytes: int, policy: FetchPolicy | None = None
) -> None:
    """Fetch every input into `directory`; together they may hold at most `max_bytes` and take
    at most the policy's deadline."""
    policy = policy or FetchPolicy()
    deadline = time.monotonic() + policy.deadline_s
    budget = max_bytes
    for item in inputs:
        target = directory / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(target, "wb") as sink:
            try:
                budget = _fetch(item.url, _Sink(sink, digest, budget, max_bytes), deadline, policy)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                if time.monotonic() >= deadline:
                    raise InputError(
                        f"input {item.path}: cannot fetch: inputs took over {policy.deadline_s} s"
                    ) from exc
                raise InputError(f"input {item.path}: cannot fetch: {exc}") from exc
        if digest.hexdigest() != item.sha256:
            raise InputError(
                f"input {item.path}: sha256 is {digest.hexdigest()}, the spec says {item.sha256}"
            )
        target.chmod(0o444)


@dataclasses.dataclass
class _Sink:
    """Where an input's bytes go, hashed and counted against what the job's disk has left."""

    file: BinaryIO
    digest: Any
    budget: int
    max_bytes: int

    def take(self, read: Callable[[int], bytes]) -> int:
        while chunk := read(CHUNK):
            self.budget -= len(chunk)
            if self.budget < 0:
                raise InputError(f"inputs exceed the job's {self.max_bytes} bytes of disk")
            self.digest.update(chunk)
            self.file.write(chunk)
        return self.budget


def _fetch(url: str, sink: _Sink, deadline: float, policy: FetchPolicy) -> int:
    """Follow `url` (and its redirects) to a 200 and copy its body; the budget left."""
    scheme = urlsplit(url).scheme
    if scheme == "data":
        with urllib.request.urlopen(url) as source:  # decoded in memory: no network
            return sink.take(source.read)
    for _ in range(MAX_REDIRECTS + 1):
        with _response(url, deadline, policy) as response:
            if response.status in REDIRECTS:
                target = urljoin(url, response.getheader("Location") or "")
                if urlsplit(target).scheme != scheme:
                    raise InputError(f"cannot fetch: {url} redirects to another scheme: {target}")
                url = target
                continue
            if response.status != 200:
                raise InputError(f"cannot fetch: {url} answered {response.status}")
            length = response.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) > sink.budget:
                raise InputError(f"inputs exceed the job's {sink.max_bytes} bytes of disk")
            left = sink.take(response.read1)
            if time.monotonic() >= deadline:  # the watchdog ended the body early
                raise TimeoutError("the deadline passed")
            if response.length:  # the server closed before the length it announced
                raise http.client.IncompleteRead(b"", response.length)
            return left
    raise InputError(f"cannot fetch: more than {MAX_REDIRECTS} redirects")


def public_addresses(host: str, port: int, policy: FetchPolicy) -> list[Address]:
    """`host`'s addresses, resolved once; refused unless the policy permits every one."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InputError(f"cannot fetch: {host} does not resolve: {exc}") from exc
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in found))
    refused = [str(address) for address in addresses if not policy.permits(address)]
    if refused or not addresses:
        raise InputError(
            f"cannot fetch: {host} resolves to {', '.join(refused) or 'nothing'}, "
            "not a public address"
        )
    return addresses


@contextmanager
def _response(url: str, deadline: float, policy: FetchPolicy) -> Iterator[Any]:
    """A GET of `url` over a connection to an address checked by `public_addresses`."""
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise InputError(f"cannot fetch: {url}: only http and https URLs are fetched")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    addresses = public_addresses(parts.hostname, port, policy)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the deadline passed")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":  # the TLS name and certificate check stay the URL's host
        context = ssl.create_default_context()
        connection = http.client.HTTPSConnection(parts.hostname, port, timeout=remaining,
                                                 context=context)  # fmt: skip
    else:
        connection = http.client.HTTPConnection(parts.hostname, port, timeout=remaining)
    connection._create_connection = _connect_to(addresses, port)  # type: ignore[attr-defined]
    try:
        connection.connect()
        with _watchdog(connection.sock, deadline):
            path = parts.path or "/"
            connection.request("GET", f"{path}?{parts.query}" if parts.query else path,
                               headers={"Accept-Encoding": "identity"})  # fmt: skip
            yield connection.getresponse()
    finally:
        connection.close()


def _connect_to(addresses: list[Address], port: int) -> Any:
    """http.client's connect hook: the checked addresses in turn, never a new lookup."""

    def connect(_: object, timeout: float, source: Any = None) -> socket.socket:
        problem: OSError | None = None
        for address in addresses:
            try:
                return socket.create_connection((str(address), port), timeout, source)
            except OSError as exc:
                problem = exc
        assert problem is not None
        raise problem

    return connect


@contextmanager
def _watchdog(sock: IO[bytes] | socket.socket, deadline: float) -> Iterator[None]:
    """Shut the socket down at the deadline, whatever read is waiting on it."""

    def expire() -> None:
        with suppress(OSError):  # the plain socket's shutdown: an SSL socket's drops its state
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # type: ignore[arg-type]

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
