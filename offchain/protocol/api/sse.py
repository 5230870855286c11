"""Server-sent events as they arrive in chunks of bytes (an OpenAI-compatible stream): the
`data:` payloads of each event once it is whole. Both sides of an llm endpoint read its streams
so (the gateway for the usage it bills, the renter's client for the text it counts), and both
must cut them into events the same way: an event cut across chunks counts once it is whole."""

from __future__ import annotations


class SseEvents:
    """`feed(chunk)`: the data payloads of the events `chunk` completes, in order."""

    def __init__(self) -> None:
        self._pending = b""  # the start of an event not whole yet

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk.replace(b"\r\n", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return []
        self._pending = data[end + 2 :]
        return [line[5:].strip() for event in data[:end].split(b"\n\n")
                for line in event.split(b"\n") if line.startswith(b"data:")]  # fmt: skip
