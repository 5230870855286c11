"""`unchained provider bond create | top-up | unbond | withdraw | show`: the provider's bond on
chain, built with `offchain.protocol.bond` and signed with the provider key.

The bond backs the provider's signed acceptances: a consumer whose accepted job is never
delivered takes a share of it. It leaves only after a notice period, so the commands say
where a bond stands in chain time (UTC), never the local clock's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from pycardano import Transaction, TransactionInput, UTxO

from offchain.chain.ogmios import DEFAULT_OGMIOS_URL
from offchain.chain.submit import submit_confirmed
from offchain.chain.time import iso
from offchain.chain.utxo import parse_out_ref
from offchain.protocol import bond as bonds
from offchain.protocol.amounts import ada, parse_lovelace
from offchain.protocol.deployment import Deployment
from offchain.protocol.txbuild import Clock, Wallet, out_ref
from offchain.protocol.types import BondDatum, Just
from provider.bonding import (
    BondError,
    BondNotChosen,
    ProviderBonds,
    check_no_open_jobs,
    withdrawable_slot,
)
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
class ProviderOnChain(ProviderBonds):
    """One provider on one chain: what every bond command starts from."""

    url: str

    def submit(self, tx: Transaction, what: str) -> None:
        height = asyncio.run(submit_confirmed(self.url, tx))
        typer.echo(f"{what}: tx {tx.id} in block {height} (fee {tx.transaction_body.fee} lovelace)")


def provider_on_chain(
    url: str, deployment_path: Path, config: Path, state_dir: Path | None
) -> ProviderOnChain:
    context, deployment = open_deployment(url, deployment_path)
    key = load_key(state_dir_of(config, state_dir))
    return ProviderOnChain(context, deployment, Wallet.of(key, deployment.network), url)


@contextmanager
def refused() -> Iterator[None]:
    """A bond rule's refusal as one line on stderr: exit 2 when a bond must be named, else 1."""
    try:
        yield
    except BondNotChosen as exc:
        raise fail(str(exc)) from exc
    except BondError as exc:
        raise fail(str(exc), code=1) from exc


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


def _out_ref(text: str | None) -> TransactionInput | None:
    """The bond named with --bond, if one is."""
    if text is None:
        return None
    try:
        return parse_out_ref(text)
    except ValueError as exc:
        raise fail(str(exc)) from exc


@app.command()
@reported()
@refused()
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
    chain.check_none_yet()
    chain.can_pay(lovelace)
    wallet = chain.wallet
    tx = wallet.sign(
        bonds.create(chain.context, chain.deployment, wallet.address, wallet.vkey, lovelace)
    )
    chain.submit(tx, f"posted a bond of {ada(lovelace)}")
    show_bond(chain, made_bond(tx))


@app.command("top-up")
@reported()
@refused()
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
    utxo, _ = chain.bond(_out_ref(bond))
    chain.can_pay(lovelace)
    tx = chain.wallet.sign(
        bonds.top_up(chain.context, chain.deployment, utxo, chain.wallet.address, lovelace)
    )
    chain.submit(tx, f"added {ada(lovelace)}")
    show_bond(chain, made_bond(tx))


@app.command()
@reported()
@refused()
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
    check_no_open_jobs([entry.job_id for entry in open_jobs])
    chain = provider_on_chain(ogmios_url, deployment, config, state_dir)
    utxo, _ = chain.bond(_out_ref(bond))
    tx = chain.wallet.sign(
        bonds.begin_unbond(chain.context, chain.deployment, utxo, chain.wallet.address)
    )
    chain.submit(tx, "gave notice")
    show_bond(chain, made_bond(tx))


@app.command()
@reported()
@refused()
def withdraw(
    bond: BondOption = None,
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    deployment: DeploymentOption = DEFAULT_DEPLOYMENT,
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
) -> None:
    """Take the bond back to the provider's wallet after its notice period."""
    chain = provider_on_chain(ogmios_url, deployment, config, state_dir)
    utxo, datum = chain.bond(_out_ref(bond))
    chain.check_withdrawable(utxo, datum)
    tx = chain.wallet.sign(
        bonds.withdraw(chain.context, chain.deployment, utxo, chain.wallet.address)
    )
    chain.submit(tx, f"withdrew {ada(utxo.output.amount.coin)} to {chain.wallet.address}")


@app.command()
@reported()
@refused()
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
