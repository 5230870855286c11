"""The provider's bond commands' chain side: the provider's wallet and bonds on one chain, and
how a bond is shown. Kept apart from `provider.cli.bond` so that `--help` imports no chain
client (tests/test_cli_imports.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import typer
from pycardano import Transaction, TransactionInput, UTxO

from offchain.chain.submit import submit_confirmed
from offchain.chain.time import iso
from offchain.chain.utxo import parse_out_ref
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.types import BondDatum, Just
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Clock, Wallet, out_ref
from provider.cli.options import ChainFlags, fail, given, open_deployment, settings_of
from provider.keys import load_key, load_key_file, payout_address
from provider.money.bonding import ProviderBonds, owner_wallet, withdrawable_slot
from provider.money.own_transactions import OwnTransactions


@dataclasses.dataclass(frozen=True)
class ProviderOnChain(ProviderBonds):
    """One provider on one chain: what every bond command starts from."""

    url: str
    own: OwnTransactions  # its fee counts in `provider status`'s net income

    def submit(self, tx: Transaction, what: str) -> None:
        height = asyncio.run(submit_confirmed(self.url, tx))
        self.own.record(tx, "bond")
        typer.echo(f"{what}: tx {tx.id} in block {height} (fee {tx.transaction_body.fee} lovelace)")


def provider_on_chain(flags: ChainFlags) -> ProviderOnChain:
    """The provider of the config and state directory `flags` name: its key's wallet, its
    bonds owned by its payout address (`daemon.payout_address`)."""
    context, deployment = open_deployment(flags.ogmios_url, flags.deployment, flags.network)
    settings = settings_of(flags.config, given(flags.state_dir))
    key = load_key(flags.state)
    wallet = Wallet.of(key, deployment.network)
    owner = payout_address(settings.daemon.payout_address, key, deployment.network)
    own = OwnTransactions.in_state_dir(flags.state)
    return ProviderOnChain(context, deployment, wallet, owner, flags.ogmios_url, own)


def owner_signer(chain: ProviderOnChain, key_file: Path | None, out: Path | None) -> Wallet | None:
    """Who signs an unbond or a withdrawal: the owner's wallet (its key from `key_file`, the
    provider key without one), or None when the transaction is to be written to `out` for the
    owner's own wallet. BondError when the key is not the owner's, or is missing."""
    if out is not None:
        if key_file is not None:
            raise fail("--owner-key signs here, --unsigned-tx writes it for another wallet: "
                       "give one of them")  # fmt: skip
        return None
    key = None if key_file is None else load_key_file(key_file, "give the bond owner's key")
    return owner_wallet(chain, key)


def signed_or_written(chain: ProviderOnChain, signer: Wallet | None, unsigned: Transaction,
                      out: Path | None) -> Transaction | None:  # fmt: skip
    """`unsigned` signed by `signer`, or, without one, written to `out` (CBOR hex) for the
    owner's own wallet to sign and submit: None then (nothing is submitted here)."""
    if signer is not None:
        return signer.sign(unsigned)
    assert out is not None
    out.write_text(unsigned.to_cbor_hex() + "\n")
    fee = unsigned.transaction_body.fee
    typer.echo(f"unsigned transaction {unsigned.id} written to {out}: sign it with the key of "
               f"{chain.owner} and submit it (fee {fee} lovelace)")  # fmt: skip
    return None


def standing(deployment: Deployment, datum: BondDatum, clock: Clock) -> str:
    if not isinstance(datum.unbonding_since, Just):
        return "active"
    since = datum.unbonding_since.value
    slot = withdrawable_slot(deployment, since, clock)
    when = "now" if clock.tip_slot >= slot else f"at {clock.iso_slot(slot)}"
    if since > clock.tip_ms:  # the notice counts from its transaction's validity bound
        return (f"notice given at {iso(clock.tip_ms)} chain time (it counts from {iso(since)}, "
                f"its transaction's validity bound), withdrawable {when}")  # fmt: skip
    return f"unbonding since {iso(since)}, withdrawable {when}"


def show_bond(chain: ProviderOnChain, bond: UTxO) -> None:
    datum = bonds.bond_datum(chain.deployment, bond)
    state = standing(chain.deployment, datum, Clock.now(chain.context))
    typer.echo(f"bond {out_ref(bond)}: {ada(bond.output.amount.coin)}, {state}")


def made_bond(tx: Transaction) -> UTxO:
    """The bond output of a create, top-up or unbond transaction."""
    index = bonds.BOND_OUTPUT
    return UTxO(TransactionInput(tx.id, index), tx.transaction_body.outputs[index])


def bond_ref(text: str | None) -> TransactionInput | None:
    """The bond named with --bond, if one is."""
    if text is None:
        return None
    try:
        return parse_out_ref(text)
    except ValueError as exc:
        raise fail(str(exc)) from exc
