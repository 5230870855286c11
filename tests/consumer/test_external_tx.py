"""Every renter command that signs a transaction, signed by a wallet outside the CLI: the CLI
holds only the renter's verification key (`--key` a `.vkey`), each command's `--unsigned-tx
FILE` writes the transaction, the wallet (pycardano with the renter's own key, as a wallet
would) signs it and hands back a CIP-30 witness set or the whole signed transaction (hex or a
cardano-cli TextEnvelope), and `unchained tx submit TXID SIGNED` submits it and finishes the
command. Balances to the lovelace as the in-process path leaves them (tests/consumer/
test_channels_cli.py, test_sdk.py); every wrong file refused with nothing moved."""

from __future__ import annotations

import asyncio
import json
from asyncio.subprocess import PIPE
from pathlib import Path

from pycardano import (
    NonEmptyOrderedSet,
    PaymentSigningKey,
    Transaction,
    TransactionOutput,
    TransactionWitnessSet,
    VerificationKeyWitness,
)

from consumer.sdk.store import JobStore
from offchain.chain.follower import tip_point
from offchain.protocol.job.jobspec import parse_jobspec
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.ledger.split import refund_amount, slash_share
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.txbuild import Clock, sign_tx
from tests.consumer.cli import UNCHAINED, cli_env, funded_key, run_json, tx_fee
from tests.consumer.test_channels_cli import on_chain
from tests.consumer.test_sdk import SPEC, travel_past
from tests.consumer.test_wallet_flow import text_envelope, witness_set
from tests.protocol.conftest import SLASH_SHARE_BPS
from tests.protocol.onchain import balance, fund

DEPOSIT = 10 * ADA
TOP_UP = 5 * ADA
FORMS = ("witness", "hex", "envelope")


def wallet_env(env: dict[str, str], key: PaymentSigningKey, folder: Path) -> dict[str, str]:
    """The CLI's environment with only the key's verification half (the wallet keeps the
    signing key)."""
    path = folder / "renter.vkey"
    if not path.exists():
        key.to_verification_key().save(str(path))
    return {**env, "UNCHAINED_CONSUMER_KEY": str(path)}


def unsigned_at(path: Path) -> Transaction:
    return Transaction.from_cbor(bytes.fromhex(path.read_text()))


def sign_outside(folder: Path, unsigned_file: str, key: PaymentSigningKey, form: str) -> str:
    """What the wallet hands back for `unsigned_file`, in `form`, written beside it; its name."""
    unsigned = unsigned_at(folder / unsigned_file)
    whole = sign_tx(unsigned, key)  # the transaction's own witnesses (scripts, redeemers) kept
    text = {"witness": witness_set(unsigned, key).to_cbor_hex(), "hex": whole.to_cbor_hex(),
            "envelope": text_envelope(whole)}[form]  # fmt: skip
    name = f"{unsigned_file}.{form}"
    (folder / name).write_text(text)
    return name


def submit(env: dict[str, str], folder: Path, tx_id: str, name: str) -> dict:
    code, done = run_json(env, "tx", "submit", tx_id[:16], name, cwd=folder)
    assert code == 0, done
    return done


def round_trip(
    env: dict[str, str], folder: Path, key: PaymentSigningKey, form: str, name: str, kind: str,
    *command: str,
) -> tuple[dict, dict]:  # fmt: skip
    """`command` with `--unsigned-tx name` (a `kind` transaction), signed outside in `form`
    and submitted: what the command and `tx submit` said."""
    code, built = run_json(env, *command, "--unsigned-tx", name, cwd=folder)
    assert code == 0 and built["kind"] == kind, built
    return built, submit(env, folder, built["tx_id"], sign_outside(folder, name, key, form))


def refused(env: dict[str, str], folder: Path, tx_id: str, name: str, said: str) -> dict:
    code, error = run_json(env, "tx", "submit", tx_id[:16], name, cwd=folder)
    assert code == 1 and said in error["message"], (name, error)
    return error


async def test_channel_open_top_up_close_and_drain_signed_by_a_wallet(
    market, provider, devnet, consumer_deployment, tmp_path: Path
):
    funded, _ = await funded_key(devnet, tmp_path, 100 * ADA)
    await fund(devnet, funded.address, 20 * ADA)  # a second coin: two top-ups pending at once
    key = funded.key
    env = wallet_env(cli_env(market, devnet, tmp_path / "none", tmp_path / "state"), key,
                     tmp_path)  # fmt: skip
    offer = await provider.offer()
    since = await tip_point(devnet.url)
    start = balance(devnet, funded.address)
    held = 0  # lovelace in the renter's channels

    code, error = run_json(env, "channel", "open", "--provider", offer["provider_id"],
                           "--deposit", "10", "--yes", cwd=tmp_path)  # fmt: skip
    assert code == 1 and "--key is a verification key" in error["message"], error
    assert "--unsigned-tx" in error["message"]
    code, none = run_json(env, "channel", "list", "--local", cwd=tmp_path)
    assert code == 0 and none == [], none  # a refused open keeps no record

    ids, put, fees = {}, {}, 0
    for name, form in (("a", "witness"), ("b", "hex")):
        code, built = run_json(env, "channel", "open", "--provider", offer["provider_id"],
                               "--deposit", "10", "--close-period", "10min", "--unsigned-tx",
                               f"{name}-open", cwd=tmp_path)  # fmt: skip
        assert code == 0 and built["kind"] == "channel-open", built
        assert balance(devnet, funded.address) == start - fees - held  # nothing moved yet
        done = submit(env, tmp_path, built["tx_id"], sign_outside(tmp_path, f"{name}-open", key,
                                                                   form))  # fmt: skip
        assert (done["channel_id"], done["tx_id"]) == (built["channel_id"], built["tx_id"])
        live = on_chain(devnet.context(), consumer_deployment, funded.address)[done["channel_id"]]
        like = TransactionOutput(live.utxo.output.address, 0, datum=live.datum)
        assert done["locked"] == DEPOSIT + channels.return_deposit(devnet.context(), like)
        assert done["fee"] == built["fee"] == await tx_fee(devnet, done["tx_id"], since)
        fees, held = fees + done["fee"], held + done["locked"]
        assert balance(devnet, funded.address) == start - fees - held
        ids[name], put[name] = done["channel_id"], done["locked"]
    code, listed = run_json(env, "channel", "list", "--local", cwd=tmp_path)
    assert sorted(row["channel_id"] for row in listed) == sorted(ids.values())

    tops = {}
    for name in ids:
        code, tops[name] = run_json(env, "channel", "top-up", ids[name], "--amount", "5",
                                    "--unsigned-tx", f"{name}-top", cwd=tmp_path)  # fmt: skip
        assert code == 0, tops[name]
    mine, other = unsigned_at(tmp_path / "a-top"), unsigned_at(tmp_path / "b-top")
    tampered = Transaction.from_cbor(mine.to_cbor())
    tampered.transaction_body.fee += 1  # one lovelace more to the fee: another transaction
    stranger = PaymentSigningKey.generate()
    forged = VerificationKeyWitness(key.to_verification_key(), key.sign(other.id.payload))
    wrong = {
        "tampered": (sign_tx(tampered, key).to_cbor_hex(), "not the pending"),
        "stranger": (witness_set(mine, stranger).to_cbor_hex(),
                     "carries no valid signature by the renter's key"),
        "forged": (TransactionWitnessSet(vkey_witnesses=NonEmptyOrderedSet([VerificationKeyWitness(
            key.to_verification_key(), stranger.sign(mine.id.payload))])).to_cbor_hex(),
            "carries no valid signature by the renter's key"),
        "other-witness": (TransactionWitnessSet(vkey_witnesses=NonEmptyOrderedSet([forged]))
                          .to_cbor_hex(), f"sign pending transaction {tops['b']['tx_id']}"),
        "other-whole": (text_envelope(sign_tx(other, key)), "it is the pending channel-top-up"),
        "junk": ("d90102", "not a signed transaction"),
    }  # fmt: skip
    for name, (text, said) in wrong.items():
        (tmp_path / name).write_text(text)
        refused(env, tmp_path, tops["a"]["tx_id"], name, said)
    refused(env, tmp_path, "00" * 8, "junk", "no pending transaction")
    assert balance(devnet, funded.address) == start - fees - held
    code, waiting = run_json(env, "tx", "pending", cwd=tmp_path)  # both still there
    assert sorted(p["tx_id"] for p in waiting) == sorted(t["tx_id"] for t in tops.values())

    for name, form in (("a", "witness"), ("b", "envelope")):
        done = submit(env, tmp_path, tops[name]["tx_id"], sign_outside(tmp_path, f"{name}-top",
                                                                        key, form))  # fmt: skip
        assert (done["added"], done["deposit"]) == (TOP_UP, DEPOSIT + TOP_UP), done
        assert done["fee"] == await tx_fee(devnet, done["tx_id"], since)
        fees, held = fees + done["fee"], held + TOP_UP
        assert balance(devnet, funded.address) == start - fees - held
    replayed = refused(env, tmp_path, tops["a"]["tx_id"], "a-top.witness", "submitted already")
    assert replayed["error"] == "AlreadySubmitted"
    code, waiting = run_json(env, "tx", "pending", cwd=tmp_path)
    assert code == 0 and waiting == [], waiting
    code, spare = run_json(env, "channel", "top-up", ids["a"], "--amount", "1", "--unsigned-tx",
                           "spare", cwd=tmp_path)  # fmt: skip
    code, dropped = run_json(env, "tx", "drop", spare["tx_id"][:16], cwd=tmp_path)
    assert code == 0 and dropped["tx_id"] == spare["tx_id"], dropped
    refused(
        env,
        tmp_path,
        spare["tx_id"],
        sign_outside(tmp_path, "spare", key, "witness"),
        "no pending transaction",
    )  # a wallet's late answer: nothing submitted
    code, waiting = run_json(env, "tx", "pending", "--all", cwd=tmp_path)
    assert len(waiting) == 4 and all(p["submitted_ms"] for p in waiting), waiting
    assert balance(devnet, funded.address) == start - fees - held

    closing_at = {}
    for name, form in (("a", "witness"), ("b", "hex")):
        built, done = round_trip(env, tmp_path, key, form, f"{name}-close", "channel-close",
                                 "channel", "close", ids[name])  # fmt: skip
        assert done["how"] == "closing" and done["fee"] == built["fee"], done
        code, status = run_json(env, "channel", "status", ids[name], cwd=tmp_path)
        assert status["state"] == "closing" and status["closing_at"] == done["closing_at"]
        closing_at[name] = done["closing_at"]
        fees += await tx_fee(devnet, done["tx_id"], since)
        assert balance(devnet, funded.address) == start - fees - held

    await travel_past(devnet, max(closing_at.values()))
    for name, form in (("a", "witness"), ("b", "envelope")):
        _, done = round_trip(env, tmp_path, key, form, f"{name}-drain", "channel-drain",
                             "channel", "close", ids[name])  # fmt: skip
        assert done["how"] == "drained" and done["returned"] == put[name] + TOP_UP, done
        fees, held = fees + await tx_fee(devnet, done["tx_id"], since), held - done["returned"]
        assert balance(devnet, funded.address) == start - fees - held
    assert held == 0 and balance(devnet, funded.address) == start - fees  # to the lovelace
    code, listed = run_json(env, "channel", "list", cwd=tmp_path)
    assert code == 0 and {row["state"] for row in listed} == {"drained"}, listed
    assert all(row["closed_tx_id"] for row in listed)


async def test_refunds_signed_by_a_wallet(consumer, provider, market, devnet, tmp_path: Path):
    state = tmp_path / "consumer"  # the SDK consumer's records: it locked the jobs
    env = wallet_env(cli_env(market, devnet, tmp_path / "none", state), consumer.key.key,
                     tmp_path)  # fmt: skip
    await provider.offer(slots=4)
    start = balance(devnet, consumer.key.address)
    jobs = [await locked(consumer) for _ in range(2)]
    fees = sum(fee for _, fee in jobs)
    code, early = run_json(env, "job", "refund", jobs[0][0], "--unsigned-tx", "early", cwd=tmp_path)
    assert code == 1 and early["error"] == "NotRefundableYet", early
    store = JobStore(state)
    escrowed = sum(store.get(job).lovelace for job, _ in jobs)
    assert balance(devnet, consumer.key.address) == start - fees - escrowed
    await travel_past(devnet, max(store.get(job).datum.close for job, _ in jobs))

    for (job, _), form in zip(jobs, ("witness", "envelope"), strict=True):
        code, built = run_json(env, "job", "refund", job, "--unsigned-tx", f"{job}.refund",
                               cwd=tmp_path)  # fmt: skip
        assert code == 0 and (built["kind"], built["job_id"]) == ("refund", job), built
        assert balance(devnet, consumer.key.address) == start - fees - escrowed  # not yet
        answer = sign_outside(tmp_path, f"{job}.refund", consumer.key.key, form)
        done = submit(env, tmp_path, built["tx_id"], answer)
        assert (done["job_id"], done["tx_id"], done["fee"]) == (job, built["tx_id"], built["fee"])
        record = store.get(job)
        payout = unsigned_at(tmp_path / f"{job}.refund").transaction_body.outputs[0]
        assert payout.amount.coin == refund_amount(record.lovelace, record.datum.fee_allowance)
        # the payout, and as the submitter's change the allowance less the refund's fee
        fees, escrowed = fees + done["fee"], escrowed - record.lovelace
        assert balance(devnet, consumer.key.address) == start - fees - escrowed
    assert escrowed == 0 and balance(devnet, consumer.key.address) == start - fees  # as test_sdk
    refused(env, tmp_path, built["tx_id"], f"{job}.refund.envelope", "submitted already")


async def test_slashes_signed_by_a_wallet(consumer, provider, market, devnet, consumer_deployment,
                                          tmp_path: Path):  # fmt: skip
    await provider.bond(devnet)
    state = tmp_path / "consumer"
    signing = cli_env(market, devnet, tmp_path / "renter.skey", state)
    consumer.key.key.save(str(tmp_path / "renter.skey"))  # the slash reads the market: signed
    env = wallet_env(signing, consumer.key.key, tmp_path)
    await provider.offer(slots=4)
    start = balance(devnet, consumer.key.address)
    jobs = []
    for _ in range(2):
        job, fee = await locked(consumer)
        await provider.accept(await provider.assignment())
        jobs.append((job, fee))
    fees, shares = sum(fee for _, fee in jobs), 0
    store = JobStore(state)
    escrowed = sum(store.get(job).lovelace for job, _ in jobs)
    await travel_past(devnet, max(store.get(job).datum.close for job, _ in jobs))

    for (job, _), form in zip(jobs, ("witness", "hex"), strict=True):
        code, built = run_json(signing, "job", "slash", job, "--unsigned-tx", f"{job}.slash",
                               cwd=tmp_path)  # fmt: skip
        assert code == 0 and built["kind"] == "slash", built
        assert balance(devnet, consumer.key.address) == start - fees - escrowed + shares
        datum = store.get(job).datum
        provider_address = provider.party.wallet.address
        (bond, _), *_ = sorted(bonds.bonds_of(devnet.context(), consumer_deployment,
                                               provider_address, datum.provider_vkey),
                                key=lambda pair: -pair[0].output.amount.coin)  # fmt: skip
        answer = sign_outside(tmp_path, f"{job}.slash", consumer.key.key, form)
        done = submit(env, tmp_path, built["tx_id"], answer)
        assert (done["job_id"], done["fee"]) == (job, built["fee"]), done
        fees += done["fee"]
        shares += slash_share(bond.output.amount.coin, SLASH_SHARE_BPS)
        escrowed -= store.get(job).lovelace
        assert balance(devnet, consumer.key.address) == start - fees - escrowed + shares
    assert escrowed == 0  # as test_sdk's slash: start - fees + the shares, to the lovelace


async def locked(consumer) -> tuple[str, int]:
    """A job locked in process (the CLI's own test of that: test_sdk.py): its id and the
    lock's fee."""
    quote = await consumer.quote(parse_jobspec(SPEC))
    signed = consumer.key.sign(await consumer.build_lock(quote.job_id))
    await consumer.submit_lock(quote.job_id, signed)
    await asyncio.sleep(1.1)  # past pycardano's one-second cache of the tip: the change is read
    return quote.job_id, signed.transaction_body.fee


async def test_cancels_signed_by_a_wallet(consumer, provider, market, devnet, tmp_path: Path):
    state = tmp_path / "consumer"
    signing = cli_env(market, devnet, tmp_path / "renter.skey", state)
    consumer.key.key.save(str(tmp_path / "renter.skey"))  # the cancel's request is signed
    env = wallet_env(signing, consumer.key.key, tmp_path)
    await provider.offer(slots=4)
    start = balance(devnet, consumer.key.address)
    jobs = [await locked(consumer) for _ in range(2)]
    fees = sum(fee for _, fee in jobs)
    store = JobStore(state)
    escrowed = sum(store.get(job).lovelace for job, _ in jobs)

    for (job, _), form in zip(jobs, ("witness", "hex"), strict=True):
        asked = await asyncio.create_subprocess_exec(
            *UNCHAINED, "job", "cancel", job, "--unsigned-tx", f"{job}.cancel", "--json",
            env=signing, cwd=tmp_path, stdout=PIPE, stderr=PIPE,
        )  # fmt: skip
        await provider_signs_the_cancel(provider, job)
        out, err = await asyncio.wait_for(asked.communicate(), timeout=120)
        assert asked.returncode == 0, (out, err)
        built = json.loads(out)
        assert (built["kind"], built["job_id"]) == ("cancel", job), built
        unsigned = unsigned_at(tmp_path / f"{job}.cancel")
        assert len(unsigned.transaction_witness_set.vkey_witnesses) == 1  # the provider's
        assert balance(devnet, consumer.key.address) == start - fees - escrowed  # not yet
        done = submit(env, tmp_path, built["tx_id"],
                      sign_outside(tmp_path, f"{job}.cancel", consumer.key.key, form))  # fmt: skip
        assert (done["how"], done["tx_id"], done["fee"]) == ("cancelled", built["tx_id"],
                                                            built["fee"])  # fmt: skip
        fees, escrowed = fees + done["fee"], escrowed - store.get(job).lovelace
        assert done["returned"] == store.get(job).lovelace - done["fee"]
        assert balance(devnet, consumer.key.address) == start - fees - escrowed
    assert escrowed == 0 and balance(devnet, consumer.key.address) == start - fees


async def provider_signs_the_cancel(provider, job: str) -> None:
    """The provider's part, as its daemon plays it: the renter's standing Cancel, signed."""
    async with asyncio.timeout(60):
        while True:
            view = await provider.send("GET", f"/jobs/{job}/cancel")
            if view["state"] == "requested" and view["transaction"]:
                break
            await asyncio.sleep(0.2)
    tx = Transaction.from_cbor(bytes.fromhex(view["transaction"]))
    signature = provider.party.wallet.key.sign(tx.id.payload).hex()
    await provider.send("POST", f"/jobs/{job}/cancel/answer",
                        {"action": "signed", "signature": signature})  # fmt: skip


async def test_a_pending_transaction_past_its_ttl_frees_its_coins(
    market, provider, devnet, consumer_deployment, tmp_path: Path
):
    """A renter's one coin is held by a channel open its wallet never signed; once the chain
    passes that transaction's ttl it can never land, so the coin pays the next open, and the
    late signature is refused with nothing moved."""
    funded, _ = await funded_key(devnet, tmp_path, 100 * ADA)
    key = funded.key
    env = wallet_env(cli_env(market, devnet, tmp_path / "none", tmp_path / "state"), key,
                     tmp_path)  # fmt: skip
    offer = await provider.offer()
    opening = ("channel", "open", "--provider", offer["provider_id"], "--deposit", "10",
               "--close-period", "10min")  # fmt: skip
    code, first = run_json(env, *opening, "--unsigned-tx", "first", cwd=tmp_path)
    assert code == 0, first
    code, error = run_json(env, *opening, "--unsigned-tx", "second", cwd=tmp_path)
    assert code == 1, error  # its only coin waits for the wallet
    late = unsigned_at(tmp_path / "first")
    ttl = late.transaction_body.ttl
    assert ttl is not None
    await travel_past(devnet, Clock.now(devnet.context()).time.slot_to_posix_ms(ttl))

    code, second = run_json(env, *opening, "--unsigned-tx", "second", cwd=tmp_path)
    assert code == 0, second
    again = unsigned_at(tmp_path / "second").transaction_body.inputs
    assert set(again) & set(late.transaction_body.inputs)  # the coin the first one held
    before = balance(devnet, funded.address)
    signed = sign_outside(tmp_path, "first", key, "witness")
    code, refusal = run_json(env, "tx", "submit", first["tx_id"][:16], signed, cwd=tmp_path)
    assert code == 1, refusal
    assert balance(devnet, funded.address) == before
