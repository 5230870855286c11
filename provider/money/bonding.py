"""The provider's rules for its own bond, apart from any CLI: which bond a command acts on,
whether the wallet can pay, whether a bond may be posted, given notice on or withdrawn.
Each refusal is a BondError whose message says what to do; the CLI prints it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pycardano import Address, ChainContext, PaymentSigningKey, TransactionInput, UTxO

from offchain.chain.utxo import format_out_ref
from offchain.core.errors import UnchainedError
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.types import BondDatum, Just
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Clock, Wallet, out_ref


class BondError(UnchainedError):
    """The bond command cannot go ahead; the message says why and what to do."""


class BondNotChosen(BondError):
    """The provider has several bonds and named none: the caller must pick one."""


@dataclasses.dataclass(frozen=True)
class ProviderBonds:
    """One provider's wallet (its provider key's) and bonds on one chain; the bonds are
    owned by its payout address (`owner`: the wallet's own, or a cold wallet's)."""

    context: ChainContext
    deployment: Deployment
    wallet: Wallet
    owner: Address

    @property
    def cold(self) -> bool:
        """Whether another key than the provider key owns the bond."""
        return self.owner.payment_part != self.wallet.key_hash

    def balance(self) -> int:
        """Lovelace in the provider's wallet."""
        return sum(u.output.amount.coin for u in self.context.utxos(self.wallet.address))

    def can_pay(self, lovelace: int) -> None:
        """Refuse early, and plainly, what the wallet cannot pay."""
        held = self.balance()
        if held < lovelace:
            raise BondError(
                f"the provider's wallet {self.wallet.address} holds {ada(held)}, "
                f"less than {ada(lovelace)} and the fee: send ADA to it first"
            )

    def bonds(self) -> list[tuple[UTxO, BondDatum]]:
        return bonds.bonds_of(self.context, self.deployment, self.owner, self.wallet.vkey)

    def bond(self, wanted: TransactionInput | None) -> tuple[UTxO, BondDatum]:
        """The bond a command acts on: the one named, or the only one."""
        found = self.bonds()
        if wanted is not None:
            for utxo, datum in found:
                if utxo.input == wanted:
                    return utxo, datum
            named = format_out_ref(wanted)
            raise BondError(f"{named} is not a bond of this provider (see `bond show`)")
        if not found:
            raise BondError(f"no bond for {self.owner}: post one with `bond create AMOUNT`")
        if len(found) > 1:
            refs = ", ".join(out_ref(utxo) for utxo, _ in found)
            raise BondNotChosen(
                f"this provider has {len(found)} bonds ({refs}): pick one with --bond"
            )
        return found[0]

    def check_none_yet(self) -> None:
        """One bond per provider: a second would only split what backs its acceptances."""
        existing = self.bonds()
        if existing:
            utxo, _ = existing[0]
            raise BondError(
                f"this provider already has a bond ({out_ref(utxo)}, "
                f"{ada(utxo.output.amount.coin)}): grow it with `bond top-up AMOUNT`"
            )

    def check_withdrawable(self, utxo: UTxO, datum: BondDatum) -> None:
        """The bond is unbonding and its notice has run out, in chain time."""
        if not isinstance(datum.unbonding_since, Just):
            raise BondError(
                f"bond {out_ref(utxo)} is not unbonding: give notice with `bond unbond` first"
            )
        clock = Clock.now(self.context)
        slot = withdrawable_slot(self.deployment, datum.unbonding_since.value, clock)
        if clock.tip_slot < slot:
            raise BondError(f"bond still unbonding: withdrawable at {clock.iso_slot(slot)}")


def owner_wallet(bonds: ProviderBonds, owner_key: PaymentSigningKey | None) -> Wallet:
    """The wallet that signs a bond's unbonding or withdrawal: the owner's key (`owner_key`,
    read from a file the operator brings) or, when the provider key owns the bond, that key.
    BondError when the key given is not the owner's, or none is given for a cold owner."""
    if owner_key is None:
        if bonds.cold:
            raise BondError(
                f"the bond is owned by {bonds.owner}, not by the provider key: sign with "
                "--owner-key FILE (its key), or write --unsigned-tx FILE for its wallet"
            )
        return bonds.wallet
    if owner_key.to_verification_key().hash() != bonds.owner.payment_part:
        raise BondError(f"the key given does not own the bond: its owner is {bonds.owner}")
    return Wallet(owner_key, bonds.owner)


def check_no_open_jobs(open_job_ids: Sequence[str]) -> None:
    """No notice while an accepted job is open: the bond backs that job until it settles."""
    if open_job_ids:
        jobs = ", ".join(open_job_ids)
        raise BondError(f"accepted jobs are open ({jobs}): unbond once they are settled")


def withdrawable_slot(deployment: Deployment, since_ms: int, clock: Clock) -> int:
    """The first slot a withdrawal may start at, as `bonds.withdraw` computes it."""
    return clock.first_slot_at(since_ms + deployment.notice_ms)
