"""The channel and claim scripts as deployed, run by the devnet's ledger on the script context
it builds (tests/contracts/test_channel_scripts.py builds them by hand): a channel opened by
hand is claimed by a batch of one, then topped up. The builders' flows and attacks are
tests/protocol's."""

from __future__ import annotations

import hashlib

from pycardano import (
    Redeemer,
    TransactionOutput,
    UTxO,
    Withdrawals,
)

from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.payloads import iou_payload, sign
from offchain.protocol.ledger.types import (
    BatchClaim,
    ChannelClaim,
    ChannelDatum,
    ChannelTerms,
    ChannelTopUp,
    TxOutRef,
)
from offchain.protocol.tx.deployment import Deployment, deploy
from offchain.protocol.tx.txbuild import (
    Clock,
    Wallet,
    add_inputs,
    build,
    fee_inputs,
    ledger_inputs,
    new_builder,
    script_source,
)
from tests.protocol.onchain import confirm, output, wallet

ADA = 1_000_000
DEPOSIT = 20 * ADA


def blake2b_224(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=28).digest()


async def opened(
    devnet, deployment: Deployment, renter: Wallet, provider: Wallet
) -> tuple[UTxO, ChannelDatum, ChannelTerms]:
    """A channel of renter to provider, locked by hand (the builders' open is tests/protocol's);
    its datum and terms."""
    nonce = devnet.context().utxos(renter.address)[0].input
    terms = ChannelTerms(
        to_plutus(renter.address), to_plutus(provider.address), provider.vkey, 60_000,
        TxOutRef.of(nonce),
    )  # fmt: skip
    payee = blake2b_224(terms.provider.to_cbor())
    datum = ChannelDatum(renter.vkey, payee, blake2b_224(terms.to_cbor()), 0, -1)
    builder = new_builder(devnet.context())
    builder.add_input_address(renter.address)
    builder.add_output(TransactionOutput(deployment.channel_address(renter.address), DEPOSIT,
                                         datum=datum))  # fmt: skip
    tx = await confirm(devnet, renter.sign(build(builder, renter.address)))
    return output(tx, 0), datum, terms


async def test_a_channel_is_claimed_in_a_batch_and_topped_up(devnet):
    deployer, renter, provider = await wallet(devnet), await wallet(devnet), await wallet(devnet)
    (tx,), deployment = deploy(devnet.context(), deployer.address, 0, 30_000, 2_500, 10_000)
    await confirm(devnet, deployer.sign(tx))
    channel, datum, terms = await opened(devnet, deployment, renter, provider)

    context = devnet.context()
    amount = 3 * ADA
    iou = iou_payload(0, deployment.channel_hash, datum.terms, amount)
    claimed = ChannelDatum(datum.renter_vkey, datum.payee, datum.terms, amount, -1)
    builder = new_builder(context)
    builder.add_input_address(provider.address)
    builder.add_script_input(
        channel, script=script_source(builder, deployment.channel_ref),
        redeemer=Redeemer(ChannelClaim()),
    )  # fmt: skip
    builder.add_output(TransactionOutput(provider.address, amount))
    builder.add_output(TransactionOutput(channel.output.address, DEPOSIT - amount, datum=claimed))
    builder.withdrawals = Withdrawals({bytes(deployment.claim_reward_address): 0})
    builder.add_withdrawal_script(
        script_source(builder, deployment.claim_ref),
        redeemer=Redeemer(BatchClaim([0], [sign(renter.key, iou)], 1)),
    )
    builder.ttl = Clock.now(context).tip_slot + 100
    tx = await confirm(devnet, provider.sign(build(builder, provider.address)))
    continuing = output(tx, 1)

    context = devnet.context()
    fee = fee_inputs(context, renter.address)
    own = ledger_inputs([continuing], fee).index(continuing.input)
    builder = new_builder(context)
    builder.add_script_input(
        continuing, script=script_source(builder, deployment.channel_ref),
        redeemer=Redeemer(ChannelTopUp(own, 0, terms)),
    )  # fmt: skip
    builder.required_signers = [renter.address.payment_part]  # the renter's top-up
    builder.add_output(
        TransactionOutput(channel.output.address, DEPOSIT - amount + ADA, datum=claimed)
    )
    add_inputs(builder, fee)
    await confirm(devnet, renter.sign(build(builder, renter.address)))
