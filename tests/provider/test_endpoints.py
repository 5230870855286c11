"""The provider's deployment book on disk: deployments added, read, listed by name and by
channel, started, finished, charged a request at a time (the served total returned) and
removed; what a deployment may be; what it and its channel owe (`due_of`, `channel_due`:
requests plus whole seconds run, summed over the channel's deployments); and a second handle
on the same file (the daemon's and the gateway's) seeing the first one's writes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from provider.rentals.book import Rental, RentalBook, channel_due, due_of

CHANNEL = b"\x01" * 28
OTHER = b"\x02" * 28
RENTER = b"\x03" * 32
T0 = 1_700_000_000_000
ECHO = Rental("echo", "endpoint", CHANNEL, RENTER, '{"kind":"service"}', "pending", "", "",
                "", 0, 1_000, 50, created_ms=T0)  # fmt: skip


def test_deployments_are_added_listed_charged_and_removed(tmp_path: Path) -> None:
    book = RentalBook.in_state_dir(tmp_path)
    assert (tmp_path / "daemon" / "endpoints.sqlite").exists()
    other = dataclasses.replace(ECHO, name="a-model.v2", channel=OTHER)
    book.add(ECHO)
    book.add(other)
    assert book.get("echo") == ECHO and book.get("nope") is None
    assert book.list() == [other, ECHO]  # by name
    assert book.on_channel(CHANNEL) == [ECHO] and book.on_channel(b"\x09" * 28) == []
    assert [book.charge("echo", 1_000) for _ in range(3)] == [1_000, 2_000, 3_000]
    assert book.charge("echo", 0) == 3_000
    charged = book.get("echo")
    assert charged is not None and (charged.requests, charged.served) == (4, 3_000)
    again = RentalBook.in_state_dir(tmp_path)  # another process's view of the same file
    assert again.get("echo") == charged
    book.remove("echo")
    book.remove("echo")  # removing again is harmless
    assert again.list() == [other]
    with pytest.raises(KeyError, match="no deployment named echo"):
        book.charge("echo", 1_000)


def test_a_deployment_runs_then_finishes_once(tmp_path: Path) -> None:
    book = RentalBook(tmp_path / "endpoints.sqlite")
    book.add(ECHO)
    upstream = "http://127.0.0.1:8000,http://127.0.0.1:8001"
    book.set_running("echo", upstream, "sha256:" + "a" * 64, T0 + 500)
    running = book.get("echo")
    assert running is not None and running.state == "running"
    assert running.upstreams == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
    with pytest.raises(KeyError, match="no pending deployment named echo"):
        book.set_running("echo", upstream, "sha256:b", T0)
    book.set_public_port("echo", 2222)
    book.finish("echo", "stopped", "asked", T0 + 10_000)
    book.finish("echo", "failed", "later", T0 + 20_000)  # the first finish stands
    book.finish("gone", "stopped", "asked", T0)  # a retried stop of a removed one
    done = book.get("echo")
    assert done is not None
    assert (done.state, done.reason, done.stopped_ms) == ("stopped", "asked", T0 + 10_000)
    assert done.public_port == 2222
    with pytest.raises(ValueError, match="finishes stopped or failed"):
        book.finish("echo", "running", "", 0)
    with pytest.raises(KeyError):
        book.set_public_port("gone", 1)


def test_what_a_deployment_and_its_channel_owe(tmp_path: Path) -> None:
    book = RentalBook(tmp_path / "endpoints.sqlite")
    book.add(ECHO)  # 1,000 a request, 50 a second, on CHANNEL
    book.add(dataclasses.replace(ECHO, name="pod", kind="pod", price_per_request=0,
                                 price_per_second=7))  # fmt: skip
    book.add(dataclasses.replace(ECHO, name="elsewhere", channel=OTHER))
    assert channel_due(book, CHANNEL, T0 + 99_000) == 0  # nothing runs yet: nothing owed
    book.charge("echo", 1_000)
    book.set_running("echo", "http://127.0.0.1:1", "sha256:a", T0)
    book.set_running("pod", "", "sha256:b", T0 + 1_000)
    echo, pod = book.get("echo"), book.get("pod")
    assert echo is not None and pod is not None
    assert due_of(echo, T0 + 2_999) == 1_000 + 2 * 50  # whole seconds only
    assert due_of(pod, T0 + 2_999) == 7
    assert channel_due(book, CHANNEL, T0 + 2_999) == 1_107
    assert channel_due(book, OTHER, T0 + 2_999) == 0
    book.finish("echo", "stopped", "", T0 + 4_000)  # its seconds end, its money stays owed
    assert channel_due(book, CHANNEL, T0 + 60_000) == 1_000 + 4 * 50 + 59 * 7
    for now in (T0 - 5_000, T0, T0 + 999, T0 + 1_000, T0 + 123_456):  # each row's due_of
        owed = sum(due_of(d, now) for d in book.on_channel(CHANNEL))
        assert channel_due(book, CHANNEL, now) == owed


def test_rows_kept_between_reads_follow_every_handles_writes(tmp_path: Path) -> None:
    """The rows a handle keeps between reads (the gateway's per-request lookups) are those on
    disk after any write, its own or another handle's (the daemon's, another gateway's)."""
    gateway, daemon = (RentalBook(tmp_path / "endpoints.sqlite") for _ in range(2))
    assert gateway.get("echo") is None and gateway.due_on(CHANNEL, T0) == 0
    daemon.add(ECHO)
    assert gateway.get("echo") == ECHO and gateway.due_on(CHANNEL, T0) == 0
    daemon.set_running("echo", "http://127.0.0.1:1", "sha256:a", T0)
    running = gateway.get("echo")
    assert running is not None and running.state == "running"
    assert gateway.due_on(CHANNEL, T0 + 2_000) == 100
    gateway.charge("echo", 1_000)  # its own write
    assert gateway.due_on(CHANNEL, T0 + 2_000) == 1_100 == daemon.due_on(CHANNEL, T0 + 2_000)
    daemon.charge("echo", 1_000)  # another's, then its own again
    gateway.charge("echo", 1_000)
    for book in (gateway, daemon):
        charged = book.get("echo")
        assert charged is not None and (charged.requests, charged.served) == (3, 3_000)
        assert book.due_on(CHANNEL, T0 + 2_000) == 3_100
    daemon.add(dataclasses.replace(ECHO, name="pod", kind="pod", price_per_request=0))
    daemon.charge("pod", 5)
    assert gateway.due_on(CHANNEL, T0 + 2_000) == 3_105
    daemon.finish("echo", "stopped", "", T0 + 1_000)
    gateway.finish("echo", "failed", "", T0)  # the first finish stands
    stopped = gateway.get("echo")
    assert stopped is not None and (stopped.state, stopped.stopped_ms) == ("stopped", T0 + 1_000)
    assert gateway.due_on(CHANNEL, T0 + 9_000) == 3_000 + 50 + 5
    gateway.remove("pod")
    daemon.remove("echo")
    assert gateway.get("echo") is None and daemon.get("pod") is None
    assert gateway.due_on(CHANNEL, T0) == daemon.due_on(CHANNEL, T0) == 0


def test_a_name_is_taken_once(tmp_path: Path) -> None:
    book = RentalBook(tmp_path / "endpoints.sqlite")
    book.add(ECHO)
    with pytest.raises(ValueError, match="named echo exists already"):
        book.add(dataclasses.replace(ECHO, channel=OTHER))
    with pytest.raises(ValueError, match="never negative"):
        book.charge("echo", -1)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"name": "a/b"}, "deployment name"),
        ({"name": ""}, "deployment name"),
        ({"name": "-x"}, "deployment name"),
        ({"name": "x" * 65}, "deployment name"),
        ({"kind": "batch"}, "kind 'batch'"),
        ({"state": "gone"}, "state 'gone'"),
        ({"channel": b"\x01"}, "channel id is 28 bytes"),
        ({"renter_vkey": b""}, "renter key 32"),
        ({"upstream": "127.0.0.1:80"}, "not http"),
        ({"upstream": "http://127.0.0.1:80/path"}, "not http"),
        ({"upstream": "http://127.0.0.1:80,"}, "not http"),
        ({"price_per_request": -1}, "never negative"),
        ({"served": -1}, "never negative"),
        ({"started_ms": -1}, "never negative"),
    ],
)
def test_a_deployment_that_cannot_be_served_is_refused(
    changes: dict[str, object], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        dataclasses.replace(ECHO, **changes)  # type: ignore[arg-type]
