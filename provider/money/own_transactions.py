"""The transactions the provider submits from its own wallet, each with its fee and the fee
allowances it collected: what `provider status` needs for the net income, which the chain alone
does not tell it (a settle's fee allowances go to whoever submits it, and only the submitter
knows it was itself).

The daemon records its channel claims and the settles of its own payouts, the bond commands
their moves, once each is confirmed. One JSON line a transaction, appended with O_APPEND (one
short write: the daemon and a CLI command may append at once); a transaction recorded twice
(a retry after a crash) counts once.

A rolled-back transaction stays recorded until it is submitted again (the same id, counted
once): the finality of what the daemon submits is issue 34's."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Literal

from pycardano import Transaction

Kind = Literal["claim", "settle", "bond", "start"]


@dataclasses.dataclass(frozen=True)
class OwnTransaction:
    tx_id: str
    kind: Kind
    fee: int  # lovelace, paid from the wallet
    allowances: int = 0  # lovelace: the fee allowances of the escrows a settle spent


@dataclasses.dataclass(frozen=True)
class Income:
    """The provider's money over everything recorded, integer lovelace: `net` is the change of
    its wallet (the provider key's) and its payout address together (one address unless the
    payout address is a cold wallet's), less what it moved into its bond or back (the bond's
    own line). Settlements and claims pay the payout address; fee allowances come to the
    wallet, which pays the fees of what the daemon submits (an owner's unbond or withdrawal
    fee comes from the owner's address). A small payout the daemon settles itself is raised to
    the minimum UTxO from the wallet: lovelace moved between its own addresses, no income."""

    payouts: int  # escrow settlements paid to it, by anyone
    claimed: int  # from its payment channels
    allowances: int
    fees: int

    @property
    def net(self) -> int:
        return self.payouts + self.claimed + self.allowances - self.fees


class OwnTransactions:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> OwnTransactions:
        """The provider's record: `<state_dir>/daemon/transactions.jsonl`."""
        return cls(state_dir / "daemon" / "transactions.jsonl")

    def record(self, tx: Transaction, kind: Kind, allowances: int = 0) -> None:
        """Append confirmed `tx`."""
        line = json.dumps(dataclasses.asdict(
            OwnTransaction(str(tx.id), kind, tx.transaction_body.fee, allowances)
        ))  # fmt: skip
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def all(self) -> list[OwnTransaction]:
        """Every transaction recorded, once each, oldest first."""
        if not self.path.exists():
            return []
        seen: dict[str, OwnTransaction] = {}
        for line in self.path.read_text().splitlines():
            try:
                entry = OwnTransaction(**json.loads(line))
            except (ValueError, TypeError):  # blank, or the last line torn by a crash
                continue
            seen.setdefault(entry.tx_id, entry)
        return list(seen.values())

    def income(self, payouts: int, claimed: int) -> Income:
        """The net income, given what settlements paid and channels gave (their own records)."""
        entries = self.all()
        return Income(
            payouts=payouts, claimed=claimed,
            allowances=sum(e.allowances for e in entries), fees=sum(e.fee for e in entries),
        )  # fmt: skip
