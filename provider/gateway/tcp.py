"""The gateway's TCP forwarder: how a renter reaches its pod's sshd, which listens on the
provider's 127.0.0.1 only (`provider.rentals.pods`).

One listener per running pod in the deployment book, on the gateway's host at a port the kernel
picks, recorded in the book (`RentalBook.set_public_port`: the renter reads it from the
pod's status). Each connection to it is piped, byte for byte both ways, to the pod's sshd (its
`upstream`); SSH is end to end between the renter's client and the pod, the gateway sees only
ciphertext. The book is read every `poll_s`: a pod that is no longer running (stopped, its IOUs
lagging, its channel closing: the daemon decides) loses its listener and every connection
through it at the next read, and its public port is set back to 0.

`with_tcp_forwarder(gateway, host)` runs it for as long as the gateway's ASGI app runs (its
lifespan). Pods are paid per second whether connections are open or not (the pod agent's
IOUs, at the gateway's pay route), so the forwarder itself checks no IOU.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from provider.rentals.book import RUNNING, RentalBook

if TYPE_CHECKING:
    from provider.gateway.app import Gateway
    from provider.gateway.control import Message, Receive, Scope, Send

log = logging.getLogger(__name__)

POLL_S = 0.25
CONNECT_TIMEOUT_S = 10.0
CHUNK_BYTES = 64 * 1024
POD = "pod"


@dataclass
class _Listener:
    upstream: str
    server: asyncio.Server
    port: int
    connections: set[asyncio.StreamWriter] = field(default_factory=set)


class TcpForwarder:
    """The listeners for the running pods of `endpoints`, on `host` (the gateway's)."""

    def __init__(self, endpoints: RentalBook, host: str, poll_s: float = POLL_S) -> None:
        self.endpoints = endpoints
        self.host = host
        self.poll_s = poll_s
        self._listeners: dict[str, _Listener] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Follow the book from now on (in the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def aclose(self) -> None:
        """Stop following the book; close every listener and connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for name in list(self._listeners):
            await self._close(name)

    def ports(self) -> dict[str, int]:
        """The port each pod is reached at, by name."""
        return {name: listener.port for name, listener in self._listeners.items()}

    async def sync(self) -> None:
        """One read of the book: a listener for each running pod, none for the others."""
        running = {
            pod.name: pod.upstream
            for pod in self.endpoints.list()
            if pod.kind == POD and pod.state == RUNNING and pod.upstream
        }
        for name, listener in list(self._listeners.items()):
            if running.get(name) != listener.upstream:
                await self._close(name)
        for name, upstream in running.items():
            if name not in self._listeners:
                await self._open(name, upstream)

    async def _follow(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:  # a locked book, a port race: the next read tries again
                log.exception("the TCP forwarder could not follow the deployment book")
            await asyncio.sleep(self.poll_s)

    async def _open(self, name: str, upstream: str) -> None:
        target = urlsplit(upstream)
        host, port = target.hostname, target.port
        if host is None or port is None:
            log.error("pod %s: upstream %r names no host and port", name, upstream)
            return
        address = (host, port)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._pipe(listener, address, reader, writer)

        server = await asyncio.start_server(serve, self.host, 0)
        port = int(server.sockets[0].getsockname()[1])
        listener = _Listener(upstream, server, port)
        self._listeners[name] = listener
        try:
            self.endpoints.set_public_port(name, port)
        except KeyError:  # removed since it was read: nothing to forward to
            await self._close(name)

    async def _close(self, name: str) -> None:
        listener = self._listeners.pop(name)
        listener.server.close()
        for writer in list(listener.connections):
            writer.transport.abort()
        await listener.server.wait_closed()
        pod = self.endpoints.get(name)
        if pod is not None and pod.public_port == listener.port:
            self.endpoints.set_public_port(name, 0)

    async def _pipe(
        self,
        listener: _Listener,
        target: tuple[str, int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Forward one renter's connection to the pod's sshd until either side ends it."""
        listener.connections.add(writer)
        try:
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(*target), CONNECT_TIMEOUT_S
                )
            except (OSError, TimeoutError) as exc:
                log.warning("pod at %s:%d did not take a connection: %r", *target, exc)
                return
            listener.connections.add(up_writer)
            try:
                await asyncio.gather(_copy(reader, up_writer, writer),
                                     _copy(up_reader, writer, up_writer))  # fmt: skip
            finally:
                listener.connections.discard(up_writer)
                up_writer.transport.abort()
        finally:
            listener.connections.discard(writer)
            writer.transport.abort()


async def _copy(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, other: asyncio.StreamWriter
) -> None:
    """`reader`'s bytes to `writer`, then its end of stream (a half close: the other way may
    still carry bytes); a reset on either side ends both."""
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()
        other.transport.abort()


class WithTcpForwarder:
    """An ASGI app (the gateway) whose lifespan also runs a TcpForwarder over its book: the
    forwarder starts with the app and closes with it; every other message passes through."""

    def __init__(self, app: Any, endpoints: RentalBook, host: str) -> None:
        self.app = app
        self.forwarder = TcpForwarder(endpoints, host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def lifespan_message() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.forwarder.start()
            elif message["type"] == "lifespan.shutdown":
                await self.forwarder.aclose()
            return message

        await self.app(scope, lifespan_message, send)


def with_tcp_forwarder(app: Gateway, host: str) -> WithTcpForwarder:
    """The gateway `app` forwarding TCP to its running pods, listening on `host` (its own)."""
    return WithTcpForwarder(app, app.endpoints, host)
