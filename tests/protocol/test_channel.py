"""Payment channels' honest paths on the devnet, built by offchain/protocol/tx/channel.py's
builders, every party's balance checked to the lovelace (fees read from the transactions);
and the builders' and the provider check's refusals, which say what is wrong."""

from __future__ import annotations

import dataclasses

import pytest
from pycardano import (
    Address,
    AuxiliaryData,
    MultiAsset,
    Network,
    PaymentSigningKey,
    ScriptPubkey,
    TransactionOutput,
    UTxO,
    Value,
)

from offchain.chain.time import iso
from offchain.protocol.checks.refusal import Refusal
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.types import ChannelTerms, PayoutKind, TxOutRef
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.batch import SmallPayout
from offchain.protocol.tx.channel import (
    Channel,
    ChannelRefused,
    channel_id,
    check_channel,
    claim_channels,
    payee_hash,
    read_channel,
    return_deposit,
    terms_from_metadata,
    terms_metadata,
)
from offchain.protocol.tx.txbuild import BuildError, Clock, sign_tx
from tests.protocol.channels import CLOSE_MS, DEPOSIT, iou, left, open_on
from tests.protocol.onchain import ADA, balance, confirm, output, staked, travel_to, wallet

KEY = PaymentSigningKey.generate().to_verification_key()
TERMS = ChannelTerms(
    to_plutus(Address(KEY.hash(), KEY.hash(), network=Network.TESTNET)),
    to_plutus(Address(KEY.hash(), network=Network.TESTNET)),
    KEY.payload, 3_600_000, TxOutRef(b"\x07" * 32, 3),
)  # fmt: skip


TOKENS = MultiAsset.from_primitive({bytes(28): {b"dust": 1}})


def moved(
    channel: Channel,
    address: Address | None = None,
    value: Value | None = None,
    script: ScriptPubkey | None = None,
) -> Channel:
    """`channel` as if its UTxO sat at `address`, held `value` or carried `script` (nothing
    checks that off chain but the provider's check)."""
    made = channel.utxo.output
    out = TransactionOutput(
        address or made.address, value or made.amount, datum=made.datum, script=script
    )
    return dataclasses.replace(channel, utxo=UTxO(channel.utxo.input, out))


def fee(tx) -> int:
    return tx.transaction_body.fee


def test_the_terms_ride_in_the_metadata_in_64_byte_chunks():
    metadata = terms_metadata(TERMS)
    chunks = metadata[channels.TERMS_LABEL]
    assert len(chunks) > 1 and all(len(c) <= 64 for c in chunks)
    assert terms_from_metadata(metadata) == TERMS
    on_chain = AuxiliaryData.from_cbor(AuxiliaryData(metadata).to_cbor())  # as a follower reads
    assert terms_from_metadata(on_chain) == TERMS
    assert channel_id(terms_from_metadata(metadata)) == channel_id(TERMS)
    assert terms_from_metadata(None) is None
    assert terms_from_metadata(type(metadata)({channels.TERMS_LABEL: [b"\x01"]})) is None
    assert terms_from_metadata(type(metadata)({674: ["a memo"]})) is None
    assert len(channel_id(TERMS)) == len(payee_hash(TERMS.provider)) == 28


async def test_open_locks_the_deposit_and_its_return_deposit_at_the_renters_stake(
    devnet, deployment
):
    renter, provider = [await wallet(devnet, stake=True) for _ in range(2)]
    before = balance(devnet, renter.address)
    channel, terms, tx = await open_on(devnet, deployment, renter, provider)
    assert channel.utxo.output.address.staking_part == renter.address.staking_part

    assert channel.utxo.output.address == deployment.channel_address(renter.address)
    assert channel.datum.terms == channel.id == channel_id(terms)
    assert channel.datum.payee == payee_hash(to_plutus(provider.address))
    assert (channel.datum.renter_vkey, channel.datum.claimed) == (renter.vkey, 0)
    assert not channel.closing and channel.datum.closing_at == -1
    assert terms.nonce.to_input() in tx.transaction_body.inputs
    assert terms_from_metadata(tx.auxiliary_data) == terms
    assert channel.lovelace == DEPOSIT + return_deposit(devnet.context(), channel.utxo.output)
    assert balance(devnet, renter.address) == before - channel.lovelace - fee(tx)
    check_channel(deployment, channel, terms, provider.vkey, provider.address, DEPOSIT, CLOSE_MS)
    with pytest.raises(ValueError, match="is not at this deployment's channel script"):
        read_channel(deployment, output(tx, 1))  # the renter's change


async def test_a_provider_serves_only_a_channel_that_pays_it_enough_for_long_enough(
    devnet, deployment
):
    renter, provider, other = [await wallet(devnet) for _ in range(3)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    staker = staked(PaymentSigningKey.generate()).address
    checks = {
        Refusal.OTHER_ADDRESS: dict(own_address=other.address),
        Refusal.OTHER_KEY: dict(own_vkey=other.vkey),
        Refusal.DEPOSIT: dict(min_deposit=channel.lovelace + 1),
        Refusal.CLOSE_PERIOD: dict(min_close_period_ms=CLOSE_MS + 1),
        Refusal.OTHER_TERMS: dict(terms=dataclasses.replace(terms, close_period_ms=10**9)),
        # anyone can lock anything at the script: another stake part, tokens beside the deposit
        Refusal.NOT_AT_SCRIPT: dict(channel=moved(channel, deployment.channel_address(staker))),
        Refusal.TOKENS: dict(channel=moved(channel, value=Value(channel.lovelace, TOKENS))),
        # the channel script keeps a reference script on every continuing output
        Refusal.REFERENCE_SCRIPT: dict(channel=moved(channel, script=ScriptPubkey(other.key_hash))),
    }
    honest = dict(
        deployment=deployment, channel=channel, terms=terms, own_vkey=provider.vkey,
        own_address=provider.address, min_deposit=DEPOSIT, min_close_period_ms=CLOSE_MS,
    )  # fmt: skip
    for reason, changes in checks.items():
        with pytest.raises(ChannelRefused) as refused:
            check_channel(**{**honest, **changes})
        assert refused.value.reason == reason


async def test_a_claim_pays_the_provider_and_the_channel_goes_on(devnet, deployment):
    renter, provider = [await wallet(devnet) for _ in range(2)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    before = balance(devnet, provider.address)

    first = iou(deployment, renter, channel, 3 * ADA)
    one = await claimed(devnet, deployment, provider, [(channel, first)])
    after = left(deployment, one, 1)  # the provider's payout, then the channel
    assert balance(devnet, provider.address) == before + 3 * ADA - fee(one)
    assert after.lovelace == channel.lovelace - 3 * ADA
    assert after.datum == dataclasses.replace(channel.datum, claimed=3 * ADA)
    assert after.utxo.output.address == channel.utxo.output.address

    with pytest.raises(BuildError, match="stale IOU"):
        claim_channels(devnet.context(), deployment, [(after, first)], provider.address)
    second = iou(deployment, renter, after, 5 * ADA)  # cumulative: 2 ADA more
    two = await claimed(devnet, deployment, provider, [(after, second)])
    assert balance(devnet, provider.address) == before + 5 * ADA - fee(one) - fee(two)
    assert left(deployment, two, 1).lovelace == channel.lovelace - 5 * ADA


async def claimed(devnet, deployment, submitter, claims, payees=()):
    """Claim `claims` by the builder, submitted by `submitter`, confirmed."""
    built = claim_channels(devnet.context(), deployment, claims, submitter.address, payees)
    return await confirm(devnet, submitter.sign(built))


async def test_a_batch_pays_each_provider_once_for_all_its_channels(devnet, deployment):
    """Five channels, each its own renter, of two providers, claimed by a third party: one
    output per provider holding what its channels take, each channel going on."""
    renters = [await wallet(devnet) for _ in range(5)]
    providers = [await wallet(devnet) for _ in range(2)]
    market = await wallet(devnet)
    opened = [
        (await open_on(devnet, deployment, r, providers[i % 2]))[0] for i, r in enumerate(renters)
    ]
    amounts = [1 * ADA, 2 * ADA, 3 * ADA, 4 * ADA, 5 * ADA]
    claims = [
        (c, iou(deployment, r, c, a)) for c, r, a in zip(opened, renters, amounts, strict=True)
    ]
    before = [balance(devnet, w.address) for w in (*providers, market)]
    tx = await claimed(devnet, deployment, market, claims, [p.address for p in providers])

    owed = [sum(amounts[0::2]), sum(amounts[1::2])]
    after = [balance(devnet, w.address) for w in (*providers, market)]
    assert after[:2] == [b + o for b, o in zip(before, owed, strict=False)]
    assert after[2] == before[2] - fee(tx)
    outputs = tx.transaction_body.outputs
    assert [[o.amount.coin for o in outputs if o.address == p.address] for p in providers] == [
        [owed[0]],
        [owed[1]],
    ]  # one output per provider
    continuing = sorted(o.amount.coin for o in outputs if o.datum is not None)
    assert continuing == sorted(c.lovelace - a for c, a in zip(opened, amounts, strict=True))
    assert len(tx.transaction_witness_set.redeemer) == 6  # five spends and the withdrawal


async def test_the_claim_builder_refuses_what_the_claim_script_would(devnet, deployment):
    renter, provider, other = [await wallet(devnet) for _ in range(3)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    mine, _, _ = await open_on(devnet, deployment, other, provider)
    context = devnet.context()
    cases = {
        "is for channel": [(channel, iou(deployment, renter, mine, ADA))],
        "not signed by its renter key": [(channel, iou(deployment, other, channel, ADA))],
        "two IOUs for one channel": [
            (channel, iou(deployment, renter, channel, a)) for a in (1, 2)
        ],
        "which holds": [(channel, iou(deployment, renter, channel, channel.lovelace + 1))],
        "below its minimum UTxO": [(channel, iou(deployment, renter, channel, channel.lovelace))],
        "nothing to claim": [],
    }
    for message, claims in cases.items():
        with pytest.raises(BuildError, match=message):
            claim_channels(context, deployment, claims, provider.address)
    with pytest.raises(BuildError, match="not among the submitter and payees"):
        claim_channels(context, deployment, [(channel, iou(deployment, renter, channel, ADA))],
                       other.address)  # fmt: skip
    most = channel.lovelace - return_deposit(context, channel.utxo.output)
    assert most == DEPOSIT  # the whole deposit can be claimed
    await claimed(devnet, deployment, provider, [(channel, iou(deployment, renter, channel, most))])


async def test_the_renter_tops_a_channel_up_and_nothing_else_changes(devnet, deployment):
    """A friend may pay, but the renter's key signs too (a top-up spends the channel UTxO:
    PROTOCOL.md); once the channel is closing, the builder refuses (the script would)."""
    renter, provider, friend = [await wallet(devnet) for _ in range(3)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    before = balance(devnet, friend.address)
    topped = channels.top_up(devnet.context(), deployment, channel, terms, 7 * ADA, friend.address)
    assert topped.transaction_body.required_signers == [renter.address.payment_part]
    tx = await confirm(devnet, sign_tx(topped, friend.key, renter.key))
    after = left(deployment, tx)
    assert after.lovelace == channel.lovelace + 7 * ADA
    assert (after.datum, after.utxo.output.address) == (channel.datum, channel.utxo.output.address)
    assert balance(devnet, friend.address) == before - 7 * ADA - fee(tx)
    with pytest.raises(BuildError, match="must add lovelace"):
        channels.top_up(devnet.context(), deployment, after, terms, 0, friend.address)
    other_terms = dataclasses.replace(terms, close_period_ms=1)
    with pytest.raises(BuildError, match="not those of channel"):
        channels.top_up(devnet.context(), deployment, after, other_terms, ADA, renter.address)
    close = channels.start_close(devnet.context(), deployment, after, terms, renter.address)
    closing = left(deployment, await confirm(devnet, renter.sign(close)))
    with pytest.raises(BuildError, match=r"is closing since .*: no top-up"):
        channels.top_up(devnet.context(), deployment, closing, terms, ADA, renter.address)


async def test_a_close_gives_the_provider_the_close_period_then_the_renter_drains(
    devnet, deployment
):
    renter, provider, anyone = [await wallet(devnet) for _ in range(3)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    with pytest.raises(BuildError, match="is open: its renter starts a close first"):
        channels.drain(devnet.context(), deployment, channel, terms, anyone.address)
    with pytest.raises(BuildError, match="not the address of the channel's renter key"):
        channels.start_close(devnet.context(), deployment, channel, terms, provider.address)

    renter_before = balance(devnet, renter.address)
    closing = channels.start_close(devnet.context(), deployment, channel, terms, renter.address)
    start = await confirm(devnet, renter.sign(closing))
    upper = Clock.now(devnet.context()).time.slot_to_posix_ms(start.transaction_body.ttl)
    channel = left(deployment, start)
    assert channel.datum.closing_at == upper + CLOSE_MS  # from the upper bound: no backdating
    assert channel.lovelace == DEPOSIT + return_deposit(devnet.context(), channel.utxo.output)
    with pytest.raises(BuildError, match="is closing since"):
        channels.start_close(devnet.context(), deployment, channel, terms, renter.address)
    with pytest.raises(ChannelRefused) as refused:
        check_channel(deployment, channel, terms, provider.vkey, provider.address, 0, 0)
    assert refused.value.reason == Refusal.CLOSING

    provider_before = balance(devnet, provider.address)  # its last claim, within the period
    last = await claimed(
        devnet, deployment, provider, [(channel, iou(deployment, renter, channel, 4 * ADA))]
    )
    assert balance(devnet, provider.address) == provider_before + 4 * ADA - fee(last)
    channel = left(deployment, last, 1)
    run_until = Clock.now(devnet.context()).iso_slot(
        Clock.now(devnet.context()).first_slot_after(channel.datum.closing_at)
    )
    with pytest.raises(BuildError, match=f"runs until {run_until}"):
        channels.drain(devnet.context(), deployment, channel, terms, anyone.address)

    await travel_to(devnet, channel.datum.closing_at + 1)
    with pytest.raises(
        BuildError, match=f"close period of a channel ended at {iso(channel.datum.closing_at)}"
    ):
        claim_channels(
            devnet.context(), deployment,
            [(channel, iou(deployment, renter, channel, 5 * ADA))], provider.address,
        )  # fmt: skip
    anyone_before = balance(devnet, anyone.address)
    drained = await confirm(
        devnet,
        anyone.sign(channels.drain(devnet.context(), deployment, channel, terms, anyone.address)),
    )
    paid = drained.transaction_body.outputs[channels.RENTER_OUTPUT]
    assert paid.amount.coin == channel.lovelace
    assert paid.datum.kind == PayoutKind.DRAIN
    assert balance(devnet, anyone.address) == anyone_before - fee(drained)
    assert balance(devnet, renter.address) == (
        renter_before - fee(start) + channel.lovelace
    )  # the deposit less the 4 ADA claimed, and the return deposit


async def test_a_provider_ends_a_channel_at_once_paying_the_rest_back(devnet, deployment):
    renter, provider = [await wallet(devnet) for _ in range(2)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    tx = await claimed(
        devnet, deployment, provider, [(channel, iou(deployment, renter, channel, 2 * ADA))]
    )
    channel = left(deployment, tx, 1)
    before = [balance(devnet, w.address) for w in (renter, provider)]
    ended = await confirm(
        devnet,
        provider.sign(
            channels.provider_end(devnet.context(), deployment, channel, terms, provider.address)
        ),
    )
    paid = ended.transaction_body.outputs[channels.RENTER_OUTPUT]
    assert (paid.address, paid.datum.kind) == (renter.address, PayoutKind.END)
    after = [balance(devnet, w.address) for w in (renter, provider)]
    assert after == [before[0] + channel.lovelace, before[1] - fee(ended)]


async def test_both_close_a_channel_at_any_time_on_their_split(devnet, deployment):
    renter, provider = [await wallet(devnet) for _ in range(2)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    with pytest.raises(BuildError, match="below the minimum UTxO"):
        channels.mutual_close(devnet.context(), deployment, channel, terms, renter.address, 1)
    before = [balance(devnet, w.address) for w in (renter, provider)]
    unsigned = channels.mutual_close(
        devnet.context(), deployment, channel, terms, renter.address, 6 * ADA
    )
    tx = await confirm(devnet, sign_tx(renter.sign(unsigned), provider.key))
    after = [balance(devnet, w.address) for w in (renter, provider)]
    assert after == [before[0] + channel.lovelace - 6 * ADA - fee(tx), before[1] + 6 * ADA]
    assert not [o for o in tx.transaction_body.outputs if o.datum is not None]


async def test_a_small_claim_waits_unless_its_provider_claims_it(devnet, deployment):
    """0.1 ADA is below what an output may hold: a third party's claim would top the provider's
    output up, so the builder refuses it (SmallPayout); the provider claims it itself, its own
    change raising its own output."""
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    small = [(channel, iou(deployment, renter, channel, ADA // 10))]
    with pytest.raises(SmallPayout, match="below the minimum UTxO"):
        claim_channels(devnet.context(), deployment, small, market.address, [provider.address])
    before = balance(devnet, provider.address)
    tx = await claimed(devnet, deployment, provider, small)
    assert balance(devnet, provider.address) == before + ADA // 10 - fee(tx)
    assert left(deployment, tx, 1).lovelace == channel.lovelace - ADA // 10
