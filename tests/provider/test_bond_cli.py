"""`unchained provider bond ...` against the devnet: each command's effect checked on the chain
(the bond UTxO, its datum and its lovelace), and the refusals an operator can act on."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from pycardano import Address, Network, PaymentSigningKey, Transaction
from typer.testing import CliRunner

from devnet.genesis import ADA
from offchain.chain.time import iso
from offchain.core.sealed_keys import PASSPHRASE_FILE_VARIABLE, PASSPHRASE_VARIABLE
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.types import Just, Nothing
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.txbuild import Clock, Wallet, out_ref
from provider.keys import key_path, load_key
from provider.money.own_transactions import OwnTransactions
from tests.protocol.onchain import balance, confirm, fund, travel_to
from tests.provider.chain import NOTICE_MS
from unchained.cli import app

cli = CliRunner()


@pytest.fixture
async def provider(devnet, deployment, deployment_path, tmp_path):
    """A provider set up by `provider init`, its wallet funded; `bond` runs its commands."""
    state = tmp_path / "state"
    made = cli.invoke(app, ["provider", "init", "--config", str(tmp_path / "provider.toml"),
                            "--state-dir", str(state)])  # fmt: skip
    assert made.exit_code == 0, made.output
    wallet = Wallet.of(load_key(state), Network.TESTNET)
    await fund(devnet, wallet.address, 1_000 * ADA)

    async def bond(*args: str, code: int = 0):
        command = ["provider", "bond", *args, "--ogmios-url", devnet.url,
                   "--deployment", str(deployment_path), "--state-dir", str(state)]  # fmt: skip
        # in a thread: the command runs its own event loop
        result = await asyncio.to_thread(cli.invoke, app, command)
        assert result.exit_code == code, result.output
        return result

    return wallet, bond, OwnTransactions.in_state_dir(state), state


def on_chain(devnet, deployment, wallet):
    """The provider's bond UTxOs as the chain has them."""
    found = bonds.bonds_of(devnet.context(), deployment, wallet.address, wallet.vkey)
    return [utxo for utxo, _ in found]


def fee(output: str) -> int:
    return int(re.search(r"\(fee (\d+) lovelace\)", output)[1])


async def test_a_bond_lives_from_create_to_withdraw_through_the_cli(devnet, deployment, provider):
    wallet, bond, own, _ = provider
    assert "no bond: post one with" in (await bond("show")).stdout

    created = await bond("create", "400ADA")
    [utxo] = on_chain(devnet, deployment, wallet)
    datum = bonds.bond_datum(deployment, utxo)
    assert utxo.output.amount.coin == 400 * ADA
    assert datum.provider_vkey == wallet.vkey and datum.unbonding_since == Nothing()
    assert f"bond {out_ref(utxo)}: 400.000000 ADA, active" in created.stdout
    refused = await bond("create", "10ADA", code=1)
    assert f"already has a bond ({out_ref(utxo)}, 400.000000 ADA)" in refused.stderr

    topped = await bond("top-up", "50.5ada")
    [utxo] = on_chain(devnet, deployment, wallet)
    assert utxo.output.amount.coin == 450_500_000
    assert "is not unbonding: give notice" in (await bond("withdraw", code=1)).stderr

    unbonding = await bond("unbond")
    [utxo] = on_chain(devnet, deployment, wallet)
    since = bonds.bond_datum(deployment, utxo).unbonding_since
    assert isinstance(since, Just) and utxo.output.amount.coin == 450_500_000
    clock = Clock.now(devnet.context())
    opens = clock.iso_slot(clock.first_slot_at(since.value + NOTICE_MS))
    # the datum's start is the transaction's validity bound, ahead of the chain: not shown as
    # the time the notice began
    given = re.search(r"notice given at (\S+) chain time", unbonding.stdout)
    assert given and given[1] <= iso(clock.tip_ms) < iso(since.value), unbonding.stdout
    assert f"counts from {iso(since.value)}, its transaction's validity bound), withdrawable at "\
           f"{opens}" in unbonding.stdout  # fmt: skip
    assert "unbonding since" not in unbonding.stdout
    early = await bond("withdraw", code=1)
    assert early.stderr.strip() == f"bond still unbonding: withdrawable at {opens}"
    assert "withdrawable at" in (await bond("show")).stdout

    await travel_to(devnet, since.value + NOTICE_MS)
    assert "withdrawable now" in (await bond("show")).stdout
    before = balance(devnet, wallet.address)
    withdrawn = await bond("withdraw")
    assert on_chain(devnet, deployment, wallet) == []
    assert balance(devnet, wallet.address) - before == 450_500_000 - fee(withdrawn.stdout)
    assert "no bond" in (await bond("show")).stdout
    # the four moves' fees, and only they, count against the net income (the deposit came back)
    fees = [fee(result.stdout) for result in (created, topped, unbonding, withdrawn)]
    assert [(t.kind, t.fee) for t in own.all()] == [("bond", f) for f in fees]
    assert own.income(payouts=0, claimed=0).net == -sum(fees)


async def test_a_sealed_provider_key_signs_only_with_its_passphrase(
    devnet, deployment, provider, tmp_path, monkeypatch
):
    """The provider's key sealed by `unchained key seal`: without the passphrase a bond command
    is refused before anything is signed; with it in a file (a service's credential) the bond
    is posted from that key."""
    wallet, bond, _, state = provider
    secret = tmp_path / "passphrase"
    secret.write_text("a provider's passphrase\n")
    monkeypatch.setenv(PASSPHRASE_FILE_VARIABLE, str(secret))
    sealed = cli.invoke(app, ["key", "seal", str(key_path(state)), "--strength", "interactive"])
    assert sealed.exit_code == 0, sealed.output
    assert wallet.key.to_json() not in key_path(state).read_text()

    monkeypatch.delenv(PASSPHRASE_FILE_VARIABLE)
    refused = await bond("create", "100ADA", code=1)
    assert f"set {PASSPHRASE_VARIABLE} or {PASSPHRASE_FILE_VARIABLE}" in refused.stderr
    assert on_chain(devnet, deployment, wallet) == []
    monkeypatch.setenv(PASSPHRASE_FILE_VARIABLE, str(secret))
    await bond("create", "100ADA")
    [utxo] = on_chain(devnet, deployment, wallet)
    assert bonds.bond_datum(deployment, utxo).provider_vkey == wallet.vkey


async def test_with_two_bonds_a_command_asks_which_one(devnet, deployment, provider):
    wallet, bond, _, _ = provider
    await bond("create", "100ADA")
    # a second bond, posted past the CLI's one-bond rule with the protocol builder itself
    created = bonds.create(devnet.context(), deployment, wallet.address, wallet.vkey, 20 * ADA)
    await confirm(devnet, wallet.sign(created))
    second = min(on_chain(devnet, deployment, wallet), key=lambda u: u.output.amount.coin)
    asked = await bond("top-up", "1ADA", code=2)
    assert "this provider has 2 bonds" in asked.stderr and "pick one with --bond" in asked.stderr
    await bond("top-up", "1ADA", "--bond", out_ref(second))
    amounts = sorted(u.output.amount.coin for u in on_chain(devnet, deployment, wallet))
    assert amounts == [21 * ADA, 100 * ADA]
    unknown = await bond("unbond", "--bond", out_ref(second), code=1)  # spent by the top-up
    assert "is not a bond of this provider" in unknown.stderr


async def test_amounts_need_their_unit_and_the_chain_and_files_must_answer(
    devnet, deployment_path, provider, tmp_path
):
    _, bond, _, _ = provider
    for amount, message in (
        ("400", "expected an amount with its unit, like 400ADA"),
        ("1.0000001ADA", "amounts are 6 decimals of ADA at most"),
        ("0lovelace", "the amount must be positive"),
    ):
        assert message in (await bond("create", amount, code=2)).stderr
    poor = await bond("create", "2000ADA", code=1)  # the fixture funded 1,000 ADA
    assert "holds 1,000.000000 ADA, less than 2,000.000000 ADA and the fee" in poor.stderr
    record = json.loads(deployment_path.read_text())
    elsewhere, altered = tmp_path / "elsewhere.json", tmp_path / "altered.json"
    elsewhere.write_text(json.dumps({**record, "escrow_ref": "ab" * 32 + "#0"}))
    altered.write_text(json.dumps({**record, "notice_ms": 1}))  # not what the bond was made with
    good_url, good_file = devnet.url, str(deployment_path)
    for (url, path, state), code, message in (
        (("ws://127.0.0.1:1", good_file, "state"), 1, "cannot reach Ogmios at ws://127.0.0.1:1"),
        ((good_url, str(tmp_path / "none.json"), "state"), 2, "no deployment file at"),
        ((good_url, str(elsewhere), "state"), 2, f"escrow_ref {'ab' * 32}#0 is not on this chain"),
        ((good_url, str(altered), "state"), 2, "validators are not the ones this version"),
        ((good_url, good_file, "nokey"), 1, "run `unchained provider init` first"),
    ):
        command = ["provider", "bond", "show", "--ogmios-url", url, "--deployment", path,
                   "--state-dir", str(tmp_path / state)]  # fmt: skip
        result = await asyncio.to_thread(cli.invoke, app, command)
        assert result.exit_code == code and message in result.stderr, result.output


async def test_a_cold_owner_alone_unbonds_and_withdraws_through_the_cli(
    devnet, deployment, deployment_path, tmp_path
):
    """`provider init --payout-address` names a cold wallet: the hot key posts and tops up
    the bond (owned by the cold address), but only the cold key file given with `--owner-key`
    gives notice and withdraws, to the cold address, each paying its own fee; `--unsigned-tx`
    writes the notice for the cold wallet to sign instead. To the lovelace."""
    cold = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET)
    await fund(devnet, cold.address, 10 * ADA)  # its own fees
    config, state = tmp_path / "provider.toml", tmp_path / "state"
    init = ["provider", "init", "--config", str(config), "--state-dir", str(state)]
    mainnet = str(Address(cold.key_hash, network=Network.MAINNET))
    for wrong, message in (("addr_test1nothing", "is not a Cardano address"),
                           (mainnet, "is an address of mainnet, not of testnet")):  # fmt: skip
        refused = cli.invoke(app, [*init, "--payout-address", wrong])
        assert refused.exit_code == 2 and message in refused.output, refused.output
        assert not config.exists()
    made = cli.invoke(app, [*init, "--payout-address", str(cold.address)])
    assert made.exit_code == 0, made.output
    assert f'payout_address = "{cold.address}"' in config.read_text()
    hot = Wallet.of(load_key(state), Network.TESTNET)
    await fund(devnet, hot.address, 1_000 * ADA)
    own = OwnTransactions.in_state_dir(state)

    async def bond(*args: str, code: int = 0):
        command = ["provider", "bond", *args, "--ogmios-url", devnet.url, "--deployment",
                   str(deployment_path), "--config", str(config)]  # fmt: skip
        result = await asyncio.to_thread(cli.invoke, app, command)
        assert result.exit_code == code, result.output
        return result

    def the_bond():
        [(utxo, datum)] = bonds.bonds_of(devnet.context(), deployment, cold.address, hot.vkey)
        return utxo, datum

    hot_start, cold_start = balance(devnet, hot.address), balance(devnet, cold.address)
    created = await bond("create", "100ADA")
    topped = await bond("top-up", "1ADA")
    utxo, datum = the_bond()
    assert datum.provider == to_plutus(cold.address) and utxo.output.amount.coin == 101 * ADA
    assert utxo.output.address == deployment.bond_address(cold.address)
    assert f"bond owner and payout address: {cold.address}" in (await bond("show")).stdout

    refused = await bond("unbond", code=1)
    assert f"the bond is owned by {cold.address}, not by the provider key" in refused.stderr
    stranger = tmp_path / "stranger.skey"
    stranger.write_text(PaymentSigningKey.generate().to_json())
    refused = await bond("unbond", "--owner-key", str(stranger), code=1)
    assert "the key given does not own the bond" in refused.stderr
    written = tmp_path / "unbond.tx"
    await bond("unbond", "--unsigned-tx", str(written))
    unsigned = Transaction.from_cbor(written.read_text().strip())
    assert unsigned.transaction_body.required_signers == [cold.key_hash]
    assert the_bond()[1].unbonding_since == Nothing()  # written, not submitted

    owner_key = tmp_path / "cold.skey"
    owner_key.write_text(cold.key.to_json())
    unbonding = await bond("unbond", "--owner-key", str(owner_key))
    utxo, datum = the_bond()
    assert isinstance(datum.unbonding_since, Just) and utxo.output.amount.coin == 101 * ADA
    await travel_to(devnet, datum.unbonding_since.value + NOTICE_MS)
    assert "the bond is owned by" in (await bond("withdraw", code=1)).stderr
    withdrawn = await bond("withdraw", "--owner-key", str(owner_key))
    assert f"withdrew 101.000000 ADA to {cold.address}" in withdrawn.stdout
    assert bonds.bonds_of(devnet.context(), deployment, cold.address, hot.vkey) == []

    hot_fees = fee(created.stdout) + fee(topped.stdout)
    cold_fees = fee(unbonding.stdout) + fee(withdrawn.stdout)
    assert balance(devnet, hot.address) - hot_start == -101 * ADA - hot_fees
    assert balance(devnet, cold.address) - cold_start == 101 * ADA - cold_fees
    assert own.income(payouts=0, claimed=0).net == -(hot_fees + cold_fees)
