"""The daemon's transactions in flight keep their inputs to themselves: a channel claim built
while another of its transactions waits for a block pays its fee from other UTxOs, and both
land. On a devnet of its own with one-second slots, so the first one is still in the mempool
when the claim is built (on the real chain a block takes ~20 s)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pycardano import Transaction, TransactionBuilder, TransactionOutput, TransactionWitnessSet

from devnet.genesis import ADA
from devnet.process import DevnetProcess
from offchain.chain.submit import tip_point, wait_for_confirmations
from offchain.chain.utxo import spent_by, utxo_at
from offchain.protocol.tx.txbuild import fee_inputs
from provider.daemon.channel_claims import ChannelClaimer
from tests.protocol.channels import iou
from tests.protocol.onchain import balance, fund, wallet
from tests.provider.chain import deployed
from tests.provider.test_channels_claims import SETTINGS, book_at, chain_of, opened


async def test_a_claim_beside_a_transaction_in_flight_pays_from_other_utxos(tmp_path: Path):
    devnet = DevnetProcess(tmp_path / "devnet", slot_length_ms=1000).start()
    try:
        deployment = await deployed(devnet, tmp_path / "deployment.json")
        provider = await wallet(devnet)
        await fund(devnet, provider.address, 20 * ADA)  # a second, smaller fee UTxO
        book = book_at(tmp_path / "channels.sqlite", deployment)
        renter, channel, _ = await opened(devnet, deployment, provider, book)
        book.accept(iou(deployment, renter, channel, 2_000_000))
        chain = chain_of(devnet, deployment, provider)
        before = balance(devnet, provider.address)
        since = await tip_point(devnet.url)

        builder = TransactionBuilder(devnet.context())  # a payment to itself: its largest UTxO
        for utxo in fee_inputs(devnet.context(), provider.address):
            builder.add_input(utxo)
        builder.add_output(TransactionOutput(provider.address, 5 * ADA))
        body = builder.build(change_address=provider.address)
        first = provider.sign(Transaction(body, TransactionWitnessSet()))
        in_flight = asyncio.create_task(chain.submit(first, "claim"))
        await asyncio.sleep(0)  # submit has run up to its first wait: the inputs are busy
        spent = set(first.transaction_body.inputs)
        assert chain.busy() == spent
        assert all(utxo_at(devnet.context(), ref) for ref in spent)  # not in a block yet

        await ChannelClaimer(chain, book, SETTINGS).tick()
        await in_flight

        claim = book.get(channel.id).view.utxo.split("#")[0]
        assert book.get(channel.id).view.claimed == 2_000_000
        block = await wait_for_confirmations(devnet.url, claim, since, timeout_s=30)
        claim_tx = next(tx for tx in block["transactions"] if tx["id"] == claim)
        assert not set(spent_by(claim_tx)) & spent  # the claim paid from the other UTxO
        fees = first.transaction_body.fee + claim_tx["fee"]["ada"]["lovelace"]
        assert balance(devnet, provider.address) == before + 2_000_000 - fees
        assert chain.busy() == frozenset()
    finally:
        devnet.stop()
