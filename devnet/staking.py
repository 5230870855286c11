"""What a transaction's certificates and withdrawals do to stake credentials.

The devnet tracks registered stake credentials and their reward balances, which is what the
withdraw-zero pattern needs: register a script credential, withdraw 0 from it, deregister it.
Delegations are accepted and change nothing we track; pool, DRep and committee certificates
are refused because the devnet keeps no such state.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, MutableMapping
from typing import Any

from pycardano import (
    Address,
    Network,
    ScriptHash,
    StakeCredential,
    StakeDelegation,
    StakeDeregistration,
    StakeDeregistrationConway,
    StakeRegistration,
    StakeRegistrationAndDelegation,
    StakeRegistrationAndDelegationAndVoteDelegation,
    StakeRegistrationAndVoteDelegation,
    StakeRegistrationConway,
    TransactionBody,
    VerificationKeyHash,
    VoteDelegation,
)
from pycardano.certificate import StakeAndVoteDelegation

from devnet.errors import INVALID_PARAMS, LedgerError
from devnet.params import lovelace
from devnet.txdecode import ERAS_WITH_TRANSACTIONS
from devnet.view import LedgerView

Credential = tuple[bool, bytes]  # (is_script, 28-byte credential hash), as in LedgerView

CREDENTIAL_ALREADY_REGISTERED = 3145
UNKNOWN_CREDENTIAL = 3146
NON_EMPTY_REWARD_ACCOUNT = 3147
CREDENTIAL_DEPOSIT_MISMATCH = 3151
INCOMPLETE_WITHDRAWALS = 3141
UNRECOGNIZED_CERTIFICATE = 3998


class Action(enum.Enum):
    REGISTER = "registration"
    DEREGISTER = "deregistration"
    DELEGATE = "delegation"


@dataclasses.dataclass(frozen=True)
class CertificateEffect:
    """One certificate, reduced to what it does to a stake credential.

    `amount` is the deposit paid (registration) or refunded (deregistration); `declared` is
    the amount written in a Conway certificate, None for the legacy forms, which use the
    protocol's key deposit.
    """

    action: Action
    credential: Credential
    amount: int = 0
    declared: int | None = None

    @property
    def needs_witness(self) -> bool:
        """Only the legacy registration (no deposit field) may go unsigned, as in Conway."""
        return not (self.action is Action.REGISTER and self.declared is None)


@dataclasses.dataclass(frozen=True)
class StakingChanges:
    """Certificates in transaction order, and withdrawals keyed by stake credential."""

    certificates: tuple[CertificateEffect, ...] = ()
    withdrawals: Mapping[Credential, int] = dataclasses.field(default_factory=dict)

    def _of(self, action: Action) -> list[CertificateEffect]:
        return [cert for cert in self.certificates if cert.action is action]

    @property
    def deposits(self) -> int:
        return sum(cert.amount for cert in self._of(Action.REGISTER))

    @property
    def refunds(self) -> int:
        return sum(cert.amount for cert in self._of(Action.DEREGISTER))

    @property
    def withdrawn(self) -> int:
        return sum(self.withdrawals.values())

    @property
    def witness_credentials(self) -> frozenset[Credential]:
        """Credentials that must authorize the transaction (by signature or by script)."""
        certified = {cert.credential for cert in self.certificates if cert.needs_witness}
        return frozenset(certified | set(self.withdrawals))


def credential_of(stake_credential: StakeCredential) -> Credential:
    inner = stake_credential.credential
    return isinstance(inner, ScriptHash), inner.payload


def reward_address(credential: Credential, network_id: int) -> Address:
    is_script, digest = credential
    part = ScriptHash(digest) if is_script else VerificationKeyHash(digest)
    return Address(staking_part=part, network=Network(network_id))


def reward_account_credential(address_bytes: bytes) -> tuple[Credential, int]:
    """The stake credential and network id of a withdrawal's reward address."""
    try:
        address = Address.from_primitive(address_bytes)
    except Exception as exc:
        raise _not_a_reward_address(address_bytes) from exc
    part = address.staking_part
    if address.payment_part is not None or part is None:
        raise _not_a_reward_address(address_bytes)
    return (isinstance(part, ScriptHash), part.payload), address.network.value


def _not_a_reward_address(address_bytes: bytes) -> LedgerError:
    """Ogmios' deserialisation failure: the ledger cannot even decode such a withdrawal."""
    reason = f"withdrawal key {address_bytes.hex()} is not a reward (stake) address"
    return LedgerError(
        INVALID_PARAMS,
        f"Invalid transaction: {reason}; withdrawals must name stake addresses.",
        dict.fromkeys(ERAS_WITH_TRANSACTIONS, reason),
    )


_LEGACY = {StakeRegistration: Action.REGISTER, StakeDeregistration: Action.DEREGISTER}
_CONWAY_WITH_DEPOSIT = {
    StakeRegistrationConway: Action.REGISTER,
    StakeRegistrationAndDelegation: Action.REGISTER,
    StakeRegistrationAndVoteDelegation: Action.REGISTER,
    StakeRegistrationAndDelegationAndVoteDelegation: Action.REGISTER,
    StakeDeregistrationConway: Action.DEREGISTER,
}
_DELEGATIONS = (StakeDelegation, VoteDelegation, StakeAndVoteDelegation)
_KNOWN = frozenset((*_LEGACY, *_CONWAY_WITH_DEPOSIT, *_DELEGATIONS))


def certificate_effect(certificate: Any, key_deposit: int) -> CertificateEffect:
    """Reduce one pycardano certificate, or refuse kinds the devnet keeps no state for."""
    kind = type(certificate)
    if kind not in _KNOWN:
        raise LedgerError(
            UNRECOGNIZED_CERTIFICATE,
            f"The devnet does not support {kind.__name__} certificates: it tracks stake "
            "credential registration, deregistration and delegation only. Remove the "
            "certificate.",
        )
    credential = credential_of(certificate.stake_credential)
    if kind in _LEGACY:
        return CertificateEffect(_LEGACY[kind], credential, key_deposit)
    if kind in _CONWAY_WITH_DEPOSIT:
        coin = certificate.coin
        return CertificateEffect(_CONWAY_WITH_DEPOSIT[kind], credential, coin, coin)
    return CertificateEffect(Action.DELEGATE, credential)


def staking_changes(body: TransactionBody, key_deposit: int) -> StakingChanges:
    """What the body's certificates and withdrawals do; `key_deposit` prices legacy forms."""
    certificates = tuple(certificate_effect(cert, key_deposit) for cert in body.certificates or ())
    withdrawals = {
        reward_account_credential(address)[0]: amount
        for address, amount in (body.withdraws or {}).items()
    }
    return StakingChanges(certificates, withdrawals)


def check_staking(changes: StakingChanges, view: LedgerView) -> None:
    """Refuse what the ledger's CERTS rule refuses, in its order.

    Withdrawals are checked against the state before any certificate (so a transaction may
    drain and deregister an account, but not register and withdraw); then each certificate
    sees the effect of the ones before it.
    """
    accounts = dict(view.reward_accounts)
    _check_withdrawals(changes.withdrawals, accounts, view.network_id)
    _drain(changes.withdrawals, accounts)
    for cert in changes.certificates:
        _check_certificate(cert, accounts, view.params.key_deposit)
        _apply_certificate(cert, accounts)


def apply_staking(
    changes: StakingChanges, reward_accounts: MutableMapping[Credential, int]
) -> None:
    """Update the ledger's reward accounts for an accepted transaction."""
    _drain(changes.withdrawals, reward_accounts)
    for cert in changes.certificates:
        _apply_certificate(cert, reward_accounts)


def _drain(
    withdrawals: Mapping[Credential, int], accounts: MutableMapping[Credential, int]
) -> None:
    for credential, amount in withdrawals.items():
        accounts[credential] -= amount


def _apply_certificate(cert: CertificateEffect, accounts: MutableMapping[Credential, int]) -> None:
    if cert.action is Action.REGISTER:
        accounts[cert.credential] = 0
    elif cert.action is Action.DEREGISTER:
        del accounts[cert.credential]


def _check_withdrawals(
    withdrawals: Mapping[Credential, int], accounts: Mapping[Credential, int], network_id: int
) -> None:
    incomplete = {
        credential: amount
        for credential, amount in withdrawals.items()
        if accounts.get(credential) != amount
    }
    if not incomplete:
        return
    details = "; ".join(
        f"{reward_address(credential, network_id)} asks {amount} lovelace but "
        + _balance_text(accounts.get(credential))
        for credential, amount in incomplete.items()
    )
    raise LedgerError(
        INCOMPLETE_WITHDRAWALS,
        f"A withdrawal must take the whole balance of a registered reward account: {details}.",
        {
            "incompleteWithdrawals": {
                str(reward_address(credential, network_id)): lovelace(amount)
                for credential, amount in incomplete.items()
            }
        },
    )


def _balance_text(balance: int | None) -> str:
    if balance is None:
        return "the account is not registered (register the stake credential first)"
    return f"its balance is {balance} lovelace"


def _check_certificate(
    cert: CertificateEffect, accounts: Mapping[Credential, int], key_deposit: int
) -> None:
    registered = cert.credential in accounts
    if cert.action is Action.REGISTER and registered:
        raise _credential_error(
            CREDENTIAL_ALREADY_REGISTERED,
            "knownCredential",
            cert.credential,
            "is already registered; drop the registration certificate",
        )
    if cert.action is not Action.REGISTER and not registered:
        raise _credential_error(
            UNKNOWN_CREDENTIAL,
            "unknownCredential",
            cert.credential,
            f"is not registered, so its {cert.action.value} is refused; register it first",
        )
    if cert.declared is not None and cert.declared != key_deposit:
        raise LedgerError(
            CREDENTIAL_DEPOSIT_MISMATCH,
            f"A {cert.action.value} certificate declares {cert.declared} lovelace but the "
            f"stake credential deposit is {key_deposit} lovelace.",
            {"providedDeposit": lovelace(cert.declared), "expectedDeposit": lovelace(key_deposit)},
        )
    balance = accounts.get(cert.credential, 0)
    if cert.action is Action.DEREGISTER and balance:
        raise LedgerError(
            NON_EMPTY_REWARD_ACCOUNT,
            f"Stake credential {cert.credential[1].hex()} still holds {balance} lovelace of "
            "rewards; withdraw them in the same transaction before deregistering.",
            {"nonEmptyRewardAccountBalance": lovelace(balance)},
        )


def _credential_error(code: int, field: str, credential: Credential, problem: str) -> LedgerError:
    is_script, digest = credential
    origin = "script" if is_script else "verificationKey"
    return LedgerError(
        code,
        f"Stake credential {digest.hex()} ({origin}) {problem}.",
        {field: digest.hex(), "from": origin},
    )
