"""What each payment channel cost its renter, read from the chain as the market's index shows it
(the explorer's channel page and its transactions' pages): the lovelace the renter put in (the
open's lock and every top-up), the fees of the transactions the renter submits (open, top-up,
start of close, drain), what its provider claimed, and what came back to the renter (a drain,
the provider's end, a mutual close's output to the renter). `net_cost = put_in + fees -
returned` is the renter's wallet difference for the channel, to the lovelace; while the
channel is open, what it still holds (`held`) is in that cost until it comes back."""

from __future__ import annotations

import dataclasses
from typing import Any

from consumer.sdk.spend import Get

PUT_IN = ("open", "top-up")
RENTERS = ("open", "top-up", "start-close", "drain")  # the moves the renter's CLI submits
BACK = ("drain", "end")  # their amount: the lovelace given back to the renter


@dataclasses.dataclass(frozen=True)
class ChannelCost:
    """One channel's money, integer lovelace (0 while its open is not indexed yet)."""

    channel_id: str
    state: str | None
    put_in: int = 0
    fees: int = 0
    claimed: int = 0  # paid to its provider
    returned: int = 0
    held: int = 0  # still in the channel's UTxO

    @property
    def net_cost(self) -> int:
        return self.put_in + self.fees - self.returned

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "net_cost": self.net_cost}


def channel_cost(get: Get, channel_id: str) -> ChannelCost:
    """The channel's money as the chain has it (only its id before its open is indexed)."""
    page = get(f"/api/explorer/channels/{channel_id}")
    if page is None:
        return ChannelCost(channel_id, None)
    channel, events = page["channel"], page["events"]
    fees = returned = 0
    for event in events:
        if event["move"] in RENTERS:
            fees += get(f"/api/explorer/txs/{event['tx_id']}")["tx"]["fee"]
        if event["move"] in BACK:
            returned += event["amount"]
        elif event["move"] == "mutual-close":  # its outputs say what the renter got
            tx = get(f"/api/explorer/txs/{event['tx_id']}")["tx"]
            returned += sum(o["lovelace"] for o in tx["outputs"]
                            if o["address"] == channel["renter"])  # fmt: skip
    put_in = sum(e["amount"] for e in events if e["move"] in PUT_IN)
    return ChannelCost(channel_id, channel["state"], put_in, fees, channel["claimed"], returned,
                       channel["remaining"])  # fmt: skip
