"""The gateway's upstream client against raw HTTP/1.1 servers (what uvicorn would not send):
connections kept alive and reused, an answer framed by Content-Length, chunks or the close,
a HEAD's, an interim 100, a request body sent with its own length whatever the client's framing,
a kept connection the upstream closed, an upstream that closes while the body is sent, a
silent upstream, a refused connect, and a pool with every connection busy."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from provider.gateway.upstream import PoolTimeout, UpstreamError, UpstreamPool

# what the server answers a request's head and body with: raw bytes, or None to stay silent
Script = Callable[[bytes, bytes], Awaitable[bytes | None]]


class Raw:
    """A server on 127.0.0.1 answering each request on a connection with `script`; counts its
    connections and keeps the requests it read (head, body)."""

    def __init__(self, script: Script, close_after: bool = False) -> None:
        self.script, self.close_after = script, close_after
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                body = await _body(reader, head.lower())
                self.requests.append((head, body))
                answer = await self.script(head, body)
                if answer is None:
                    await asyncio.sleep(3600)
                    return
                writer.write(answer)
                if self.close_after:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def _body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    if b"content-length: " in head:
        return await reader.readexactly(int(head.split(b"content-length: ")[1].split(b"\r")[0]))
    if b"transfer-encoding: chunked" not in head:
        return b""
    body = b""
    while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
        body += (await reader.readexactly(size + 2))[:-2]
    await reader.readexactly(2)
    return body


def answer(body: bytes, *headers: bytes, status: bytes = b"200 OK") -> Script:
    async def script(head: bytes, got: bytes) -> bytes:
        lines = b"".join(h + b"\r\n" for h in headers)
        return b"HTTP/1.1 " + status + b"\r\n" + lines + b"\r\n" + body

    return script


async def fetch(
    pool: UpstreamPool, url: str, method: str = "GET", body: bytes | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:  # fmt: skip
    base, _, path = url.removeprefix("http://").partition("/")
    got = await pool.send(method, f"http://{base}", f"/{path}", headers or [], body)
    try:
        return got.status, got.headers, b"".join([chunk async for chunk in got.chunks()])
    finally:
        got.aclose()


def test_connections_are_kept_and_answers_framed_every_way() -> None:
    async def main() -> None:
        pool = UpstreamPool(4, 5.0, 5.0)
        sized = Raw(answer(b"hello", b"Content-Length: 5", b"X-Up: 1"))
        url = await sized.start()
        for _ in range(3):
            assert await fetch(pool, f"{url}/a?q=1") == (
                200, [(b"content-length", b"5"), (b"x-up", b"1")], b"hello")  # fmt: skip
        assert sized.connections == 1  # kept alive, reused
        assert sized.requests[0][0].startswith(b"GET /a?q=1 HTTP/1.1\r\nhost: 127.0.0.1:")
        chunked = Raw(answer(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", b"Transfer-Encoding: chunked"))
        url = await chunked.start()
        assert (await fetch(pool, url))[2] == b"abcde"
        assert (await fetch(pool, url))[2] == b"abcde" and chunked.connections == 1
        to_close = Raw(answer(b"until the close"), close_after=True)  # no length: the close
        url = await to_close.start()
        assert (await fetch(pool, url))[2] == b"until the close"
        assert (await fetch(pool, url))[2] == b"until the close" and to_close.connections == 2
        head = Raw(answer(b"", b"Content-Length: 1000"))  # a HEAD's answer has no body
        url = await head.start()
        status, headers, body = await fetch(pool, url, "HEAD")
        assert (status, body) == (200, b"") and (b"content-length", b"1000") in headers

        interim = answer(b"ok", b"Content-Length: 2", status=b"100 Continue\r\n\r\nHTTP/1.1 200 OK")
        assert (await fetch(pool, await Raw(interim).start()))[::2] == (200, b"ok")
        await pool.aclose()

    asyncio.run(main())


def test_request_bodies_go_with_their_own_length() -> None:
    async def main() -> None:
        pool = UpstreamPool(4, 5.0, 5.0)
        server = Raw(answer(b"", b"Content-Length: 0"))
        url = await server.start()
        await fetch(pool, url, "POST", b"abcd", [(b"content-length", b"4")])
        await fetch(pool, url, "POST", b"came in chunks", [(b"transfer-encoding", b"chunked")])
        await fetch(pool, url, "POST")  # no body: an explicit zero length
        (first, one), (second, two), (third, none) = server.requests
        assert first.count(b"content-length") == 1 and one == b"abcd"
        assert b"content-length: 14\r\n" in second and b"chunked" not in second
        assert two == b"came in chunks"
        assert b"content-length: 0\r\n" in third and none == b""
        await pool.aclose()

    asyncio.run(main())


def test_an_upstream_that_closes_while_the_body_is_sent_is_an_upstream_error() -> None:
    """It read the head and closed: the gateway's write fails as an UpstreamError (a 502),
    not a RuntimeError of a closed transport (a 500)."""

    async def main() -> None:
        async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.transport.abort()  # a reset, with the body still coming

        server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = UpstreamPool(4, 5.0, 5.0)
        for _ in range(3):
            with pytest.raises(UpstreamError, match="closed"):
                await fetch(pool, url, "POST", b"x" * (32 * 1024 * 1024))
        server.close()
        await pool.aclose()

    asyncio.run(main())


def test_a_kept_connection_the_upstream_closed_is_replaced() -> None:
    async def main() -> None:
        pool = UpstreamPool(4, 5.0, 5.0)
        server = Raw(answer(b"ok", b"Content-Length: 2"))
        url = await server.start()
        assert (await fetch(pool, url))[2] == b"ok"
        server.writers[0].close()  # the upstream's keep-alive timeout, as the gateway sends
        assert (await fetch(pool, url))[2] == b"ok" and server.connections == 2
        server.writers[1].close()  # seen closed before the next request: not taken
        await asyncio.sleep(0.05)
        assert (await fetch(pool, url))[2] == b"ok" and server.connections == 3
        await pool.aclose()

    asyncio.run(main())


def test_upstream_errors_and_a_full_pool() -> None:
    async def main() -> None:
        async def silent(head: bytes, body: bytes) -> None:
            return None

        pool = UpstreamPool(1, 0.3, 5.0)
        url = await Raw(silent).start()
        with pytest.raises(UpstreamError, match=r"silent for 0\.3 s"):
            await fetch(pool, url)
        with pytest.raises(UpstreamError, match="could not connect"):
            await fetch(pool, "http://127.0.0.1:9")
        held = await pool.send("GET", await Raw(answer(b"ok", b"Content-Length: 2")).start(),
                               "/", [], None)  # fmt: skip
        with pytest.raises(PoolTimeout):  # its one connection is taken
            await fetch(pool, url)
        held.aclose()
        with pytest.raises(UpstreamError, match="not a request target"):
            await fetch(pool, url + "/a b\r\nx: y")
        with pytest.raises(UpstreamError, match="malformed"):
            await fetch(pool, await Raw(answer(b"", b"Bad Header Line")).start())
        await pool.aclose()

    asyncio.run(main())
