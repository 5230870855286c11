"""What the transaction rules see of the ledger: a read-only view handed to each check."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pycardano import TransactionInput, TransactionOutput

from devnet.params import ProtocolParameters


@dataclasses.dataclass(frozen=True)
class SlotConfig:
    """Deterministic slot <-> POSIX time: slot s starts at zero_time_ms + s * slot_length_ms."""

    zero_time_ms: int
    slot_length_ms: int

    def slot_to_posix_ms(self, slot: int) -> int:
        return self.zero_time_ms + slot * self.slot_length_ms

    def posix_ms_to_slot(self, posix_ms: int) -> int:
        return (posix_ms - self.zero_time_ms) // self.slot_length_ms


@dataclasses.dataclass(frozen=True)
class LedgerView:
    """The ledger state a transaction is checked against.

    `reward_accounts` maps a registered stake credential, keyed as `(is_script, hash bytes)`,
    to its reward balance in lovelace; unregistered credentials are absent.
    """

    utxo: Mapping[TransactionInput, TransactionOutput]
    params: ProtocolParameters
    slot: int  # the slot of the block the transaction would go into
    slots: SlotConfig
    reward_accounts: Mapping[tuple[bool, bytes], int]
    network_id: int = 0
