"""The renter's own record of its deployments (endpoints and pods) under
`<state_dir>/deployments/`: one JSON file each, naming the gateway that runs it, the channel
that pays and the spec it signed, so `endpoint call NAME`, `endpoint stop NAME` or `pod ssh
NAME` need nothing but the name. Plain JSON and no pycardano, as the channel records."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from consumer.sdk.errors import ConsumerError
from consumer.sdk.store import write_whole


@dataclasses.dataclass(frozen=True)
class RentalRecord:
    name: str
    kind: str  # "endpoint" | "pod"
    gateway_url: str  # http(s)://HOST:PORT, from the provider's signed offer
    provider_id: str  # the provider's key hash (hex)
    channel_id: str  # hex: the channel that pays for it
    spec: dict[str, Any]  # the spec as signed in the deploy
    price_per_request: int  # lovelace
    price_per_second: int  # lovelace
    created_ms: int
    ssh_identity: str = ""  # pods: the private key beside the public one it was started with
    # an endpoint on several providers: each other one's gateway_url, provider_id, channel_id
    others: list[dict[str, str]] = dataclasses.field(default_factory=list)

    def placements(self) -> list[RentalRecord]:
        """This deployment on each provider that runs it, this record's own first: each a
        record of its own (its gateway, provider and channel), as the commands use one."""
        return [self, *(dataclasses.replace(self, **other, others=[]) for other in self.others)]


class RentalStore:
    """`<state_dir>/deployments/<name>.json`, each written whole (rename)."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "deployments"

    def save(self, record: RentalRecord) -> None:
        write_whole(self.path(record.name), json.dumps(dataclasses.asdict(record), indent=2) + "\n")

    def get(self, name: str) -> RentalRecord:
        """The deployment named `name`; ConsumerError if none is recorded here."""
        path = self.path(name)
        if not path.exists():
            raise ConsumerError(
                f"no deployment named {name} in {self.dir}: see `unchained endpoint list` (or "
                "pass the --state-dir it was deployed with)", deployment=name,
            )  # fmt: skip
        return _read(path)

    def all(self) -> list[RentalRecord]:
        """Every deployment recorded here, oldest first."""
        records = (_read(path) for path in self.dir.glob("*.json"))
        return sorted(records, key=lambda record: (record.created_ms, record.name))

    def on_channel(self, channel_id: str) -> list[RentalRecord]:
        """The deployments (on one of their providers) that `channel_id` pays for."""
        return [placed for record in self.all() for placed in record.placements()
                if placed.channel_id == channel_id]  # fmt: skip

    def forget(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def path(self, name: str) -> Path:
        if "/" in name or name.startswith("."):
            raise ConsumerError(f"{name!r} is not a deployment name", deployment=name)
        return self.dir / f"{name}.json"


def _read(path: Path) -> RentalRecord:
    try:
        return RentalRecord(**json.loads(path.read_bytes()))
    except (ValueError, TypeError) as exc:
        raise ConsumerError(f"{path} is not a deployment record ({exc}): move it out of the "
                            "state directory", path=str(path)) from exc  # fmt: skip
