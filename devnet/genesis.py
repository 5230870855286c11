"""The devnet's genesis: start time, slot clock settings, and the funded demo wallets.

A genesis is created once per data directory and stored there as `genesis.json`; the
wallets' signing keys are written beside it as cardano-cli `.skey` envelopes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    PaymentVerificationKey,
    TransactionInput,
    TransactionOutput,
)

from devnet.view import SlotConfig
from offchain.chain.network import MAGICS
from offchain.protocol.ledger.amounts import ADA

DEMO_WALLETS = ("alice", "bob", "consumer", "provider", "market")
DEMO_WALLET_LOVELACE = 100_000 * ADA
FAUCET_WALLET = "faucet"
FAUCET_LOVELACE = 30_000_000_000 * ADA
NETWORK_MAGIC = MAGICS["devnet"]  # the network setting `devnet` names it
EPOCH_LENGTH = 432_000
SECURITY_PARAMETER = 2160
ACTIVE_SLOTS_COEFFICIENT = "1/20"


@dataclasses.dataclass(frozen=True)
class Genesis:
    """Everything that defines the chain's origin; the rest is derived from blocks."""

    system_start_s: int  # whole POSIX seconds, as Ogmios publishes genesis times
    slot_length_ms: int
    epoch_length: int
    first_slot: int  # the chain starts at the beginning of epoch 1 (clients reject epoch 0)
    funds: dict[str, int]  # bech32 address -> lovelace

    @property
    def slots(self) -> SlotConfig:
        return SlotConfig(self.system_start_s * 1000, self.slot_length_ms)

    def initial_utxo(self) -> dict[TransactionInput, TransactionOutput]:
        """Genesis UTxOs, keyed like Shelley's: tx id = blake2b-256 of the address bytes."""
        utxo = {}
        for bech32, amount in self.funds.items():
            address = Address.from_primitive(bech32)
            tx_id = hashlib.blake2b(address.to_primitive(), digest_size=32).digest()
            utxo[TransactionInput.from_primitive([tx_id, 0])] = TransactionOutput(address, amount)
        return utxo

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Genesis:
        return cls(**json.loads(text))


def wallet_address(key: PaymentSigningKey) -> Address:
    verification_key = PaymentVerificationKey.from_signing_key(key)
    return Address(verification_key.hash(), network=Network.TESTNET)


def wallet_key_path(data_dir: Path, name: str) -> Path:
    return data_dir / "wallets" / f"{name}.skey"


def load_wallet(data_dir: Path, name: str) -> PaymentSigningKey:
    return PaymentSigningKey.load(str(wallet_key_path(data_dir, name)))


def create_genesis(data_dir: Path, slot_length_ms: int, now_ms: int | None = None) -> Genesis:
    """Write wallet keys into `data_dir/wallets` (unless there) and return a genesis funding them.

    The system start lies one epoch before now, so the chain begins at epoch 1, slot
    EPOCH_LENGTH, at the current wall-clock time.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    wallets_dir = data_dir / "wallets"
    wallets_dir.mkdir(parents=True, exist_ok=True)
    funds: dict[str, int] = {}
    for name in (*DEMO_WALLETS, FAUCET_WALLET):
        path = wallet_key_path(data_dir, name)
        if path.exists():  # a reset keeps the wallets, so their addresses stay the same
            key = PaymentSigningKey.load(str(path))
        else:
            key = PaymentSigningKey.generate()
            key.save(str(path))
        amount = FAUCET_LOVELACE if name == FAUCET_WALLET else DEMO_WALLET_LOVELACE
        funds[str(wallet_address(key))] = amount
    start_ms = now_ms - EPOCH_LENGTH * slot_length_ms
    system_start_s = start_ms // 1000
    first_slot = -(-(now_ms - system_start_s * 1000) // slot_length_ms)
    return Genesis(system_start_s, slot_length_ms, EPOCH_LENGTH, first_slot, funds)


def demo_wallet_addresses(data_dir: Path) -> dict[str, str]:
    """Name -> bech32 address of every wallet written for this data directory."""
    return {
        path.stem: str(wallet_address(PaymentSigningKey.load(str(path))))
        for path in sorted((data_dir / "wallets").glob("*.skey"))
    }
