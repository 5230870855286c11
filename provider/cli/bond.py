"""`unchained provider bond create | top-up | unbond | withdraw | show`: the provider's bond on
chain, built with `offchain.protocol.tx.bond`. The provider key pays and signs create and
top-up; the bond is owned by the provider's payout address (`daemon.payout_address`), whose
key signs unbond and withdraw: the provider key itself by default, or a cold key brought with
`--owner-key` (or the transaction written with `--unsigned-tx` for the owner's wallet), so a
stolen provider key cannot take the bond.

The bond backs the provider's signed acceptances: a consumer whose accepted job is never
delivered takes a share of it. It leaves only after a notice period, so the commands say
where a bond stands in chain time (UTC), never the local clock's. The chain side is in
`provider.cli.bond_chain`, imported by each command as it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from offchain.protocol.ledger.amounts import ada, parse_lovelace
from provider.cli.options import ChainFlags, chain_command, fail, reported

app = typer.Typer(
    help="The provider's bond: ADA at the bond script backing its acceptances.",
    no_args_is_help=True,
)

AmountArgument = Annotated[str, typer.Argument(help="With its unit: 400ADA, 2000000lovelace.")]
BondOption = Annotated[
    str | None, typer.Option("--bond", help="Which bond (TXID#IX), when there are several.")
]
OwnerKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--owner-key", exists=True, dir_okay=False, resolve_path=True,
        help="The key file of the bond's owner (the payout address's key), when it is not the "
        "provider key: it signs, and its address pays the fee.",
    ),
]  # fmt: skip
UnsignedOption = Annotated[
    Path | None,
    typer.Option(
        "--unsigned-tx", dir_okay=False, resolve_path=True,
        help="Write the unsigned transaction (CBOR hex) here for the owner's wallet to sign "
        "and submit, instead of signing it.",
    ),
]  # fmt: skip


@contextmanager
def refused() -> Iterator[None]:
    """A bond rule's refusal as one line on stderr: exit 2 when a bond must be named, else 1."""
    from provider.money.bonding import BondError, BondNotChosen

    try:
        yield
    except BondNotChosen as exc:
        raise fail(str(exc)) from exc
    except BondError as exc:
        raise fail(str(exc), code=1) from exc


def _amount(text: str) -> int:
    try:
        return parse_lovelace(text)
    except ValueError as exc:
        raise fail(str(exc)) from exc


@app.command()
@reported()
@refused()
@chain_command
def create(
    flags: ChainFlags,
    amount: AmountArgument,
) -> None:
    """Post a bond from the provider's wallet, owned by its payout address (one per provider:
    top it up to grow it)."""
    from offchain.protocol.tx import bond as bonds
    from provider.cli.bond_chain import made_bond, provider_on_chain, show_bond

    lovelace = _amount(amount)
    chain = provider_on_chain(flags)
    chain.check_none_yet()
    chain.can_pay(lovelace)
    wallet = chain.wallet
    tx = wallet.sign(bonds.create(
        chain.context, chain.deployment, chain.owner, wallet.vkey, lovelace, wallet.address
    ))  # fmt: skip
    chain.submit(tx, f"posted a bond of {ada(lovelace)}")
    show_bond(chain, made_bond(tx))


@app.command("top-up")
@reported()
@refused()
@chain_command
def top_up(
    flags: ChainFlags,
    amount: AmountArgument,
    bond: BondOption = None,
) -> None:
    """Add to the bond from the provider's wallet."""
    from offchain.protocol.tx import bond as bonds
    from provider.cli.bond_chain import bond_ref, made_bond, provider_on_chain, show_bond

    lovelace = _amount(amount)
    chain = provider_on_chain(flags)
    utxo, _ = chain.bond(bond_ref(bond))
    chain.can_pay(lovelace)
    tx = chain.wallet.sign(
        bonds.top_up(chain.context, chain.deployment, utxo, chain.wallet.address, lovelace)
    )
    chain.submit(tx, f"added {ada(lovelace)}")
    show_bond(chain, made_bond(tx))


@app.command()
@reported()
@refused()
@chain_command
def unbond(
    flags: ChainFlags,
    bond: BondOption = None,
    owner_key: OwnerKeyOption = None,
    unsigned_tx: UnsignedOption = None,
) -> None:
    """Give notice: withdraw once it has run out (take no job that would outlive it). Refused
    while the daemon has an accepted job open: its bond backs that job until it settles.
    Signed by the bond's owner."""
    from offchain.protocol.tx import bond as bonds
    from provider.cli import bond_chain as on
    from provider.daemon.journal import Journal  # its receipts import pycardano
    from provider.money.bonding import check_no_open_jobs

    open_jobs = Journal(flags.state).open_jobs()
    check_no_open_jobs([entry.job_id for entry in open_jobs])
    chain = on.provider_on_chain(flags)
    utxo, _ = chain.bond(on.bond_ref(bond))
    signer = on.owner_signer(chain, owner_key, unsigned_tx)
    unsigned = bonds.begin_unbond(chain.context, chain.deployment, utxo, chain.owner)
    tx = on.signed_or_written(chain, signer, unsigned, unsigned_tx)
    if tx is not None:
        chain.submit(tx, "gave notice")
        on.show_bond(chain, on.made_bond(tx))


@app.command()
@reported()
@refused()
@chain_command
def withdraw(
    flags: ChainFlags,
    bond: BondOption = None,
    owner_key: OwnerKeyOption = None,
    unsigned_tx: UnsignedOption = None,
) -> None:
    """Take the bond back to its owner (the payout address) after its notice period. Signed
    by the bond's owner."""
    from offchain.protocol.tx import bond as bonds
    from provider.cli import bond_chain as on

    chain = on.provider_on_chain(flags)
    utxo, datum = chain.bond(on.bond_ref(bond))
    chain.check_withdrawable(utxo, datum)
    signer = on.owner_signer(chain, owner_key, unsigned_tx)
    unsigned = bonds.withdraw(chain.context, chain.deployment, utxo, chain.owner)
    tx = on.signed_or_written(chain, signer, unsigned, unsigned_tx)
    if tx is not None:
        chain.submit(tx, f"withdrew {ada(utxo.output.amount.coin)} to {chain.owner}")


@app.command()
@reported()
@refused()
@chain_command
def show(
    flags: ChainFlags,
) -> None:
    """The provider's address, wallet balance and bonds, as the chain has them now."""
    from provider.cli.bond_chain import provider_on_chain, show_bond

    chain = provider_on_chain(flags)
    wallet, found = chain.balance(), chain.bonds()
    typer.echo(f"provider {chain.wallet.address} (vkey {chain.wallet.vkey.hex()})")
    if chain.cold:
        typer.echo(f"bond owner and payout address: {chain.owner}")
    typer.echo(f"wallet: {ada(wallet)}")
    for utxo, _ in found:
        show_bond(chain, utxo)
    if not found:
        typer.echo("no bond: post one with `unchained provider bond create AMOUNT`")
