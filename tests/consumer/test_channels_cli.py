"""`unchained channel ...` end to end on the devnet, with the market serving the provider's
signed offer (where the channel's address and key come from): open, status, top up, a claim of
an IOU the renter's signer made, close (started), close again too early (refused, saying when),
then after the close period (chain time) close again (drained), and list; the renter's balance
to the lovelace at each step. And each mistake answered with what to do, nothing locked."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

from pycardano import TransactionOutput

from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.keys import ConsumerKey
from offchain.chain.follower import tip_point
from offchain.chain.submit import submit_confirmed
from offchain.protocol.ledger.amounts import ADA, ada
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.txbuild import sign_tx
from tests.consumer.cli import UNCHAINED, cli_env, funded_key, run, run_json, tx_fee
from tests.protocol.onchain import balance, travel_to, wallet

DEPOSIT = 10 * ADA
TOP_UP = 5 * ADA
CLAIMED = 3 * ADA
CLOSE_PERIOD_MS = 600_000


def on_chain(context, deployment, renter) -> dict[str, channels.Channel]:
    """The channels at the renter's channel address now, by id (hex); the devnet is the
    session's, and other tests leave what is not a channel there too."""
    found = {}
    for utxo in context.utxos(deployment.channel_address(renter)):
        with contextlib.suppress(ValueError):
            channel = channels.read_channel(deployment, utxo)
            found[channel.id.hex()] = channel
    return found


async def test_open_top_up_claim_close_and_drain(
    market, provider, devnet, consumer_deployment, tmp_path: Path
):
    funded, key = await funded_key(devnet, tmp_path, 100 * ADA)
    env = cli_env(market, devnet, key, tmp_path / "state")
    offer = await provider.offer()
    since = await tip_point(devnet.url)
    start = balance(devnet, funded.address)

    code, opened = run_json(env, "channel", "open", "--provider", offer["provider_id"][:12],
                            "--deposit", "10", "--close-period", "10min", "--yes",
                            cwd=tmp_path)  # fmt: skip
    assert code == 0, opened
    channel_id = opened["channel_id"]
    assert opened["provider_address"] == str(provider.party.wallet.address)
    assert (opened["deposit"], opened["close_period_ms"]) == (DEPOSIT, CLOSE_PERIOD_MS)
    context, deployment = devnet.context(), consumer_deployment
    live = on_chain(context, deployment, funded.address)
    address, datum = live[channel_id].utxo.output.address, live[channel_id].datum
    returned = channels.return_deposit(context, TransactionOutput(address, 0, datum=datum))
    assert opened["locked"] == DEPOSIT + returned  # the output's own minimum is added
    open_fee = await tx_fee(devnet, opened["tx_id"], since)
    assert balance(devnet, funded.address) == start - open_fee - opened["locked"]

    code, status = run_json(env, "channel", "status", channel_id[:10], cwd=tmp_path)
    assert code == 0, status
    assert status["state"] == "open" and status["lovelace"] == opened["locked"], status
    assert status["deposit"] == DEPOSIT  # the chain's: claimed + lovelace - the return deposit
    assert (status["claimed"], status["signed"], status["left"]) == (0, 0, DEPOSIT)
    shown = run(env, "channel", "status", channel_id, cwd=tmp_path).stdout
    assert f"channel {channel_id}: open" in shown and f"deposit   {ada(DEPOSIT)}" in shown, shown

    code, topped = run_json(env, "channel", "top-up", channel_id, "--amount", "5ADA", cwd=tmp_path)
    assert code == 0 and topped["deposit"] == DEPOSIT + TOP_UP, topped
    top_up_fee = await tx_fee(devnet, topped["tx_id"], since)
    locked = opened["locked"] + TOP_UP

    # the renter signs an IOU as a service would ask (SDK), the provider claims it
    store = ChannelStore(tmp_path / "state")
    signer = IouSigner(ConsumerKey(funded.key), deployment.network_id, deployment.channel_hash,
                       store.get(channel_id), store)  # fmt: skip
    iou = signer.pay(CLAIMED, received_total=CLAIMED)
    channel = on_chain(context, deployment, funded.address)[channel_id]
    assert channel.lovelace == locked and channel.datum.claimed == 0
    claim = channels.claim_channels(context, deployment, [(channel, iou)],
                                    provider.party.wallet.address)  # fmt: skip
    await submit_confirmed(devnet.url, sign_tx(claim, provider.party.wallet.key))

    code, status = run_json(env, "channel", "status", channel_id, cwd=tmp_path)
    assert status["lovelace"] == locked - CLAIMED, status
    code, held = run_json(env, "wallet", "balance", cwd=tmp_path)  # the channel counted
    assert code == 0 and held["channels_lovelace"] == locked - CLAIMED, held
    assert held["total_lovelace"] == balance(devnet, funded.address) + locked - CLAIMED
    assert status["claimed"] == status["signed"] == CLAIMED
    assert (status["deposit"], status["left"]) == (DEPOSIT + TOP_UP, DEPOSIT + TOP_UP - CLAIMED)

    stranger = await wallet(devnet, 10 * ADA)  # the same records, another key: not the renter
    stranger.key.save(str(tmp_path / "stranger.skey"))
    code, refused = run_json({**env, "UNCHAINED_CONSUMER_KEY": str(tmp_path / "stranger.skey")},
                             "channel", "close", channel_id, cwd=tmp_path)  # fmt: skip
    assert code == 1 and "is not the address of the channel's renter key" in refused["message"]

    code, closing = run_json(env, "channel", "close", channel_id, cwd=tmp_path)
    assert code == 0 and closing["how"] == "closing", closing
    close_fee = await tx_fee(devnet, closing["tx_id"], since)
    code, status = run_json(env, "channel", "status", channel_id, cwd=tmp_path)
    assert status["state"] == "closing" and status["closing_at"] == closing["closing_at"]

    code, early = run_json(env, "channel", "close", channel_id, cwd=tmp_path)
    assert code == 1 and early["error"] == "NotDrainableYet", early
    assert "its provider may claim until" in early["message"]
    assert early["drainable_at_ms"] > closing["closing_at"]
    code, refused = run_json(env, "channel", "top-up", channel_id, "--amount", "1", cwd=tmp_path)
    assert code == 1 and "is closing" in refused["message"], refused

    await travel_to(devnet, closing["closing_at"] + 1)
    code, status = run_json(env, "channel", "status", channel_id, cwd=tmp_path)
    assert status["state"] == "drainable", status
    code, drained = run_json(env, "channel", "close", channel_id, cwd=tmp_path)
    assert code == 0 and drained["how"] == "drained", drained
    assert drained["returned"] == locked - CLAIMED
    drain_fee = await tx_fee(devnet, drained["tx_id"], since)
    fees = open_fee + top_up_fee + close_fee + drain_fee
    assert balance(devnet, funded.address) == start - CLAIMED - fees  # to the lovelace
    code, held = run_json(env, "wallet", "balance", cwd=tmp_path)
    assert code == 0 and held["channels_lovelace"] == 0, held  # drained: back in the wallet

    # one money view: the channel's cost, from the market's index, is the wallet's difference
    deadline = time.monotonic() + 60
    while True:
        code, spent = run_json(env, "spend", cwd=tmp_path)
        assert code == 0, spent
        (cost,) = spent["channels"]
        if cost["state"] == "drained" or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the market's follower indexes the drain
    assert (cost["put_in"], cost["fees"], cost["claimed"]) == (locked, fees, CLAIMED), cost
    assert (cost["returned"], cost["held"]) == (locked - CLAIMED, 0), cost
    assert cost["net_cost"] == spent["total"]["net_cost"] == start - balance(devnet, funded.address)
    code, again = run_json(env, "channel", "close", channel_id, cwd=tmp_path)
    assert code == 1 and "is not on chain: it was closed" in again["message"], again

    code, (listed,) = run_json(env, "channel", "list", cwd=tmp_path)
    assert code == 0 and listed["state"] == "drained" and listed["claimed"] is None, listed
    assert cost["state"] == "drained"  # the explorer's word for it, as the CLI's
    assert listed["closed_tx_id"] == drained["tx_id"] and listed["signed"] == CLAIMED
    table = run(env, "channel", "list", cwd=tmp_path).stdout
    assert channel_id[:16] in table and "drained" in table, table


async def test_mistakes_are_explained_and_lock_nothing(market, provider, devnet, tmp_path: Path):
    funded, key = await funded_key(devnet, tmp_path, 5 * ADA)
    env = cli_env(market, devnet, key, tmp_path / "state")
    offer = await provider.offer()
    start = balance(devnet, funded.address)

    code, error = run_json(env, "channel", "open", "--provider", "ff" * 28, "--deposit", "1",
                           "--yes", cwd=tmp_path)  # fmt: skip
    assert code == 1 and "no offer on the market names provider" in error["message"], error

    code, error = run_json(env, "channel", "open", "--provider", offer["provider_id"],
                           "--deposit", "1", "--close-period", "600", "--yes",
                           cwd=tmp_path)  # fmt: skip
    assert code == 1 and "--close-period: expected a positive duration" in error["message"]

    asked = subprocess.run(
        [*UNCHAINED, "channel", "open", "--provider", offer["provider_id"], "--deposit", "1"],
        env=env, cwd=tmp_path, input="n\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    for shown in (f"channel to provider {offer['provider_id']} (its signed offer: checked)",
                  f"pays to     {provider.party.wallet.address}", "deposit     1.000000 ADA",
                  "lock 1.000000 ADA in this channel? [y/N]", "nothing locked"):  # fmt: skip
        assert shown in asked.stdout, asked.stdout

    done = run(env, "channel", "open", "--provider", str(provider.party.wallet.address),
               "--deposit", "10", "--yes", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1 and "not enough funds" in done.stderr, done.stderr
    assert str(funded.address) in done.stderr and "Send at least" in done.stderr

    code, error = run_json(env, "channel", "status", "0123456789", cwd=tmp_path)
    assert code == 1 and "no channel 0123456789" in error["message"], error
    assert balance(devnet, funded.address) == start
    assert run_json(env, "channel", "list", cwd=tmp_path) == (0, [])
