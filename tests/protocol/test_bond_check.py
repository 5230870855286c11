"""A bond read as evidence counts only if its provider cannot pull it before the jobs it backs
close. Bonds placed on the devnet by hand, as anyone can place them: `Just 0` (withdrawable
at once), a malformed key, under the minimum, with tokens, with a datum hash, naming another
provider: each refused for its reason; the honest one counts."""

from __future__ import annotations

import pytest
from pycardano import Network, PaymentSigningKey, UTxO

from devnet.genesis import ADA
from offchain.chain.utxo import utxo_at
from offchain.protocol.checks.bond_check import BondRefused, check_bond, covers_before
from offchain.protocol.checks.refusal import Refusal
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.types import BondDatum, Just, Nothing
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Clock, Wallet
from tests.protocol.evidence import place
from tests.protocol.onchain import post_bond, wallet

MINIMUM = 100 * ADA
CLOSE_IN_MS = 60 * 60_000  # the jobs the bond backs close an hour from now
STRANGER = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET)


@pytest.fixture(scope="module")
async def provider(devnet) -> Wallet:
    return await wallet(devnet, 20 * MINIMUM)  # each bond placed takes MINIMUM


async def bond(
    devnet, deployment: Deployment, provider: Wallet, since: Just | Nothing, **placing
) -> UTxO:
    """A bond of MINIMUM placed by hand at the provider's bond address; `placing` goes to
    `place` (lovelace, datum, hashed, tokens)."""
    datum = BondDatum(to_plutus(provider.address), provider.vkey, since)
    arguments = {"lovelace": MINIMUM, "datum": datum, **placing}
    return await place(devnet, provider, deployment.bond_address(provider.address), **arguments)


def checked(devnet, deployment, utxo: UTxO, provider: Wallet, close: int = 0) -> BondDatum:
    """`check_bond` of the bond as the chain has it, backing `provider` until `close`
    (default: an hour from now)."""
    context = devnet.context()
    on_chain = utxo_at(context, utxo.input)
    assert on_chain is not None
    now = Clock.now(context).tip_ms
    close = close or now + CLOSE_IN_MS
    return check_bond(deployment, on_chain, provider.vkey, provider.address, MINIMUM, close, now)


def refused(devnet, deployment, utxo, provider, reason: Refusal, close: int = 0) -> None:
    with pytest.raises(BondRefused) as refusal:
        checked(devnet, deployment, utxo, provider, close)
    assert refusal.value.reason is reason, refusal.value


async def test_an_honest_bond_counts(devnet, deployment, provider):
    posted = await post_bond(devnet, deployment, provider, MINIMUM)
    assert checked(devnet, deployment, posted, provider).unbonding_since == Nothing()


async def test_a_bond_unbonding_since_0_never_counts(devnet, deployment, provider):
    at_once = await bond(devnet, deployment, provider, Just(0))
    refused(devnet, deployment, at_once, provider, Refusal.NOTICE_ENDS)


async def test_an_unbonding_bond_counts_only_if_its_notice_outlasts_the_close(
    devnet, deployment, provider
):
    close = Clock.now(devnet.context()).tip_ms + CLOSE_IN_MS
    # withdrawable 1 ms after the refund window that follows the close
    last_counting = close + deployment.refund_window_ms - deployment.notice_ms + 1
    outlasting = await bond(devnet, deployment, provider, Just(last_counting))
    assert checked(devnet, deployment, outlasting, provider, close).unbonding_since == Just(
        last_counting
    )
    free_at_close = await bond(devnet, deployment, provider, Just(last_counting - 1))
    refused(devnet, deployment, free_at_close, provider, Refusal.NOTICE_ENDS, close)


async def test_a_bond_not_unbonding_covers_jobs_closing_before_its_notice_less_the_window(
    devnet, deployment, provider
):
    """Issue 18 B: a provider may begin unbonding right after it accepts and withdraw a notice
    later; the consumer slashes until the close + the refund window. So a bond counts only for
    jobs that close (and pass their refund window) before a notice begun now would end."""
    posted = await post_bond(devnet, deployment, provider, MINIMUM)
    now = Clock.now(devnet.context()).tip_ms
    covered = covers_before(deployment.notice_ms, deployment.refund_window_ms, None, now)
    assert covered == now + deployment.notice_ms - deployment.refund_window_ms

    def check(close: int) -> BondDatum:
        return check_bond(deployment, posted, provider.vkey, provider.address, MINIMUM, close, now)

    assert check(covered - 1).unbonding_since == Nothing()
    with pytest.raises(BondRefused, match="covers jobs closing before") as refusal:
        check(covered)  # withdrawable at the very end of its refund window
    assert refusal.value.reason is Refusal.NOTICE_ENDS


async def test_a_malformed_or_foreign_bond_does_not_count(devnet, deployment, provider):
    cases = {
        Refusal.TOO_SMALL: {"lovelace": MINIMUM - 1},
        Refusal.TOKENS: {"tokens": 3},
        Refusal.DATUM_HASH: {"hashed": True},
        Refusal.KEY_LENGTH: {
            "datum": BondDatum(to_plutus(provider.address), provider.vkey[:31], Nothing())
        },
        Refusal.OTHER_KEY: {
            "datum": BondDatum(to_plutus(provider.address), STRANGER.vkey, Nothing())
        },
        Refusal.OTHER_ADDRESS: {
            "datum": BondDatum(to_plutus(STRANGER.address), provider.vkey, Nothing())
        },
        Refusal.MALFORMED_DATUM: {"datum": Just(0)},
    }
    for reason, placing in cases.items():
        placed = await bond(devnet, deployment, provider, Nothing(), **placing)
        refused(devnet, deployment, placed, provider, reason)
    escrow_shaped = await place(devnet, provider, deployment.escrow_address(), MINIMUM, Nothing())
    refused(devnet, deployment, escrow_shaped, provider, Refusal.NOT_AT_SCRIPT)
