"""Ledger state: the UTxO set and reward accounts, and how transactions change them.

Blocks apply transactions to a `LedgerState` and keep an undo record, so the devnet can
roll back. The mempool sees the state through a `PendingState`: the confirmed state with
the accepted-but-unconfirmed transactions layered on top, without copying the UTxO set.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterator, Mapping, MutableMapping

from pycardano import TransactionInput, TransactionOutput

from devnet import staking
from devnet.txdecode import DecodedTx

RewardAccounts = dict[tuple[bool, bytes], int]


@dataclasses.dataclass
class TxEffect:
    """What one transaction consumed and produced; enough to undo it."""

    consumed: dict[TransactionInput, TransactionOutput]
    produced: list[TransactionInput]


@dataclasses.dataclass
class BlockUndo:
    effects: list[TxEffect]
    reward_accounts_before: RewardAccounts


class AddressIndexedUtxo(MutableMapping[TransactionInput, TransactionOutput]):
    """A UTxO set that also knows which entries each address holds (for address queries)."""

    def __init__(self, entries: Mapping[TransactionInput, TransactionOutput]) -> None:
        self._entries: dict[TransactionInput, TransactionOutput] = {}
        self._by_address: dict[bytes, set[TransactionInput]] = defaultdict(set)
        self.update(entries)

    def at(self, address: bytes) -> list[TransactionInput]:
        """The entries held by `address` (its raw bytes)."""
        return list(self._by_address.get(address, ()))

    def __getitem__(self, key: TransactionInput) -> TransactionOutput:
        return self._entries[key]

    def __setitem__(self, key: TransactionInput, value: TransactionOutput) -> None:
        self._entries[key] = value
        self._by_address[value.address.to_primitive()].add(key)

    def __delitem__(self, key: TransactionInput) -> None:
        output = self._entries.pop(key)
        holders = self._by_address[output.address.to_primitive()]
        holders.discard(key)
        if not holders:
            del self._by_address[output.address.to_primitive()]

    def __iter__(self) -> Iterator[TransactionInput]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


class LedgerState:
    """The confirmed UTxO set and reward accounts."""

    def __init__(self, utxo: Mapping[TransactionInput, TransactionOutput]) -> None:
        self.utxo = AddressIndexedUtxo(utxo)
        self.reward_accounts: RewardAccounts = {}

    def apply_block(self, txs: list[DecodedTx]) -> BlockUndo:
        undo = BlockUndo([], dict(self.reward_accounts))
        for dtx in txs:
            undo.effects.append(apply_tx(self.utxo, self.reward_accounts, dtx))
        return undo

    def undo_block(self, undo: BlockUndo) -> None:
        for effect in reversed(undo.effects):
            for tx_in in effect.produced:
                self.utxo.pop(tx_in, None)
            self.utxo.update(effect.consumed)
        self.reward_accounts = undo.reward_accounts_before


def apply_tx(
    utxo: MutableMapping[TransactionInput, TransactionOutput],
    reward_accounts: RewardAccounts,
    dtx: DecodedTx,
) -> TxEffect:
    """Consume the inputs, produce the outputs, apply certificates and withdrawals."""
    body = dtx.tx.transaction_body
    consumed = {tx_in: utxo[tx_in] for tx_in in body.inputs}
    for tx_in in consumed:
        del utxo[tx_in]
    produced = []
    for index, output in enumerate(body.outputs):
        tx_in = TransactionInput.from_primitive([dtx.id, index])
        utxo[tx_in] = output
        produced.append(tx_in)
    # Deposits are not tracked per account, so any deposit amount prices the changes alike.
    staking.apply_staking(staking.staking_changes(body, key_deposit=0), reward_accounts)
    return TxEffect(consumed, produced)


class UtxoOverlay(MutableMapping[TransactionInput, TransactionOutput]):
    """A UTxO set seen through pending changes: base entries minus spent plus added."""

    def __init__(self, base: Mapping[TransactionInput, TransactionOutput]) -> None:
        self.base = base
        self.added: dict[TransactionInput, TransactionOutput] = {}
        self.spent: set[TransactionInput] = set()

    def __getitem__(self, key: TransactionInput) -> TransactionOutput:
        if key in self.added:
            return self.added[key]
        if key in self.spent:
            raise KeyError(key)
        return self.base[key]

    def __setitem__(self, key: TransactionInput, value: TransactionOutput) -> None:
        self.added[key] = value

    def __delitem__(self, key: TransactionInput) -> None:
        if key in self.added:
            del self.added[key]
        else:
            self[key]  # raises KeyError when unknown
            self.spent.add(key)

    def __iter__(self) -> Iterator[TransactionInput]:
        yield from (key for key in self.base if key not in self.spent)
        yield from self.added

    def __len__(self) -> int:
        return len(self.base) - len(self.spent) + len(self.added)

    def __contains__(self, key: object) -> bool:
        return key in self.added or (key not in self.spent and key in self.base)


class PendingState:
    """The confirmed ledger plus the mempool's transactions, in arrival order."""

    def __init__(self, confirmed: LedgerState) -> None:
        self.confirmed = confirmed
        self.reset()

    def reset(self) -> None:
        self.utxo = UtxoOverlay(self.confirmed.utxo)
        self.reward_accounts: RewardAccounts = dict(self.confirmed.reward_accounts)
        self.txs: list[DecodedTx] = []

    def add(self, dtx: DecodedTx) -> None:
        apply_tx(self.utxo, self.reward_accounts, dtx)
        self.txs.append(dtx)
