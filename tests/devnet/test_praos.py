"""The realistic profile: Praos leader slots and forks drawn from a seed, and forks that
behave like a real chain reorganisation (orphaned transactions back to the mempool, the
expired ones dropped, followers rolled backward onto a longer chain)."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import pytest
from pycardano import PaymentSigningKey, TransactionBuilder, TransactionOutput
from pydantic import ValidationError

from devnet.genesis import wallet_address
from devnet.praos import Praos
from devnet.process import DevnetProcess
from devnet.settings import DevnetSettings
from offchain.chain.follower import RollBackward, RollForward, follow, tip_point
from offchain.chain.ogmios import request
from offchain.chain.submit import submit
from tests.devnet.conftest import forge
from tests.devnet.payments import confirm, lovelace_at, payment

MAINNET_F = Fraction(1, 20)


def test_about_one_slot_in_twenty_has_a_leader_and_some_minutes_none():
    praos = Praos(MAINNET_F, Fraction(0), 1, seed=1)
    leaders = [slot for slot in range(40_000) if praos.leads(slot)]
    assert 1_800 <= len(leaders) <= 2_200
    gaps = [later - earlier for earlier, later in pairwise(leaders)]
    assert max(gaps) > 60  # a minute without a block, as mainnet has every few hours


def test_the_seed_decides_the_schedule():
    def schedule(seed: int) -> list[int]:
        praos = Praos(MAINNET_F, Fraction(1, 5), 3, seed)
        return [(praos.leads(s), praos.fork_depth(s, 10)) for s in range(2_000)]

    assert schedule(5) == schedule(5)
    assert schedule(5) != schedule(6)


def test_forks_are_one_to_k_deep_and_never_take_the_first_block():
    praos = Praos(MAINNET_F, Fraction(1, 2), 3, seed=9)
    depths = [praos.fork_depth(slot, 100) for slot in range(4_000)]
    assert set(depths) == {0, 1, 2, 3}
    assert 1_800 <= sum(1 for d in depths if d) <= 2_200
    assert all(praos.fork_depth(slot, 1) == 0 for slot in range(500))
    assert all(praos.fork_depth(slot, 2) <= 1 for slot in range(500))


def test_settings_fill_the_realistic_knobs_and_refuse_them_elsewhere():
    assert DevnetSettings().praos() is None  # instant by default
    praos = DevnetSettings(profile="realistic", fork_rate=0.1, seed=4).praos()
    assert praos == Praos(MAINNET_F, Fraction(1, 10), 2, 4)  # 0.1 read as its decimal text
    custom = DevnetSettings(profile="realistic", active_slot_coeff="1/5", fork_depth_max=3)
    assert custom.praos() == Praos(Fraction(1, 5), Fraction(1, 20), 3, 0)
    with pytest.raises(ValidationError, match="fork_rate apply to profile 'realistic' only"):
        DevnetSettings(fork_rate="1/2")
    with pytest.raises(ValidationError, match="never make a block"):
        DevnetSettings(profile="realistic", active_slot_coeff=0)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        DevnetSettings(profile="realistic", fork_rate="3/2")
    with pytest.raises(ValidationError):
        DevnetSettings(profile="mainnet")


async def test_a_fork_puts_orphaned_transactions_in_the_new_chain(slow_devnet):
    devnet = slow_devnet
    receiver = wallet_address(PaymentSigningKey.generate())
    since = await tip_point(devnet.url)
    events = follow(devnet.url, [since])
    await anext(events)  # the roll backward to the intersection
    tx = payment(devnet, "alice", receiver, 5_000_000)
    await submit(devnet.url, tx)
    mined = await forge(devnet)
    assert (await anext(events)).block["id"] == mined["id"]

    tip = (await request(devnet.url, "devnet/fork", {"blocks": 1}))["tip"]
    back, competitor, adopted = [await anext(events) for _ in range(3)]
    assert isinstance(back, RollBackward) and back.point == since
    assert back.tip == tip and tip["height"] == mined["height"] + 1  # a longer chain won
    assert isinstance(competitor, RollForward) and competitor.block["slot"] == mined["slot"]
    assert competitor.block["id"] != mined["id"] and not competitor.block["transactions"]
    assert [t["id"] for t in adopted.block["transactions"]] == [str(tx.id)]
    assert lovelace_at(devnet, receiver) == 5_000_000  # once: the same transaction, re-included
    await events.aclose()


async def test_a_fork_drops_orphaned_transactions_whose_ttl_passed(slow_devnet):
    devnet = slow_devnet
    receiver = wallet_address(PaymentSigningKey.generate())
    tip = await tip_point(devnet.url)
    builder = TransactionBuilder(devnet.context(), ttl=tip["slot"] + 3)
    builder.add_input_address(devnet.address("bob"))
    builder.add_output(TransactionOutput(receiver, 4_000_000))
    tx = builder.build_and_sign([devnet.key("bob")], change_address=devnet.address("bob"))
    await submit(devnet.url, tx)
    await forge(devnet)
    assert lovelace_at(devnet, receiver) == 4_000_000
    await request(devnet.url, "devnet/advanceTime", {"slots": 10})  # past the ttl

    adopted = (await request(devnet.url, "devnet/fork", {"blocks": 2}))["tip"]
    assert adopted["slot"] >= tx.transaction_body.ttl
    assert lovelace_at(devnet, receiver) == 0
    spent = tx.transaction_body.inputs
    unspent = {u.input for u in devnet.context().utxos(devnet.address("bob"))}
    assert set(spent) <= unspent  # bob's money is his again, not lost
    mempool = await request(devnet.url, "devnet/fork", {"blocks": 1})  # nothing comes back
    assert lovelace_at(devnet, receiver) == 0 and mempool["tip"]["height"] == adopted["height"] + 1


@pytest.mark.devnet  # starts one of its own
async def test_the_realistic_profile_forks_onto_longer_chains_and_keeps_every_payment(tmp_path):
    devnet = DevnetProcess.realistic(tmp_path / "data", "--fork-rate", "1/3", "--seed", "3")
    devnet.start()
    try:
        receiver = wallet_address(PaymentSigningKey.generate())
        events = follow(devnet.url, ["origin"])
        amounts = [2_000_000, 3_000_000, 4_000_000]
        last = None
        for amount in amounts:
            last = await confirm(devnet, payment(devnet, "alice", receiver, amount))
        assert last is not None
        chain: list[int] = []  # the followed chain's block slots, by height
        rollbacks = 0
        for _ in range(2_000):  # the evidence comes within a few hundred blocks
            event = await anext(events)
            if isinstance(event, RollForward):
                chain.append(event.block["slot"])
                if rollbacks >= 2 and len(chain) >= last["height"] + 6:
                    break
            elif event.point != "origin":
                rollbacks += 1
                assert event.tip["height"] > len(chain)  # a switch to a longer chain
                kept = [slot for slot in chain if slot <= event.point["slot"]]
                assert 1 <= len(chain) - len(kept) <= 2  # 1..k deep
                chain = kept
        await events.aclose()
        assert rollbacks >= 2
        gaps = [later - earlier for earlier, later in pairwise(chain)]
        assert max(gaps) > 1 and sum(gaps) >= 5 * len(gaps)  # blocks in random slots, ~1 in 20
        assert lovelace_at(devnet, receiver) == sum(amounts)  # each payment exactly once
    finally:
        devnet.stop()


@pytest.mark.devnet  # starts one of its own
def test_a_fork_rate_without_the_realistic_profile_is_refused_with_its_reason(tmp_path):
    devnet = DevnetProcess(tmp_path / "data", extra_args=("--fork-rate", "1/2"))
    with pytest.raises(RuntimeError, match="devnet exited"):
        devnet.start()
    assert (
        "fork_rate apply to profile 'realistic' only"
        in (devnet.data_dir / "devnet.log").read_text()
    )
