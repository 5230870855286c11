"""The renter's own record of its payment channels, under `<state_dir>/channels/`: one file a
channel with the terms it opened (so it can close and drain with the market gone, and a
restart loses nothing), and beside it the IOUs it signed (`<id>.ious`, one JSON line each,
newest last), so no restart signs below the last. Plain JSON and no pycardano: `unchained
channel list --local` reads it at once (tests/test_cli_imports.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consumer.sdk.errors import ConsumerError
from consumer.sdk.store import MIN_PREFIX, write_whole

if TYPE_CHECKING:  # decoded where the terms are used: a listing needs no Plutus types
    from offchain.protocol.ledger.types import ChannelTerms

IOU_SUFFIX = ".ious"
COMPACT_BYTES = 1 << 20  # an IOU file past this is rewritten with its newest line alone


@dataclasses.dataclass(frozen=True)
class ChannelRecord:
    """A channel as the renter opened it; `funded` is what the provider may claim in all (the
    deposit and every top-up made here), the most an IOU may say."""

    channel_id: str  # hex: blake2b_224 of the terms' CBOR, the datum's `terms`
    terms_cbor: str  # the ChannelTerms (hex CBOR), shown in every close and drain
    provider_id: str  # the provider's key hash (hex), as the market names it
    provider_address: str  # bech32: where claims pay
    funded: int  # lovelace
    close_period_ms: int
    created_ms: int
    open_tx_id: str
    closed_tx_id: str | None = None  # the drain this renter submitted

    @property
    def terms(self) -> ChannelTerms:
        from offchain.protocol.ledger.types import ChannelTerms

        return ChannelTerms.from_cbor(bytes.fromhex(self.terms_cbor))


class ChannelStore:
    """`<state_dir>/channels/<id>.json`, written whole (rename), and `<id>.ious`, appended."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "channels"

    def save(self, record: ChannelRecord) -> None:
        text = json.dumps(dataclasses.asdict(record), indent=2) + "\n"
        write_whole(self.dir / f"{record.channel_id}.json", text)

    def forget(self, channel_id: str) -> None:
        """Drop a record whose open the ledger refused: that channel never existed."""
        (self.dir / f"{channel_id}.json").unlink(missing_ok=True)

    def get(self, given: str) -> ChannelRecord:
        """The channel `given` names: its id or a unique prefix of it (8 characters or more)."""
        path = self.dir / f"{given}.json"
        if path.exists():
            return read(path)
        matches = [p for p in self.paths() if len(given) >= MIN_PREFIX and
                   p.name.startswith(given)]  # fmt: skip
        if len(matches) > 1:
            names = [p.name.removesuffix(".json") for p in matches]
            raise ConsumerError(
                f"{given!r} names {len(matches)} channels here: {', '.join(names)}; give more "
                "of the id", channel=given, matches=names,
            )  # fmt: skip
        if not matches:
            raise ConsumerError(
                f"no channel {given} in {self.dir}: see `unchained channel list` (or pass the "
                "--state-dir it was opened with)", channel=given,
            )  # fmt: skip
        return read(matches[0])

    def all(self) -> list[ChannelRecord]:
        """Every channel, oldest first."""
        return sorted((read(path) for path in self.paths()), key=lambda r: r.created_ms)

    def paths(self) -> list[Path]:
        return list(self.dir.glob("*.json"))

    def iou_path(self, channel_id: str) -> Path:
        return self.dir / f"{channel_id}{IOU_SUFFIX}"

    def last_iou(self, channel_id: str) -> dict[str, Any] | None:
        """The newest IOU signed on the channel, as `SignedIou.to_wire` wrote it; None before
        the first. A line a crash cut short is passed over (the one before it stands)."""
        path = self.iou_path(channel_id)
        if not path.exists():
            return None
        for line in reversed(path.read_bytes().splitlines()):
            try:
                wire = json.loads(line)
            except ValueError:
                continue
            if isinstance(wire, dict):
                return wire
        raise damaged(path, "no IOU in it")

    def signed(self, channel_id: str) -> int:
        """The last IOU's amount (0 before the first): what the provider may take in all."""
        last = self.last_iou(channel_id)
        return 0 if last is None else int(last["amount"])

    def save_iou(self, channel_id: str, wire: dict[str, Any]) -> None:
        """Append the IOU as a line of its own: an append costs a tenth of a whole-file rename
        on a service's signing path. Each line starts with its newline, so one written after a
        line a crash cut short is whole; past COMPACT_BYTES the file keeps the newest alone."""
        path, line = self.iou_path(channel_id), "\n" + json.dumps(wire)
        with path.open("a") as file:
            file.write(line)
            size = file.tell()
        if size > COMPACT_BYTES:
            write_whole(path, line)


def read(path: Path) -> ChannelRecord:
    """The record in `path`, or ConsumerError naming the file (edited or damaged)."""
    try:
        fields = json.loads(path.read_bytes())
        record = ChannelRecord(**fields)
    except (ValueError, TypeError) as exc:  # not JSON, not an object, a field missing or extra
        raise damaged(path, str(exc)) from exc
    ints = (record.funded, record.close_period_ms, record.created_ms)
    if not all(isinstance(value, int) for value in ints):
        raise damaged(path, "funded, close_period_ms and created_ms are whole numbers")
    return record


def damaged(path: Path, why: str) -> ConsumerError:
    return ConsumerError(
        f"{path} is not a channel record ({why}): move it out of the state directory or "
        "restore it", path=str(path),
    )  # fmt: skip
