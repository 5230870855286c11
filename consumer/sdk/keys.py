"""The consumer's key: a cardano-cli `.skey` envelope (normal or BIP32-extended) or a BIP-39
mnemonic read through pycardano's HD wallet on the CIP-1852 payment path. The file's content
says which, so one `--key` option takes either. Keys never leave this process: they sign
requests and transactions here, and nothing else sees them. A key kept in a wallet is named by
its verification key (a cardano-cli `.vkey`, `WalletKey`): it has an address and builds
transactions, which the wallet signs (`consumer.sdk.pending`), and it signs nothing here."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pycardano import (
    Address,
    ExtendedSigningKey,
    HDWallet,
    Network,
    PaymentExtendedSigningKey,
    PaymentSigningKey,
    PaymentVerificationKey,
    Transaction,
    VerificationKey,
)

from consumer.sdk.errors import WalletError
from consumer.sdk.request_key import key_text
from offchain.protocol.api.signed_request import RequestFields, sign_request
from offchain.protocol.tx.txbuild import sign_tx

ACCOUNT_PATH = "m/1852'/1815'/{account}'/0/{index}"  # CIP-1852: purpose, coin, account, role 0
MNEMONIC_WORDS = 24

SigningKey = PaymentSigningKey | ExtendedSigningKey


@dataclasses.dataclass(frozen=True)
class ConsumerKey:
    """A payment key and its enterprise address: it signs the consumer's requests and locks,
    and receives refunds and change."""

    key: SigningKey
    network: Network = Network.TESTNET

    @property
    def verification_key(self) -> VerificationKey:
        return self.key.to_verification_key()

    @property
    def address(self) -> Address:
        return Address(self.verification_key.hash(), network=self.network)

    @property
    def key_hash(self) -> str:
        return self.verification_key.hash().payload.hex()

    @property
    def vkey(self) -> bytes:
        """The 32-byte Ed25519 verification key (an extended key's without its chain code)."""
        return bytes(self.verification_key.payload[:32])

    @property
    def payload_signer(self) -> SigningKey:
        """What signs its IOUs and other payloads (`offchain.protocol.ledger.payloads`)."""
        return self.key

    def sign_request(self, fields: RequestFields) -> dict[str, str]:
        """The CIP-8 headers for one request to the market (what CIP-30 `signData` gives)."""
        return sign_request(self.key, fields, network=self.network)

    def sign(self, tx: Transaction) -> Transaction:
        return sign_tx(tx, self.key)

    def can_sign(self, what: str) -> None:
        """Nothing: this key signs here (a `WalletKey` refuses, saying `what` it cannot do)."""


@dataclasses.dataclass(frozen=True)
class WalletKey(ConsumerKey):
    """The renter's key as a wallet holds it: only its verification key is here (`--key` names
    a `.vkey`). Transactions are built for it and signed outside (`--unsigned-tx`); anything
    that would sign here (a transaction, a market or gateway request, an IOU) is refused,
    saying so."""

    key: PaymentVerificationKey  # no signing half here

    @property
    def verification_key(self) -> VerificationKey:
        return self.key

    @property
    def payload_signer(self) -> SigningKey:
        raise self.refusal("sign IOUs")

    def sign_request(self, fields: RequestFields) -> dict[str, str]:
        raise self.refusal(f"sign a request to {fields.path}")

    def sign(self, tx: Transaction) -> Transaction:
        raise self.refusal("sign a transaction: pass --unsigned-tx FILE and sign it there")

    def can_sign(self, what: str) -> None:
        raise self.refusal(what)

    def refusal(self, what: str) -> WalletError:
        return WalletError(
            f"--key is a verification key (its signing key is in your wallet), so this cannot "
            f"{what}; commands that sign requests or IOUs need the signing key",
            address=str(self.address),
        )


def from_mnemonic(words: str, account: int = 0, index: int = 0) -> PaymentExtendedSigningKey:
    """The CIP-1852 payment key `account`/`index` of a BIP-39 mnemonic (what wallets derive)."""
    words = " ".join(words.split())
    if not HDWallet.is_mnemonic(words):
        raise WalletError("not a BIP-39 mnemonic (12 to 24 English words with a valid checksum)")
    root = HDWallet.from_mnemonic(words)
    derived = root.derive_from_path(ACCOUNT_PATH.format(account=account, index=index))
    return PaymentExtendedSigningKey.from_hdwallet(derived)


def load_key(path: Path, network: Network = Network.TESTNET) -> ConsumerKey:
    """The key in `path`: a cardano-cli envelope (JSON) or a mnemonic (words)."""
    text = key_text(path)
    if not text.lstrip().startswith("{"):
        return ConsumerKey(from_mnemonic(text), network)
    try:
        return WalletKey(PaymentVerificationKey.from_json(text, validate_type=True), network)
    except Exception:  # not a verification key: a signing key, tried next
        pass
    for kind in (PaymentSigningKey, PaymentExtendedSigningKey):
        try:
            return ConsumerKey(kind.from_json(text, validate_type=True), network)
        except Exception:  # pycardano raises several kinds for another envelope type
            continue
    raise WalletError(
        f"{path} is not a payment key (cardano-cli PaymentSigningKeyShelley_ed25519, "
        "PaymentExtendedSigningKeyShelley_ed25519_bip32, or a wallet's "
        "PaymentVerificationKeyShelley_ed25519)",
        path=str(path),
    )


def new_wallet(path: Path, *, mnemonic: bool, network: Network = Network.TESTNET) -> ConsumerKey:
    """Write a fresh key to `path` (mode 0600, never over an existing file): a 24-word mnemonic
    (restorable in any CIP-1852 wallet) or a cardano-cli `.skey` envelope."""
    if mnemonic:
        words = HDWallet.generate_mnemonic(strength=MNEMONIC_WORDS * 32 // 3)
        key: SigningKey = from_mnemonic(words)
        text = words + "\n"
    else:
        key = PaymentSigningKey.generate()
        text = key.to_json() + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise WalletError(
            f"{path} exists: a key is never replaced (it may hold funds); choose another --key",
            path=str(path),
        ) from exc
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return ConsumerKey(key, network)
