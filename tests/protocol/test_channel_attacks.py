"""Attacks on payment channels (PROTOCOL.md, channels), each a hand-made transaction the
ledger must refuse by the trace of the check that stops it, beside its honest twin, which
confirms with every party paid to the lovelace.

A claim's checks are the claim script's (its withdrawal run walks every channel of the
batch); every other action's are the channel script's own. What the scripts see is all that
stands between a channel and whoever submits a transaction spending it: the IOUs' signatures
(domain, network, channel script, channel id, amount), the continuing outputs (address,
datum field by field, value and tokens), the provider payouts (one per provider, each
counted once), the renter's payouts (tagged with the channel and the action) and the
validity bounds (a recorded time is the upper bound; a drain's lower bound is after the
close).

The claim attacks run against both claim scripts: the deployed hand-written one and its
OpShin reference (the reference deployment's, `either_settle`)."""

from __future__ import annotations

import dataclasses

from pycardano import Address, Network, ScriptPubkey, TransactionOutput, Value

from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.types import (
    ChannelTerms,
    ChannelTopUp,
    Drain,
    MutualClose,
    Payout,
    PayoutKind,
    ProviderEnd,
    StartClose,
    TxOutRef,
)
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.channel import Channel
from offchain.protocol.tx.txbuild import Clock
from tests.protocol.channels import (
    CLOSE_MS,
    ClaimPlan,
    by_hand,
    claim_plan,
    iou,
    left,
    open_on,
)
from tests.protocol.onchain import (
    ADA,
    SCRIPT_FAILED,
    UNBOUNDED,
    Spend,
    Wallet,
    confirm,
    confirm_gains,
    junk_tokens,
    rejected,
    travel_to,
    wallet,
)

TAKE = 3 * ADA


async def refused(devnet, tx, reason: str) -> None:
    """The ledger refuses `tx`: a script failed with `reason` traced."""
    await rejected(devnet, tx, SCRIPT_FAILED, f"traces: {reason}")


async def refused_claims(devnet, deployment, market, attacks) -> None:
    for attack, reason in attacks:
        await refused(devnet, attack.claim(devnet, deployment, market), reason)


def reoutput_datum(plan: ClaimPlan, channel: Channel, **changes) -> ClaimPlan:
    """`plan` with `channel`'s continuing datum changed (ChannelDatum's field names)."""
    index = plan.continuing(channel)
    made = plan.outputs[index]
    datum = dataclasses.replace(made.datum, **changes)
    return plan.reoutput(index, TransactionOutput(made.address, made.amount, datum=datum))


def revalue(plan: ClaimPlan, index: int, value: Value | int) -> ClaimPlan:
    made = plan.outputs[index]
    return plan.reoutput(index, TransactionOutput(made.address, value, datum=made.datum))


def taking(plan: ClaimPlan, channel: Channel, lovelace: int) -> ClaimPlan:
    """`plan` (of `channel` alone) paying its provider `lovelace` out of the channel."""
    plan = revalue(plan, 0, lovelace)
    return revalue(plan, plan.continuing(channel), channel.lovelace - lovelace)


def a_script(owner: Wallet) -> ScriptPubkey:
    """A reference script for a continuing output: every later spend of the output pays for
    its bytes."""
    return ScriptPubkey(owner.key_hash)


def elsewhere(address: Address, stake: Wallet) -> Address:
    """`address` with `stake`'s key as its stake part: the same payment credential, another
    full address."""
    return Address(address.payment_part, stake.key_hash, network=Network.TESTNET)


async def test_a_replayed_or_old_iou_takes_nothing(devnet, either_settle):
    deployment = either_settle
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    old = iou(deployment, renter, channel, TAKE - ADA)
    first = iou(deployment, renter, channel, TAKE)
    honest = claim_plan([(channel, provider, first)])
    tx = await confirm_gains(devnet, honest.claim(devnet, deployment, market), honest.gains)
    channel = left(deployment, tx, honest.continuing(honest.channels[0]))

    # each takes an ADA as if it were new, the continuing datum naming the IOU's amount
    replayed = taking(claim_plan([(channel, provider, first)]), channel, ADA)
    older = taking(claim_plan([(channel, provider, old)]), channel, ADA)
    await refused_claims(
        devnet, deployment, market, [(replayed, "stale IOU"), (older, "stale IOU")]
    )
    again = claim_plan([(channel, provider, iou(deployment, renter, channel, TAKE + ADA))])
    await confirm_gains(
        devnet, again.claim(devnet, deployment, market), {str(provider.address): ADA}
    )


async def test_an_iou_signs_its_channel_network_and_channel_script(devnet, either_settle):
    deployment = either_settle
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    other, _, _ = await open_on(devnet, deployment, renter, provider)
    honest = claim_plan([(channel, provider, iou(deployment, renter, channel, TAKE))])

    def signed(**changes) -> ClaimPlan:
        """The honest claim with its IOU signed over something else."""
        forged = iou(deployment, renter, channel, TAKE, **changes)
        return honest.changed(channel, signature=forged.signature)

    by_provider = iou(deployment, provider, channel, TAKE)
    await refused_claims(
        devnet, deployment, market,
        [
            (signed(channel=other.id), "iou signature"),  # the renter's other channel
            (signed(network_id=1), "iou signature"),
            (signed(channel_hash=deployment.escrow_hash), "iou signature"),  # another script
            (signed(amount=TAKE - 1), "iou signature"),
            (honest.changed(channel, signature=by_provider.signature), "iou signature"),
        ],
    )  # fmt: skip
    await confirm_gains(devnet, honest.claim(devnet, deployment, market), honest.gains)


async def test_a_claim_takes_no_more_than_the_channel_holds(devnet, either_settle):
    deployment = either_settle
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    honest = claim_plan([(channel, provider, iou(deployment, renter, channel, TAKE))])
    above = claim_plan(
        [(channel, provider, iou(deployment, renter, channel, channel.lovelace + 1))]
    )
    # the continuing output cannot hold less than nothing: it keeps 2 ADA, the claim says more
    above = revalue(above, above.continuing(channel), 2 * ADA)
    at = honest.continuing(channel)
    await refused_claims(
        devnet, deployment, market,
        [
            (above, "claim above the deposit"),
            (revalue(honest, at, honest.outputs[at].amount.coin - 1), "continuing value"),
            (revalue(honest, 0, TAKE - 1), "provider payout"),
        ],
    )  # fmt: skip
    await confirm_gains(devnet, honest.claim(devnet, deployment, market), honest.gains)


async def test_the_continuing_output_keeps_the_channels_address_datum_and_tokens(
    devnet, either_settle
):
    deployment = either_settle
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    honest = claim_plan([(channel, provider, iou(deployment, renter, channel, TAKE))])
    at = honest.continuing(channel)
    made = honest.outputs[at]
    moved = TransactionOutput(elsewhere(made.address, market), made.amount, datum=made.datum)
    policy, tokens = junk_tokens(market, 1)
    dusted = revalue(honest, at, Value(made.amount.coin, tokens))
    scripted = TransactionOutput(
        made.address, made.amount, datum=made.datum, script=a_script(market)
    )
    attacks = [
        (honest.reoutput(at, moved), "continuing address"),  # the stake part redirected
        (honest.reoutput(at, scripted), "continuing reference script"),  # the renter's fees rise
        (reoutput_datum(honest, channel, payee=bytes(28)), "continuing datum"),
        (reoutput_datum(honest, channel, terms=bytes(28)), "continuing datum"),
        (reoutput_datum(honest, channel, renter_vkey=market.vkey), "continuing datum"),
        (reoutput_datum(honest, channel, closing_at=0), "continuing datum"),
    ]
    await refused_claims(devnet, deployment, market, attacks)
    await refused(
        devnet,
        dusted.claim(devnet, deployment, market, native=(tokens, policy)),
        "continuing value",
    )
    await confirm_gains(devnet, honest.claim(devnet, deployment, market), honest.gains)


async def test_claims_pay_each_channels_own_provider_and_each_payout_counts_once(
    devnet, either_settle
):
    """Two channels of provider p, one of q: p's payout must hold both its takes, and no
    channel's take may be paid at another provider's (or anyone else's) address."""
    deployment = either_settle
    renters = [await wallet(devnet) for _ in range(3)]
    p, q, market = [await wallet(devnet) for _ in range(3)]
    a, b, c = [
        (await open_on(devnet, deployment, r, to))[0]
        for r, to in zip(renters, (p, p, q), strict=True)
    ]
    honest = claim_plan(
        [
            (a, p, iou(deployment, renters[0], a, TAKE)),
            (b, p, iou(deployment, renters[1], b, TAKE + ADA)),
            (c, q, iou(deployment, renters[2], c, TAKE)),
        ]
    )
    assert honest.first_continuing == 2  # one output per provider
    p_at = honest.payees[honest.at(a)]
    q_at = honest.payees[honest.at(c)]
    p_out = honest.outputs[p_at]
    to_market = TransactionOutput(market.address, p_out.amount)
    restaked = TransactionOutput(elsewhere(p.address, market), p_out.amount)
    one_take = TransactionOutput(p.address, 2 * TAKE + ADA - TAKE)  # a's take counted for b's
    tagged = TransactionOutput(p.address, p_out.amount, datum=b"mine")
    await refused_claims(
        devnet, deployment, market,
        [
            (honest.reoutput(p_at, one_take), "provider payout"),
            (honest.reoutput(p_at, tagged), "provider payout"),
            (honest.reoutput(p_at, to_market), "one provider per payout"),  # wrong payee
            (honest.reoutput(p_at, restaked), "one provider per payout"),
            (honest.changed(c, payee=p_at), "one provider per payout"),  # q's take at p's
            (honest.changed(a, payee=q_at), "one provider per payout"),
        ],
    )  # fmt: skip
    await confirm_gains(devnet, honest.claim(devnet, deployment, market), honest.gains)


async def closing(devnet, deployment, renter, provider) -> tuple[Channel, ChannelTerms]:
    """A channel whose renter has started its close (by the builder)."""
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    start = channels.start_close(devnet.context(), deployment, channel, terms, renter.address)
    return left(deployment, await confirm(devnet, renter.sign(start))), terms


async def test_no_claim_after_the_close_period(devnet, either_settle):
    deployment = either_settle
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, _ = await closing(devnet, deployment, renter, provider)
    clock = Clock.now(devnet.context())
    close_slot = clock.time.posix_ms_to_slot(channel.datum.closing_at)
    assert clock.time.slot_to_posix_ms(close_slot) == channel.datum.closing_at
    honest = claim_plan([(channel, provider, iou(deployment, renter, channel, TAKE))])
    for ttl, reason in (
        (close_slot + 1, "claim after close"),  # one slot after the close
        (UNBOUNDED, "one withdrawal, and an upper bound"),
    ):
        await refused(devnet, honest.claim(devnet, deployment, market, ttl=ttl), reason)
    tx = honest.claim(devnet, deployment, market, ttl=close_slot)
    await confirm_gains(devnet, tx, honest.gains)


def payout_to(terms: ChannelTerms, channel: Channel, kind: PayoutKind, lovelace=None):
    """The renter's payout of `channel` as the channel script looks for it."""
    renter = from_plutus(terms.renter, Network.TESTNET)
    tag = Payout(int(kind), TxOutRef.of(channel.utxo.input))
    return TransactionOutput(renter, channel.lovelace if lovelace is None else lovelace, datum=tag)


async def test_the_renter_drains_only_after_the_close_period_and_once(devnet, deployment):
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    a, terms_a = await closing(devnet, deployment, renter, provider)
    b, terms_b = await closing(devnet, deployment, renter, provider)
    still_open, open_terms, _ = await open_on(devnet, deployment, renter, provider)
    paid = payout_to(terms_a, a, PayoutKind.DRAIN)
    tip = Clock.now(devnet.context()).tip_slot

    def drained(channel, terms, outputs, start, **extra):
        """`channel` drained into output 0 (`extra`: more spends, as `by_hand` takes them)."""
        return by_hand(
            devnet, deployment, market, channel, lambda own: Drain(own, 0, terms),
            outputs, start=start, **extra,
        )  # fmt: skip

    for attack, reason in (
        (drained(a, terms_a, [paid], tip), "close period not over"),
        (drained(a, terms_a, [paid], UNBOUNDED), "needs a finite lower bound"),
        (drained(still_open, open_terms, [payout_to(open_terms, still_open, PayoutKind.DRAIN)],
                 tip), "not closing"),
    ):  # fmt: skip
        await refused(devnet, attack, reason)

    await travel_to(devnet, max(a.datum.closing_at, b.datum.closing_at) + 1)
    tip = Clock.now(devnet.context()).tip_slot
    both = TransactionOutput(paid.address, a.lovelace + b.lovelace, datum=paid.datum)
    counted_twice = drained(  # one payout, tagged for a, counted for b too
        a, terms_a, [both], tip,
        spends=[Spend(b.utxo, deployment.channel_ref, lambda own: Drain(own, 0, terms_b))],
    )  # fmt: skip
    for attack, reason in (
        (counted_twice, "payout tag"),
        (drained(a, terms_b, [paid], tip), "terms"),  # checked once the time is (inlined)
        (drained(a, terms_a, [payout_to(terms_a, a, PayoutKind.END)], tip), "payout tag"),
        (drained(a, terms_a, [payout_to(terms_a, a, PayoutKind.DRAIN, a.lovelace - 1)], tip),
         "payout amount"),
        (drained(a, terms_a, [TransactionOutput(market.address, a.lovelace, datum=paid.datum)],
                 tip), "payout address"),
    ):  # fmt: skip
        await refused(devnet, attack, reason)
    honest = drained(  # both in one transaction, each paid by its own tagged output
        a, terms_a, [paid, payout_to(terms_b, b, PayoutKind.DRAIN)], tip,
        spends=[Spend(b.utxo, deployment.channel_ref, lambda own: Drain(own, 1, terms_b))],
    )  # fmt: skip
    await confirm_gains(devnet, honest, {str(renter.address): a.lovelace + b.lovelace})


async def test_a_close_runs_from_its_upper_bound_and_cannot_be_backdated(devnet, deployment):
    """The close period runs from the transaction's validity upper bound, which must lie in
    the future for the ledger to take it: a lower bound (any past slot the submitter likes)
    would let a renter start a close that is over before the provider sees it."""
    renter, provider = [await wallet(devnet) for _ in range(2)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    clock = Clock.now(devnet.context())
    start, ttl = clock.tip_slot - 30, clock.tip_slot + 60

    def closed(closing_at, signers=(renter.key,), lovelace=None, **extra):
        datum = dataclasses.replace(channel.datum, closing_at=closing_at)
        kept = channel.lovelace if lovelace is None else lovelace
        made = TransactionOutput(channel.utxo.output.address, kept, datum=datum)
        extra = {"start": start, "ttl": ttl, "signers": signers, **extra}
        return by_hand(
            devnet, deployment, renter, channel, lambda own: StartClose(own, 0, terms),
            [made], **extra,
        )  # fmt: skip

    upper = clock.time.slot_to_posix_ms(ttl) + CLOSE_MS
    backdated = clock.time.slot_to_posix_ms(start) + CLOSE_MS
    other_terms = dataclasses.replace(terms, close_period_ms=1)
    for attack, reason in (
        (closed(backdated), "continuing datum"),  # from the lower bound
        (closed(upper - 1), "continuing datum"),
        (closed(upper, ttl=UNBOUNDED), "needs a finite upper bound"),
        (closed(upper, signers=()), "renter signs"),
        (closed(upper, lovelace=channel.lovelace - ADA), "close keeps the deposit"),
        (by_hand(devnet, deployment, renter, channel,
                 lambda own: StartClose(own, 0, other_terms), [], signers=[renter.key]),
         "terms"),
    ):  # fmt: skip
        await refused(devnet, attack, reason)
    honest = closed(upper)
    await confirm(devnet, honest)
    closed_channel = left(deployment, honest)
    assert closed_channel.datum.closing_at == upper
    again = dataclasses.replace(closed_channel.datum, closing_at=upper + 1)
    twice = by_hand(
        devnet, deployment, renter, closed_channel, lambda own: StartClose(own, 0, terms),
        [TransactionOutput(channel.utxo.output.address, channel.lovelace, datum=again)],
        ttl=Clock.now(devnet.context()).tip_slot + 60, signers=[renter.key],
    )  # fmt: skip
    await refused(devnet, twice, "already closing")


async def test_a_top_up_is_the_renters_and_only_adds_lovelace(devnet, deployment):
    """A top-up spends the channel UTxO, so it needs the renter's signature: a stranger's
    (one lovelace is enough) would void the provider's pending claim. Beyond that the
    continuing output is all the channel script checks: same address, same datum (which
    names one channel: two channels cannot share one continuing output), more lovelace, the
    same tokens, no reference script slipped in."""
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    other, other_terms, _ = await open_on(devnet, deployment, renter, provider)
    address = channel.utxo.output.address
    policy, tokens = junk_tokens(market, 1)

    def topped(outputs, signers=(renter.key,), redeemer_terms=terms, **extra):
        return by_hand(
            devnet, deployment, market, channel,
            lambda own: ChannelTopUp(own, 0, redeemer_terms), outputs, signers=signers, **extra,
        )  # fmt: skip

    more = channel.lovelace + 5 * ADA
    changed = dataclasses.replace(channel.datum, claimed=channel.datum.claimed + 1)
    shared = TransactionOutput(address, more + other.lovelace, datum=channel.datum)
    honest_output = TransactionOutput(address, more, datum=channel.datum)
    scripted = TransactionOutput(address, more, datum=channel.datum, script=a_script(market))
    for attack, reason in (
        (topped([TransactionOutput(address, channel.lovelace + 1, datum=channel.datum)],
                signers=()), "renter signs"),  # a stranger's lovelace races the claim
        (topped([honest_output], signers=(market.key,)), "renter signs"),
        (topped([honest_output], signers=(provider.key,)), "renter signs"),
        (topped([honest_output], redeemer_terms=other_terms), "terms"),
        (topped([TransactionOutput(address, more, datum=changed)]), "continuing datum"),
        (topped([TransactionOutput(elsewhere(address, market), more, datum=channel.datum)]),
         "continuing address"),
        (topped([TransactionOutput(address, Value(more, tokens), datum=channel.datum)],
                native=(tokens, policy)), "continuing tokens"),
        (topped([scripted]), "continuing reference script"),
        (topped([TransactionOutput(address, channel.lovelace, datum=channel.datum)]),
         "top up adds"),
        (topped([shared], spends=[Spend(other.utxo, deployment.channel_ref,
                                        lambda own: ChannelTopUp(own, 0, other_terms))]),
         "continuing datum"),  # one output for two channels: it carries one's datum
    ):  # fmt: skip
        await refused(devnet, attack, reason)
    honest = topped([honest_output])
    await confirm(devnet, honest)
    assert left(deployment, honest).lovelace == more


async def test_the_renter_cannot_race_the_providers_last_claim_with_a_top_up(devnet, deployment):
    """Once the renter starts the close, a top-up (even its own, signed) is refused: it would
    spend the channel UTxO the provider's last claim names, and a renter resubmitting one
    just before `closing_at` could void every claim until the drain. The claim then lands."""
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, terms = await closing(devnet, deployment, renter, provider)
    address = channel.utxo.output.address
    top_up = by_hand(
        devnet, deployment, renter, channel, lambda own: ChannelTopUp(own, 0, terms),
        [TransactionOutput(address, channel.lovelace + 1, datum=channel.datum)],
        signers=[renter.key],
    )  # fmt: skip
    await refused(devnet, top_up, "already closing")
    claim = claim_plan([(channel, provider, iou(deployment, renter, channel, TAKE))])
    await confirm_gains(devnet, claim.claim(devnet, deployment, market), claim.gains)


async def test_an_end_needs_the_provider_and_a_mutual_close_both(devnet, deployment):
    renter, provider, market = [await wallet(devnet) for _ in range(3)]
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    back = payout_to(terms, channel, PayoutKind.END)

    def ended(outputs, signers):
        return by_hand(
            devnet, deployment, market, channel, lambda own: ProviderEnd(own, 0, terms),
            outputs, signers=signers,
        )  # fmt: skip

    def mutual(signers):
        split = [
            TransactionOutput(provider.address, TAKE),
            TransactionOutput(renter.address, channel.lovelace - TAKE),
        ]
        return by_hand(
            devnet, deployment, market, channel, MutualClose(terms), split, signers=signers
        )

    for attack, reason in (
        (ended([back], [renter.key]), "provider signs"),
        (ended([payout_to(terms, channel, PayoutKind.DRAIN)], [provider.key]), "payout tag"),
        (mutual([renter.key]), "both sign"),
        (mutual([provider.key]), "both sign"),
    ):
        await refused(devnet, attack, reason)
    await confirm_gains(
        devnet, mutual([renter.key, provider.key]),
        {str(provider.address): TAKE, str(renter.address): channel.lovelace - TAKE},
    )  # fmt: skip
