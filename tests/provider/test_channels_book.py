"""The provider's channel book without a chain: which IOUs it takes (its renter's signature for
this network and channel script, never below the last one, never above what the channel can
pay), the credit rule that stops serving a channel whose IOUs lag, and an acknowledged IOU that
survives the process being killed right after `accept` returned; a book made before the book
kept a chain point is brought up to date."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from pycardano import PaymentSigningKey, ScriptHash

from offchain.protocol.ledger.iou import SignedIou
from offchain.protocol.tx.channel import OPEN
from provider.money.channel_book import (
    SCHEMA,
    BadIouSignature,
    ChannelBook,
    ChannelView,
    IouAboveChannel,
    StaleIou,
    UnknownChannel,
)

NETWORK = 0
SCRIPT = ScriptHash(b"\x0c" * 28)
OTHER_SCRIPT = ScriptHash(b"\x0d" * 28)
CHANNEL, OTHER_CHANNEL = b"\x01" * 28, b"\x02" * 28
CAPACITY = 5_000_000  # lovelace the channel can pay in all
CREDIT = 100_000
RENTER = PaymentSigningKey.generate()
POINT = {"slot": 100, "id": "cd" * 32}  # where the chain showed the channel's output unspent


def view(channel: bytes = CHANNEL, **changes: object) -> ChannelView:
    """A channel of RENTER's as the chain would show it: nothing claimed, open."""
    fields: dict[str, object] = {
        "id": channel, "utxo": "ab" * 32 + "#0", "address": "addr_test1channel",
        "renter_vkey": RENTER.to_verification_key().payload, "claimed": 0,
        "capacity": CAPACITY, "closing_at": OPEN, **changes,
    }  # fmt: skip
    return ChannelView(**fields)


def iou(amount: int, channel: bytes = CHANNEL, **signing: object) -> SignedIou:
    """RENTER's IOU for `amount` on `channel`; `signing` overrides key, network or script."""
    how: dict[str, object] = {"key": RENTER, "network_id": NETWORK, "channel_hash": SCRIPT}
    how.update(signing)
    return SignedIou.sign(how["key"], how["network_id"], how["channel_hash"], channel, amount)


@pytest.fixture
def book(tmp_path: Path) -> ChannelBook:
    made = ChannelBook(tmp_path / "channels.sqlite", NETWORK, SCRIPT, CREDIT)
    made.open(view(), POINT)
    return made


def test_the_latest_iou_is_kept_and_each_may_only_grow(book: ChannelBook) -> None:
    book.accept(iou(1_000))
    book.accept(iou(3_000))
    book.accept(iou(3_000))  # the same IOU again: taken, nothing changes

    with pytest.raises(StaleIou, match="below the 3000 already acknowledged"):
        book.accept(iou(2_000))  # an old IOU replayed

    entry = book.get(CHANNEL)
    assert entry is not None and entry.iou == iou(3_000) and entry.unclaimed == 3_000


@pytest.mark.parametrize(
    "signing",
    [
        {"key": PaymentSigningKey.generate()},
        {"network_id": 1},
        {"channel_hash": OTHER_SCRIPT},
    ],
    ids=["another-key", "another-network", "another-channel-script"],
)
def test_an_iou_not_signed_by_the_renter_for_this_deployment_is_refused(
    book: ChannelBook, signing: dict[str, object]
) -> None:
    with pytest.raises(BadIouSignature, match="not signed by its renter"):
        book.accept(iou(1_000, **signing))
    assert book.get(CHANNEL).iou is None


def test_an_iou_of_another_channel_counts_for_that_channel_only(book: ChannelBook) -> None:
    with pytest.raises(UnknownChannel, match="is not served here"):
        book.accept(iou(1_000, OTHER_CHANNEL))  # a channel this provider never opened
    book.open(view(OTHER_CHANNEL), POINT)
    # signed for the other channel, handed in as this one's: the signature does not hold
    moved = iou(1_000, OTHER_CHANNEL)
    with pytest.raises(BadIouSignature):
        book.accept(SignedIou(CHANNEL, moved.amount, moved.signature))
    book.accept(moved)
    assert book.get(CHANNEL).iou is None
    assert book.get(OTHER_CHANNEL).iou == moved


def test_an_iou_above_what_the_channel_can_pay_is_refused(book: ChannelBook) -> None:
    book.accept(iou(CAPACITY))  # all of it
    with pytest.raises(IouAboveChannel, match=f"above the {CAPACITY}"):
        book.accept(iou(CAPACITY + 1))
    book.seen(view(capacity=CAPACITY + 2_000_000, claimed=1_000))  # topped up (and claimed)
    book.accept(iou(CAPACITY + 1))
    assert book.get(CHANNEL).unclaimed == CAPACITY + 1 - 1_000


def test_an_ended_channel_takes_no_iou(book: ChannelBook) -> None:
    book.ended(CHANNEL)
    with pytest.raises(UnknownChannel):
        book.accept(iou(1_000))
    assert book.live() == []


def test_service_stops_when_iou_lag_beyond_the_credit(book: ChannelBook) -> None:
    assert book.may_serve(CHANNEL, CREDIT)  # nothing signed yet: the credit alone
    assert not book.may_serve(CHANNEL, CREDIT + 1)
    book.accept(iou(400_000))
    assert book.may_serve(CHANNEL, 400_000 + CREDIT)
    assert not book.may_serve(CHANNEL, 400_000 + CREDIT + 1)  # the IOUs lag: stop
    assert not book.may_serve(OTHER_CHANNEL, 0)  # not a channel of this provider


def test_service_stops_past_what_the_channel_can_pay_or_once_it_closes(book: ChannelBook) -> None:
    book.accept(iou(CAPACITY - 10))
    assert book.may_serve(CHANNEL, CAPACITY)
    assert not book.may_serve(CHANNEL, CAPACITY + 1)  # no IOU could cover it
    book.seen(view(closing_at=1_700_000_000_000))  # the renter started a close
    assert not book.may_serve(CHANNEL, 0)


def test_the_point_of_the_last_unspent_output_is_kept_and_a_claim_keeps_it(
    book: ChannelBook,
) -> None:
    assert book.get(CHANNEL).unspent_at == POINT
    later = {"slot": 200, "id": "ef" * 32}
    book.seen(view(claimed=1_000), later)
    book.seen(view(utxo="12" * 32 + "#1", claimed=2_000))  # the daemon's own claim
    entry = book.get(CHANNEL)
    assert entry.unspent_at == later and entry.view.claimed == 2_000


def test_a_book_of_the_first_schema_is_migrated(tmp_path: Path) -> None:
    """A book an older daemon made (no chain point, no schema version) opens with its
    channels and IOUs; their point is unknown until the chain shows them again."""
    path = tmp_path / "channels.sqlite"
    with sqlite3.connect(path) as old:
        old.execute(SCHEMA)
        old.execute(
            "INSERT INTO channel (id, utxo, address, renter_vkey, claimed, capacity, closing_at, "
            "iou_amount, iou_signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*dataclasses.astuple(view()), 1_000, iou(1_000).signature),
        )
    old.close()
    book = ChannelBook(path, NETWORK, SCRIPT, CREDIT)
    entry = book.get(CHANNEL)
    assert entry.view == view() and entry.iou == iou(1_000) and entry.unspent_at is None
    book.seen(view(), POINT)
    book.close()
    reopened = ChannelBook(path, NETWORK, SCRIPT, CREDIT)  # migrated once, opened again
    assert reopened.get(CHANNEL).unspent_at == POINT


CHILD = """
import json
import sys
from pathlib import Path
from pycardano import ScriptHash
from offchain.protocol.ledger.iou import SignedIou
from provider.money.channel_book import ChannelBook

book = ChannelBook(Path(sys.argv[1]), 0, ScriptHash(bytes.fromhex(sys.argv[2])), 0)
for line in sys.stdin:
    book.accept(SignedIou.from_wire(json.loads(line)))
    print("accepted", flush=True)
"""


@pytest.mark.slow  # a Python child importing pycardano
def test_an_acknowledged_iou_survives_the_process_killed_right_after(
    book: ChannelBook, tmp_path: Path
) -> None:
    """A real process takes IOUs and is SIGKILLed the moment it says one was accepted: a
    fresh book on the same file has that IOU."""
    path = tmp_path / "channels.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), SCRIPT.payload.hex()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    for amount in (1_000, 2_000):
        child.stdin.write(json.dumps(iou(amount).to_wire()) + "\n")
        child.stdin.flush()
        assert child.stdout.readline() == "accepted\n"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    reopened = ChannelBook(path, NETWORK, SCRIPT, CREDIT)
    assert reopened.get(CHANNEL).iou == iou(2_000)
