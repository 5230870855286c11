"""`unchained demo`: start a devnet and show money moving, every step checkable on the chain.

For now (before the contracts and the provider exist): fund two fresh wallets from the
devnet faucet, send a payment between them, lock ADA at a hand-written Plutus V3 validator
and spend it, and show a failing spend being refused with the validator's trace.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Annotated

import typer
from ogmios.errors import ResponseError
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    PlutusData,
    PlutusV3Script,
    Redeemer,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    plutus_script_hash,
)

from contracts.handwritten import REDEEMER_IS_42, compile_uplc
from offchain.chain.context import chain_context
from offchain.chain.follower import tip_point
from offchain.chain.ogmios import request
from offchain.chain.submit import submit_and_wait, wait_for_confirmations
from offchain.devnet.genesis import ADA, wallet_address
from offchain.devnet.process import DevnetProcess

app = typer.Typer()


def say(text: str) -> None:
    typer.echo(text)


@app.callback(invoke_without_command=True)
def demo(
    data_dir: Annotated[Path, typer.Option(help="Where the demo's devnet keeps its chain.")] = Path(
        "data/demo"
    ),
    port: Annotated[int, typer.Option(help="Port for the demo's devnet.")] = 1337,
) -> None:
    """Start a fresh devnet and walk through a payment and a Plutus script spend."""
    logging.getLogger("PyCardano").setLevel(logging.ERROR)  # it dumps builder state on errors
    devnet = DevnetProcess(data_dir / "devnet", slot_length_ms=200, port=port).start(reset=True)
    try:
        asyncio.run(_walkthrough(devnet))
    finally:
        devnet.stop()


async def _walkthrough(devnet: DevnetProcess) -> None:
    url = devnet.url
    say(f"Devnet (Ogmios v6) at {url}; chain in {devnet.data_dir}")
    payer_key, payee_key = PaymentSigningKey.generate(), PaymentSigningKey.generate()
    payer, payee = wallet_address(payer_key), wallet_address(payee_key)

    say("\n1. Fund two fresh wallets from the devnet faucet")
    for name, address, amount in (("payer", payer, 1_000 * ADA), ("payee", payee, 50 * ADA)):
        since = await tip_point(url)
        funded = await request(url, "devnet/fund", {"address": str(address), "lovelace": amount})
        tx_id = funded["transaction"]["id"]
        block = await wait_for_confirmations(url, tx_id, since, timeout_s=30)
        say(f"   {name} {address}: {amount // ADA} ADA in tx {tx_id} (block {block['height']})")

    say("\n2. Payment: payer sends 25 ADA to payee")
    context = chain_context(url)
    builder = TransactionBuilder(context)
    builder.add_input_address(payer)
    builder.add_output(TransactionOutput(payee, 25 * ADA))
    tx = builder.build_and_sign([payer_key], change_address=payer)
    await _submit(url, tx, "payment")
    say(
        f"   payee now holds {_balance(url, payee)} lovelace; the fee was {tx.transaction_body.fee}"
    )

    say("\n3. Plutus V3: lock 10 ADA at a validator that wants the redeemer 42")
    script = compile_uplc(REDEEMER_IS_42)
    script_address = Address(plutus_script_hash(script), network=Network.TESTNET)
    builder = TransactionBuilder(chain_context(url))
    builder.add_input_address(payer)
    builder.add_output(TransactionOutput(script_address, 10 * ADA, datum=PlutusData()))
    lock = builder.build_and_sign([payer_key], change_address=payer)
    await _submit(url, lock, "lock")
    locked = UTxO(TransactionInput(lock.id, 0), lock.transaction_body.outputs[0])

    say("   spending it with redeemer 7 (the validator must refuse):")
    try:
        _spend(url, payer_key, payer, script, locked, 7)  # pycardano evaluates while building
    except ResponseError as error:
        traces = re.findall(r"'traces': \[([^\]]*)\]", str(error))
        say(f"   evaluateTransaction refused it; the validator traced: {traces}")

    say("   spending it with redeemer 42:")
    spend = _spend(url, payer_key, payer, script, locked, 42)
    await _submit(url, spend, "script spend")
    for value in spend.transaction_witness_set.redeemer.values():
        units = value.ex_units
        say(f"   declared budget: {units.mem} memory, {units.steps} cpu (evaluated by the devnet)")
    say(f"   script address now holds {_balance(url, script_address)} lovelace")
    say("\nDone. Every transaction above is on the devnet's chain: follow it with chain-sync.")


def _spend(
    url: str,
    key: PaymentSigningKey,
    owner: Address,
    script: PlutusV3Script,
    locked: UTxO,
    redeemer: int,
) -> Transaction:
    builder = TransactionBuilder(chain_context(url))
    builder.add_script_input(locked, script=script, redeemer=Redeemer(redeemer))
    builder.add_input_address(owner)
    return builder.build_and_sign([key], change_address=owner)


async def _submit(url: str, tx: Transaction, what: str) -> None:
    block = await submit_and_wait(url, tx, timeout_s=30)
    say(f"   {what}: tx {tx.id} in block {block['height']} (slot {block['slot']})")


def _balance(url: str, address: Address) -> int:
    return sum(u.output.amount.coin for u in chain_context(url).utxos(address))
