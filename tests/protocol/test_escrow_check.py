"""A provider signs an acceptance only for an escrow it can honour. Escrows locked on the devnet
by hand (as any consumer can lock them, past the lock builder's checks), each unsafe in one
way: every one is refused with its reason and the provider's key signs nothing; the honest
one is accepted and its signature verifies. Time is the chain's: the devnet travels."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from pycardano import Address, Network, PaymentSigningKey, UTxO, VerificationKeyHash

from devnet.genesis import ADA
from offchain.chain.utxo import utxo_at
from offchain.protocol.checks.bond_check import BondRefused
from offchain.protocol.checks.escrow_check import MARGINS, EscrowRefused
from offchain.protocol.checks.refusal import Refusal
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.payloads import acceptance_payload, verify
from offchain.protocol.ledger.types import (
    BondDatum,
    EscrowDatum,
    Just,
    NoStakingCredential,
    PlutusAddress,
    PubKeyCredential,
)
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import Clock, Wallet, out_ref
from provider.money.receipts import EscrowJob, accept
from tests.protocol.evidence import SigningSpy, place
from tests.protocol.onchain import (
    BOND,
    confirm,
    escrow_terms,
    lock_by_hand,
    output,
    post_bond,
    travel_to,
    wallet,
)

SPEC = JobSpec(image="busybox:1.36", command=["true"], max_duration_s=60, max_price_lovelace=ADA)
PRICE = ADA // 10  # lovelace per second of the bundle: the provider's due meets the min-UTxO
UNITS = SPEC.max_duration_s
ALLOWANCE = 2 * ADA
REST = 3 * ADA  # the consumer's rest after a full-length job
LOCKED = PRICE * UNITS + ALLOWANCE + REST
DEADLINE_MS, WINDOW_MS = 10 * 60_000, 5 * 60_000  # room for the default margins
NEEDED_MS = MARGINS.start_ms + UNITS * 1000 + MARGINS.settle_ms  # start, run, settle
STRANGER = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET)
OTHER_STAKE = VerificationKeyHash(bytes(range(28)))


@pytest.fixture(scope="module")
async def consumer(devnet) -> Wallet:
    return await wallet(devnet)


@pytest.fixture(scope="module")
async def provider(devnet) -> Wallet:
    return await wallet(devnet)


def honest(consumer: Wallet, provider: Wallet, now: int, /, **changes: Any) -> EscrowDatum:
    """The datum of an escrow for SPEC at PRICE, closing well after `now`, with `changes`."""
    terms = dict(
        price_per_unit=PRICE, max_units=UNITS, deadline=now + DEADLINE_MS,
        settle_window=WINDOW_MS, job_id=SPEC.job_id(), fee_allowance=ALLOWANCE,
    )  # fmt: skip
    return dataclasses.replace(escrow_terms(consumer, provider, now, **terms), **changes)


async def locked(devnet, deployment, consumer, provider, lovelace=LOCKED, /, **changes) -> UTxO:
    """An escrow locked by hand: the honest terms with `changes`."""
    now = Clock.now(devnet.context()).tip_ms
    datum = honest(consumer, provider, now, **changes)
    return await lock_by_hand(devnet, deployment, consumer, provider, lovelace, datum)


def escrow_job(
    devnet, deployment: Deployment, escrow: UTxO, spy: SigningSpy, payout: Address | None = None
) -> EscrowJob:
    """The job at `escrow` as the provider reads it: from the chain; paid at `payout` (None:
    the key's own address)."""
    context = devnet.context()
    on_chain = utxo_at(context, escrow.input)
    assert on_chain is not None
    paid = payout or Wallet.of(spy.key, deployment.network).address
    return EscrowJob(context, deployment, on_chain, SPEC, PRICE, spy.key, paid)


def refused(devnet, deployment, escrow, provider, reason, bond=None, error=EscrowRefused):
    """`accept` refuses `escrow` for `reason`, and the provider's key signed nothing."""
    spy = SigningSpy(provider.key)
    with pytest.raises(error) as refusal:
        accept(escrow_job(devnet, deployment, escrow, spy), bond)
    assert refusal.value.reason is reason, refusal.value
    assert spy.signed == []
    return refusal.value


def accepted(devnet, deployment: Deployment, escrow: UTxO, provider: Wallet, bond=None) -> bytes:
    """`accept` signs `escrow`'s Acceptance, and it verifies under the provider's key."""
    spy = SigningSpy(provider.key)
    signature = accept(escrow_job(devnet, deployment, escrow, spy), bond)
    payload = acceptance_payload(
        0, deployment.escrow_hash, escrow.input, SPEC.job_id(), deployment.bond_hash
    )
    assert spy.signed == [payload]
    assert verify(provider.vkey, payload, signature)
    return signature


async def test_a_provider_paid_at_a_cold_address_accepts_only_escrows_paying_it(
    devnet, deployment, consumer
):
    """Its offer names the cold address (`daemon.payout_address`): an escrow paying the hot
    key's own address is another offer's, a bond the hot key owns is not the one its offer
    backs; the escrow paying the cold address is accepted, signed by the hot key, backed by
    the bond the cold key owns."""
    provider = await wallet(devnet)  # its own: the bonds take most of a wallet
    cold = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET)
    context = devnet.context()
    owned = bonds.create(context, deployment, cold.address, provider.vkey, BOND, provider.address)
    cold_bond = output(await confirm(devnet, provider.sign(owned)), bonds.BOND_OUTPUT)
    hot_bond = await post_bond(devnet, deployment, provider, BOND)
    to_cold = await locked(devnet, deployment, consumer, provider, provider=to_plutus(cold.address))
    to_hot = await locked(devnet, deployment, consumer, provider)
    for escrow, bond, error, reason in (
        (to_hot, cold_bond, EscrowRefused, Refusal.OTHER_ADDRESS),
        (to_cold, hot_bond, BondRefused, Refusal.OTHER_ADDRESS),
    ):
        spy = SigningSpy(provider.key)
        with pytest.raises(error) as refusal:
            accept(escrow_job(devnet, deployment, escrow, spy, cold.address), bond)
        assert refusal.value.reason is reason and spy.signed == [], refusal.value
    spy = SigningSpy(provider.key)
    signature = accept(escrow_job(devnet, deployment, to_cold, spy, cold.address), cold_bond)
    payload = acceptance_payload(
        0, deployment.escrow_hash, to_cold.input, SPEC.job_id(), deployment.bond_hash
    )
    assert spy.signed == [payload] and verify(provider.vkey, payload, signature)


Changes = Callable[[int, Wallet], dict[str, Any]]  # (chain now, provider) -> lock arguments
UNSAFE: dict[str, tuple[Changes, Refusal]] = {
    "deadline + window already passed": (
        lambda now, _: {"deadline": now - 60_000, "settle_window": 1_000}, Refusal.CLOSED),
    "too little time left to start, run and settle": (
        lambda now, _: {"deadline": now + NEEDED_MS - WINDOW_MS - 1_000}, Refusal.NO_TIME),
    "price -1": (lambda *_: {"price_per_unit": -1}, Refusal.RANGE),
    "negative fee allowance": (lambda *_: {"fee_allowance": -1}, Refusal.RANGE),
    "not the offered price": (lambda *_: {"price_per_unit": PRICE + 1}, Refusal.OTHER_PRICE),
    "max units below the max duration": (lambda *_: {"max_units": UNITS - 1}, Refusal.UNITS),
    "locked below price x max units + allowance": (
        lambda *_: {"lovelace": LOCKED - REST - 1}, Refusal.UNDERFUNDED),
    "a rest below the refund's return deposit": (
        lambda *_: {"lovelace": PRICE * UNITS + ALLOWANCE + 1}, Refusal.UNDERFUNDED),
    "28-byte provider key": (lambda *_: {"provider_vkey": bytes(28)}, Refusal.KEY_LENGTH),
    "another provider's key": (lambda *_: {"provider_vkey": STRANGER.vkey}, Refusal.OTHER_KEY),
    "another provider address": (
        lambda *_: {"provider": to_plutus(STRANGER.address)}, Refusal.OTHER_ADDRESS),
    "the provider's key with another stake": (
        lambda _, p: {"provider": to_plutus(Address(p.key_hash, OTHER_STAKE))},
        Refusal.OTHER_ADDRESS),
    "a consumer address nobody can be paid at": (
        lambda *_: {"consumer": PlutusAddress(PubKeyCredential(bytes(27)), NoStakingCredential())},
        Refusal.ADDRESS),
    "job id not the spec's digest (model_dump_json)": (
        lambda *_: {"job_id": hashlib.sha256(SPEC.model_dump_json().encode()).digest()},
        Refusal.JOB_ID),
    "31-byte job id": (lambda *_: {"job_id": SPEC.job_id()[:31]}, Refusal.JOB_ID_LENGTH),
}  # fmt: skip


@pytest.mark.parametrize("case", UNSAFE)
async def test_an_unsafe_escrow_is_refused_with_its_reason_and_nothing_is_signed(
    devnet, deployment, consumer, provider, case
):
    changes, reason = UNSAFE[case]
    arguments = changes(Clock.now(devnet.context()).tip_ms, provider)
    lovelace = arguments.pop("lovelace", LOCKED)
    escrow = await locked(devnet, deployment, consumer, provider, lovelace, **arguments)
    refused(devnet, deployment, escrow, provider, reason)


async def test_an_escrow_with_a_datum_hash_tokens_or_another_datum_is_refused(
    devnet, deployment, consumer, provider
):
    now = Clock.now(devnet.context()).tip_ms
    datum = honest(consumer, provider, now)
    at_escrow = deployment.escrow_address(consumer.address)
    hashed = await place(devnet, consumer, at_escrow, LOCKED, datum, hashed=True)
    refused(devnet, deployment, hashed, provider, Refusal.DATUM_HASH)
    dusted = await place(devnet, consumer, at_escrow, LOCKED, datum, tokens=3)
    refused(devnet, deployment, dusted, provider, Refusal.TOKENS)
    bond_shaped = BondDatum(datum.provider, provider.vkey, Just(now))
    other = await place(devnet, consumer, at_escrow, LOCKED, bond_shaped)
    refused(devnet, deployment, other, provider, Refusal.MALFORMED_DATUM)
    elsewhere = await place(devnet, consumer, deployment.bond_address(), LOCKED, datum)
    refused(devnet, deployment, elsewhere, provider, Refusal.NOT_AT_SCRIPT)


async def test_the_honest_escrow_is_accepted_until_too_little_chain_time_is_left(
    devnet, deployment, consumer, provider
):
    escrow = await locked(devnet, deployment, consumer, provider)
    datum = escrow_datum(deployment, escrow)
    accepted(devnet, deployment, escrow, provider)

    await travel_to(devnet, datum.close - NEEDED_MS + 1)  # the chain's clock, not the wall's
    refusal = refused(devnet, deployment, escrow, provider, Refusal.NO_TIME)
    assert "needs until" in str(refusal) and out_ref(escrow) in str(refusal)
    await travel_to(devnet, datum.close)
    refused(devnet, deployment, escrow, provider, Refusal.CLOSED)


async def test_a_bond_unbonding_before_the_close_backs_no_acceptance(
    devnet, deployment, consumer, provider
):
    escrow = await locked(devnet, deployment, consumer, provider)
    close = escrow_datum(deployment, escrow).close
    at_bond = deployment.bond_address(provider.address)

    async def bond_unbonding_since(since: int) -> UTxO:
        datum = BondDatum(to_plutus(provider.address), provider.vkey, Just(since))
        return await place(devnet, provider, at_bond, 100 * ADA, datum)

    # the consumer slashes until close + refund window: a bond free then covers nothing
    slashable_until = close + deployment.refund_window_ms
    too_soon = await bond_unbonding_since(slashable_until - deployment.notice_ms)
    refused(devnet, deployment, escrow, provider, Refusal.NOTICE_ENDS, too_soon, BondRefused)
    outlasting = await bond_unbonding_since(slashable_until - deployment.notice_ms + 1)
    accepted(devnet, deployment, escrow, provider, outlasting)
