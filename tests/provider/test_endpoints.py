"""The provider's endpoint book on disk: endpoints added, read, listed and removed, a request
charged at a time (the served total returned), what an endpoint may be, and a second handle on
the same file (the daemon's and the gateway's) seeing the first one's writes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from provider.endpoints import Endpoint, EndpointBook

CHANNEL = b"\x01" * 28
ECHO = Endpoint("echo", CHANNEL, "http://127.0.0.1:8000", 1_000, 50, started_ms=1_700_000_000_000)


def test_endpoints_are_added_listed_charged_and_removed(tmp_path: Path) -> None:
    book = EndpointBook.in_state_dir(tmp_path)
    assert (tmp_path / "daemon" / "endpoints.sqlite").exists()
    other = dataclasses.replace(ECHO, name="a-model.v2", upstream="https://10.0.0.2:9")
    book.add(ECHO)
    book.add(other)
    assert book.get("echo") == ECHO and book.get("nope") is None
    assert book.list() == [other, ECHO]  # by name
    assert [book.charge("echo", 1_000) for _ in range(3)] == [1_000, 2_000, 3_000]
    assert book.charge("echo", 0) == 3_000
    charged = book.get("echo")
    assert charged is not None and (charged.requests, charged.served) == (4, 3_000)
    again = EndpointBook.in_state_dir(tmp_path)  # another process's view of the same file
    assert again.get("echo") == charged
    book.remove("echo")
    book.remove("echo")  # removing again is harmless: a stop may be retried
    assert again.list() == [other]
    with pytest.raises(KeyError, match="no endpoint named echo"):
        book.charge("echo", 1_000)


def test_a_name_is_served_once(tmp_path: Path) -> None:
    book = EndpointBook(tmp_path / "endpoints.sqlite")
    book.add(ECHO)
    with pytest.raises(ValueError, match="named echo exists already"):
        book.add(dataclasses.replace(ECHO, upstream="http://127.0.0.1:9"))
    with pytest.raises(ValueError, match="never negative"):
        book.charge("echo", -1)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"name": "a/b"}, "endpoint name"),
        ({"name": ""}, "endpoint name"),
        ({"name": "-x"}, "endpoint name"),
        ({"name": "x" * 65}, "endpoint name"),
        ({"upstream": "127.0.0.1:80"}, "not http"),
        ({"upstream": "http://127.0.0.1:80/path"}, "not http"),
        ({"price_per_request": -1}, "never negative"),
        ({"served": -1}, "never negative"),
    ],
)
def test_an_endpoint_that_cannot_be_served_is_refused(changes: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        dataclasses.replace(ECHO, **changes)  # type: ignore[arg-type]
