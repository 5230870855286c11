"""The renter's IOU signer and channel records, without the chain: an IOU is signed only up to
what the renter received and what the channel holds, never below the last one, and a restart
(a new signer over the same state directory) neither signs below it nor pays twice. And the
channel commands that read the state directory alone start without pycardano."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from pycardano import Address, HDWallet, Network, PaymentSigningKey, ScriptHash

from consumer.cli.channel import duration_ms, lovelace_of
from consumer.sdk.channel_store import ChannelRecord, ChannelStore
from consumer.sdk.errors import ConsumerError
from consumer.sdk.iou_signer import IouNotSigned, IouSigner
from consumer.sdk.keys import ConsumerKey, from_mnemonic
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.ledger.types import ChannelTerms, TxOutRef
from tests.test_cli_imports import STARTUP, heavy, imported

NETWORK_ID = 0
CHANNEL_HASH = ScriptHash(bytes(range(28)))
FUNDED = 10 * ADA


def record(key: ConsumerKey, channel_id: str = "ab" * 28, funded: int = FUNDED) -> ChannelRecord:
    provider = Address(PaymentSigningKey.generate().to_verification_key().hash(),
                       network=Network.TESTNET)  # fmt: skip
    terms = ChannelTerms(to_plutus(key.address), to_plutus(provider), bytes(32), 60_000,
                         TxOutRef(bytes(32), 0))  # fmt: skip
    return ChannelRecord(channel_id, terms.to_cbor_hex(), "cd" * 28, str(provider), funded,
                         60_000, 1_700_000_000_000, "ef" * 32)  # fmt: skip


@pytest.fixture
def key() -> ConsumerKey:
    return ConsumerKey(PaymentSigningKey.generate())


@pytest.fixture
def store(tmp_path: Path, key: ConsumerKey) -> ChannelStore:
    made = ChannelStore(tmp_path / "state")
    made.save(record(key))
    return made


def signer(key: ConsumerKey, store: ChannelStore, channel_id: str = "ab" * 28) -> IouSigner:
    return IouSigner(key, NETWORK_ID, CHANNEL_HASH, store.get(channel_id), store)


def vkey(key: ConsumerKey) -> bytes:
    return key.key.to_verification_key().payload[:32]


def test_ious_are_cumulative_and_signed_by_the_renter(key, store):
    pays = signer(key, store)
    first = pays.pay(1_000, received_total=1_500)
    second = pays.pay(2_500, received_total=2_500)
    assert (first.amount, second.amount, pays.signed) == (1_000, 2_500, 2_500)
    for iou in (first, second):
        assert iou.channel == bytes.fromhex("ab" * 28)
        assert iou.signed_by(vkey(key), NETWORK_ID, CHANNEL_HASH)
        assert not iou.signed_by(vkey(key), 1, CHANNEL_HASH)  # another network's: worthless
    assert store.signed("ab" * 28) == 2_500


def test_refuses_more_than_was_received(key, store):
    pays = signer(key, store)
    pays.pay(1_000, received_total=1_000)
    with pytest.raises(IouNotSigned, match=r"more than the 0\.001000 ADA you received"):
        pays.pay(1_001, received_total=1_000)
    assert pays.signed == store.signed("ab" * 28) == 1_000


def test_refuses_more_than_the_deposit(key, store):
    pays = signer(key, store)
    assert pays.pay(FUNDED, received_total=FUNDED + 1).amount == FUNDED  # all of it: fine
    with pytest.raises(IouNotSigned, match=r"more than the channel holds .*top it up") as refused:
        pays.pay(FUNDED + 1, received_total=FUNDED + 1)
    assert refused.value.details["funded"] == FUNDED
    assert store.signed("ab" * 28) == FUNDED


def test_refuses_below_the_last_iou(key, store):
    pays = signer(key, store)
    pays.pay(5_000, received_total=5_000)
    with pytest.raises(IouNotSigned, match="below the last IOU"):
        pays.pay(4_999, received_total=9_000)
    with pytest.raises(IouNotSigned, match="below the last IOU"):
        pays.pay(-1, received_total=9_000)


def test_the_same_total_is_the_same_iou(key, store):
    pays = signer(key, store)
    iou = pays.pay(3_000, received_total=3_000)
    assert pays.pay(3_000, received_total=4_000) is iou  # a repeated report pays nothing more


def test_a_restart_keeps_the_last_iou(key, store):
    iou = signer(key, store).pay(7_000, received_total=7_000)
    again = signer(key, store)  # a new process over the same state directory
    assert again.signed == 7_000 and again.last == iou
    assert again.pay(7_000, received_total=7_000) == iou  # not counted twice
    with pytest.raises(IouNotSigned, match="below the last IOU"):
        again.pay(6_000, received_total=7_000)
    assert again.pay(8_000, received_total=8_000).amount == 8_000


def test_a_line_a_crash_cut_short_is_passed_over(key, store):
    signer(key, store).pay(1_000, received_total=1_000)
    with store.iou_path("ab" * 28).open("a") as file:
        file.write('\n{"channel": "abab')  # the process died while appending
    again = signer(key, store)
    assert again.signed == 1_000  # the one before stands
    again.pay(2_000, received_total=2_000)
    assert signer(key, store).signed == 2_000  # written on a line of its own


def test_the_iou_file_keeps_the_newest_alone_once_large(key, store):
    pays = signer(key, store)
    pays.pay(1_000, received_total=1_000)
    with store.iou_path("ab" * 28).open("a") as file:
        file.write(("\n" + "x" * 1023) * 1024)  # a megabyte of older lines
    iou = pays.pay(2_000, received_total=2_000)
    lines = store.iou_path("ab" * 28).read_text().splitlines()[1:]  # each starts a line
    assert [json.loads(line) for line in lines] == [iou.to_wire()]
    assert signer(key, store).last == iou


def test_concurrent_payments_never_go_down(key, store):
    pays = signer(key, store)
    totals = list(range(1_000, 41_000, 1_000))
    refused: list[int] = []

    def pay(total: int) -> None:
        try:
            pays.pay(total, received_total=total)
        except IouNotSigned:
            refused.append(total)  # a later total signed first: this one is below it

    threads = [threading.Thread(target=pay, args=(t,)) for t in totals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.signed("ab" * 28) == pays.signed == max(set(totals) - set(refused))
    assert pays.signed == totals[-1]  # the largest total is never refused


def test_a_stored_iou_of_another_key_is_refused(key, store):
    other = ConsumerKey(PaymentSigningKey.generate())
    signer(other, store).pay(1_000, received_total=1_000)  # written by another key
    with pytest.raises(ConsumerError, match="not signed by this key for this channel"):
        signer(key, store)
    store.iou_path("ab" * 28).write_text(json.dumps({"amount": 1}))
    with pytest.raises(ConsumerError, match="is not an IOU"):
        signer(key, store)


def test_a_mnemonic_key_signs_ious(tmp_path):
    words = HDWallet.generate_mnemonic(strength=256)
    key = ConsumerKey(from_mnemonic(words))
    store = ChannelStore(tmp_path)
    store.save(record(key))
    iou = signer(key, store).pay(1_000, received_total=1_000)
    assert iou.signed_by(vkey(key), NETWORK_ID, CHANNEL_HASH)


def test_records_by_prefix_and_damaged_ones_named(key, tmp_path):
    store = ChannelStore(tmp_path)
    for at, channel_id in enumerate(("ab" * 28, "abcd" * 14)):
        store.save(dataclasses.replace(record(key, channel_id), created_ms=at))
    assert store.get("abababab").channel_id == "ab" * 28
    with pytest.raises(ConsumerError, match="no channel abab in"):
        store.get("abab")  # too short to name a channel
    other = dataclasses.replace(record(key, "abcdabcd" + "00" * 24), created_ms=-1)
    store.save(other)
    with pytest.raises(ConsumerError, match="names 2 channels here"):
        store.get("abcdabcd")
    assert [r.channel_id for r in store.all()] == [other.channel_id, "ab" * 28, "abcd" * 14]
    (store.dir / "ff.json").write_text("{}")
    with pytest.raises(ConsumerError, match=r"ff\.json is not a channel record"):
        store.all()


DURATIONS = [("90s", 90_000), ("30min", 1_800_000), ("1h", 3_600_000), ("2d", 172_800_000),
             ("500ms", 500)]  # fmt: skip


@pytest.mark.parametrize(("text", "ms"), DURATIONS)
def test_durations(text, ms):
    assert duration_ms("--close-period", text) == ms


@pytest.mark.parametrize("text", ["3600", "1.5h", "0s", "1 hour", "-1h"])
def test_durations_need_a_unit_and_a_whole_positive_number(text):
    with pytest.raises(ConsumerError, match="--close-period: expected a positive duration"):
        duration_ms("--close-period", text)


def test_amounts_in_ada():
    assert lovelace_of("--deposit", "10") == 10 * ADA
    assert lovelace_of("--deposit", "2.5ADA") == 2_500_000
    assert lovelace_of("--deposit", "1500000lovelace") == 1_500_000
    with pytest.raises(ConsumerError, match=r"--deposit: .*6 decimals"):
        lovelace_of("--deposit", "0.0000001")
    with pytest.raises(ConsumerError, match=r"--deposit: .*must be positive"):
        lovelace_of("--deposit", "0")


def test_channel_list_local_starts_without_pycardano(key, tmp_path):
    store = ChannelStore(tmp_path / "state")
    store.save(record(key))
    store.save_iou("ab" * 28, {"channel": "ab" * 28, "amount": 2 * ADA, "signature": "00" * 64})
    done, modules = imported("channel", "list", "--local", "--state-dir", "state", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "abababababababab" in done.stdout and "8.000000 ADA" in done.stdout, done.stdout
    assert heavy(modules, STARTUP) == []
    done, _ = imported("channel", "list", "--local", "--json", "--state-dir", "state", cwd=tmp_path)
    (row,) = json.loads(done.stdout)
    assert (row["deposit"], row["signed"], row["left"]) == (FUNDED, 2 * ADA, 8 * ADA)


@pytest.mark.parametrize("command", [("channel",), ("channel", "open"), ("channel", "close")])
def test_channel_help_imports_nothing_heavy(command, tmp_path):
    done, modules = imported(*command, "--help", cwd=tmp_path)
    assert done.returncode == 0 and "Usage" in done.stdout, done.stderr[-2000:]
    assert heavy(modules) == []
