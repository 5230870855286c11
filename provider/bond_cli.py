"""`unchained provider bond create | top-up | unbond | withdraw | show`: the provider's bond on
chain, built with `offchain.protocol.bond` and signed with the provider key.

The bond backs the provider's signed acceptances: a consumer whose accepted job is never
delivered takes a share of it. It leaves only after a notice period, so the commands say
where a bond stands in chain time (UTC), never the local clock's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from pycardano import Transaction, TransactionInput, UTxO
from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext

from offchain.chain.ogmios import DEFAULT_OGMIOS_URL
from offchain.chain.submit import submit_confirmed
from offchain.chain.time import iso
from offchain.chain.utxo import parse_out_ref
from offchain.protocol import bond as bonds
from offchain.protocol.amounts import ada, parse_lovelace
from offchain.protocol.deployment import Deployment
from offchain.protocol.txbuild import Clock, Wallet, out_ref
from offchain.protocol.types import BondDatum, Just
from provider.daemon.journal import Journal
from provider.keys import load_key
from provider.options import (
    DEFAULT_CONFIG,
    DEFAULT_DEPLOYMENT,
    ConfigOption,
    DeploymentOption,
    OgmiosOption,
    StateDirOption,
    fail,
    open_deployment,
    reported,
    state_dir_of,
)

app = typer.Typer(
    help="The provider's bond: ADA at the bond script backing its acceptances.",
    no_args_is_help=True,
)

AmountArgument = Annotated[str, typer.Argument(help="With its unit: 400ADA, 2000000lovelace.")]
BondOption = Annotated[
    str | None, typer.Option("--bond", help="Which bond (TXID#IX), when there are several.")
]


@dataclasses.dataclass(frozen=True)
class ProviderOnChain:
    """One provider on one chain: what every bond command starts from."""

    url: str
    context: OgmiosV6ChainContext
    deployment: Deployment
    wallet: Wallet

    def balance(self) -> int:
        """Lovelace in the provider's wallet."""
        return sum(u.output.amount.coin for u in self.context.utxos(self.wallet.address))

    def can_pay(self, lovelace: int) -> None:
        """Refuse early, and plainly, what the wallet cannot pay."""
        held = self.balance()
        if held < lovelace:
            raise fail(
                f"the provider's wallet {self.wallet.address} holds {ada(held)}, "
                f"less than {ada(lovelace)} and the fee: send ADA to it first",
                code=1,
            )

    def bonds(self) -> list[tuple[UTxO, BondDatum]]:
        return bonds.bonds_of(self.context, self.deployment, self.wallet.address, self.wallet.vkey)

    def bond(self, ref: str | None) -> tuple[UTxO, BondDatum]:
        """The bond a command acts on: the one named, or the only one."""
        found = self.bonds()
        if ref is not None:
            wanted = _out_ref(ref)
            for utxo, datum in found:
                if utxo.input == wanted:
                    return utxo, datum
            raise fail(f"{ref} is not a bond of this provider (see `bond show`)", code=1)
        if not found:
            raise fail(
                f"no bond for {self.wallet.address}: post one with `bond create AMOUNT`", code=1
            )
        if len(found) > 1:
            refs = ", ".join(out_ref(utxo) for utxo, _ in found)
            raise fail(f"this provider has {len(found)} bonds ({refs}): pick one with --bond")
        return found[0]

    def submit(self, tx: Transaction, what: str) -> None:
        height = asyncio.run(submit_confirmed(self.url, tx))
        typer.echo(f"{what}: tx {tx.id} in block {height} (fee {tx.transaction_body.fee} lovelace)")


def provider_on_chain(
    url: str, deployment_path: Path, config: Path, state_dir: Path | None
) -> ProviderOnChain:
    context, deployment = open_deployment(url, deployment_path)
    key = load_key(state_dir_of(config, state_dir))
    return ProviderOnChain(url, context, deployment, Wallet.of(key, deployment.network))


def withdrawable_slot(deployment: Deployment, since_ms: int, clock: Clock) -> int:
    """The first slot a withdrawal may start at, as `bonds.withdraw` computes it."""
    return clock.first_slot_at(since_ms + deployment.notice_ms)


def standing(deployment: Deployment, datum: BondDatum, clock: Clock) -> str:
    if not isinstance(datum.unbonding_since, Just):
        return "active"
    since = datum.unbonding_since.value
    slot = withdrawable_slot(deployment, since, clock)
    when = "now" if clock.tip_slot >= slot else f"at {clock.iso_slot(slot)}"
    return f"unbonding since {iso(since)}, withdrawable {when}"


def show_bond(chain: ProviderOnChain, bond: UTxO) -> None:
    datum = bonds.bond_datum(chain.deployment, bond)
    state = standing(chain.deployment, datum, Clock.now(chain.context))
    typer.echo(f"bond {out_ref(bond)}: {ada(bond.output.amount.coin)}, {state}")


def made_bond(tx: Transaction) -> UTxO:
    """The bond output of a create, top-up or unbond transaction."""
    index = bonds.BOND_OUTPUT
    return UTxO(TransactionInput(tx.id, index), tx.transaction_body.outputs[index])


def _amount(text: str) -> int:
    try:
        return parse_lovelace(text)
    except ValueError as exc:
        raise fail(str(exc)) from exc


def _out_ref(text: str) -> TransactionInput:
    try:
        return parse_out_ref(text)
    except ValueError as exc:
        raise fail(str(exc)) from exc


@app.command()
@reported()
def create(
    amount: AmountArgument,
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    deployment: DeploymentOption = DEFAULT_DEPLOYMENT,
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
) -> None:
    """Post a bond from the provider's wallet (one per provider: top it up to grow it)."""
    lovelace = _amount(amount)
    chain = provider_on_chain(ogmios_url, deployment, config, state_dir)
    existing = chain.bonds()
    if existing:
        utxo, _ = existing[0]
        raise fail(
            f"this provider already has a bond ({out_ref(utxo)}, "
            f"{ada(utxo.output.amount.coin)}): grow it with `bond top-up AMOUNT`",
            code=1,
        )
    chain.can_pay(lovelace)
    wallet = chain.wallet
    tx = wallet.sign(
        bonds.create(chain.context, chain.deployment, wallet.address, wallet.vkey, lovelace)
    )
    chain.submit(tx, f"posted a bond of {ada(lovelace)}")
    show_bond(chain, made_bond(tx))


@app.command("top-up")
@reported()
def top_up(
    amount: AmountArgument,
    bond: BondOption = None,
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    deployment: DeploymentOption = DEFAULT_DEPLOYMENT,
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
) -> None:
    """Add to the bond from the provider's wallet."""
    lovelace = _amount(amount)
    chain = provider_on_chain(ogmios_url, deployment, config, state_dir)
    utxo, _ = chain.bond(bond)
    chain.can_pay(lovelace)
    tx = chain.wallet.sign(
        bonds.top_up(chain.context, chain.deployment, utxo, chain.wallet.address, lovelace)
    )
    chain.submit(tx, f"added {ada(lovelace)}")
    show_bond(chain, made_bond(tx))


@app.command()
@reported()
def unbond(
    bond: BondOption = None,
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    deployment: DeploymentOption = DEFAULT_DEPLOYMENT,
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
) -> None:
    """Give notice: withdraw once it has run out (take no job that would outlive it). Refused
    while the daemon has an accepted job open: its bond backs that job until it settles."""
    open_jobs = Journal(state_dir_of(config, state_dir)).open_jobs()
    if open_jobs:
        jobs = ", ".join(entry.job_id for entry in open_jobs)
        raise fail(f"accepted jobs are open ({jobs}): unbond once they are settled", code=1)
    chain = provider_on_chain(ogmios_url, deployment, config, state_dir)
    utxo, _ = chain.bond(bond)
    tx = chain.wallet.sign(
        bonds.begin_unbond(chain.context, chain.deployment, utxo, chain.wallet.address)
    )
    chain.submit(tx, "gave notice")
    show_bond(chain, made_bond(tx))


@app.command()
@reported()
def withdraw(
    bond: BondOption = None,
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    deployment: DeploymentOption = DEFAULT_DEPLOYMENT,
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
) -> None:
    """Take the bond back to the provider's wallet after its notice period."""
    chain = provider_on_chain(ogmios_url, deployment, config, state_dir)
    utxo, datum = chain.bond(bond)
    if not isinstance(datum.unbonding_since, Just):
        raise fail(
            f"bond {out_ref(utxo)} is not unbonding: give notice with `bond unbond` first",
            code=1,
        )
    clock = Clock.now(chain.context)
    slot = withdrawable_slot(chain.deployment, datum.unbonding_since.value, clock)
    if clock.tip_slot < slot:
        raise fail(f"bond still unbonding: withdrawable at {clock.iso_slot(slot)}", code=1)
    tx = chain.wallet.sign(
        bonds.withdraw(chain.context, chain.deployment, utxo, chain.wallet.address)
    )
    chain.submit(tx, f"withdrew {ada(utxo.output.amount.coin)} to {chain.wallet.address}")


@app.command()
@reported()
def show(
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    deployment: DeploymentOption = DEFAULT_DEPLOYMENT,
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
) -> None:
    """The provider's address, wallet balance and bonds, as the chain has them now."""
    chain = provider_on_chain(ogmios_url, deployment, config, state_dir)
    wallet, found = chain.balance(), chain.bonds()
    typer.echo(f"provider {chain.wallet.address} (vkey {chain.wallet.vkey.hex()})")
    typer.echo(f"wallet: {ada(wallet)}")
    for utxo, _ in found:
        show_bond(chain, utxo)
    if not found:
        typer.echo("no bond: post one with `unchained provider bond create AMOUNT`")
