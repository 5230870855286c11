"""Build and submit ordinary payments with pycardano's own builder, against the devnet."""

from __future__ import annotations

from typing import Any

from pycardano import Address, Transaction, TransactionBuilder, TransactionOutput

from devnet.process import DevnetProcess
from offchain.chain.submit import submit_and_wait


def payment(devnet: DevnetProcess, sender: str, to: Address, lovelace: int) -> Transaction:
    """A signed payment from the named wallet, built by pycardano over the devnet's Ogmios."""
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(devnet.address(sender))
    builder.add_output(TransactionOutput(to, lovelace))
    return builder.build_and_sign([devnet.key(sender)], change_address=devnet.address(sender))


async def confirm(devnet: DevnetProcess, tx: Transaction, confirmations: int = 1) -> dict[str, Any]:
    """Submit and wait until the transaction is in a block; returns that block."""
    return await submit_and_wait(devnet.url, tx, confirmations=confirmations, timeout_s=30)


def lovelace_at(devnet: DevnetProcess, address: Address) -> int:
    return sum(u.output.amount.coin for u in devnet.context().utxos(address))
