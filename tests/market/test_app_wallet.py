"""The market's API for a browser wallet (CIP-30), on the devnet: transactions built from the
wallet's own UTxOs (spread over two addresses of one key), signed as a wallet signs them (a
witness set: pycardano here, `signTx(tx, true)` in a browser) and submitted through the
market; what the page sends is never trusted. One market for the module (SQLite), leading:
its follower funds the jobs and indexes the channels."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    StakeSigningKey,
    Transaction,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionWitnessSet,
    UTxO,
    VerificationKeyWitness,
)

from offchain.market.errors import Invalid
from offchain.market.models import Job
from offchain.market.schemas import MAX_WALLET_UTXOS
from offchain.market.services import wallet_txs
from offchain.market.settings import MarketSettings
from offchain.protocol.job.jobspec import JobSpecError, load_jobspec
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.ledger.split import slash_share
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.txbuild import Wallet
from tests.market.client import Party, serve
from tests.market.conftest import IDENTITY
from tests.market.database import served_at_head
from tests.market.flow import (
    Locked,
    accept,
    leader_settings,
    provider_with_offer,
    stored,
    wait_for,
)
from tests.market.test_lifecycle import SPEC
from tests.protocol.onchain import fund, post_bond, travel_to

pytestmark = pytest.mark.devnet


class Market:
    def __init__(self, settings: MarketSettings, http: httpx.AsyncClient, provider: Party):
        self.settings, self.http, self.provider = settings, http, provider


@pytest.fixture(scope="module")
async def market(devnet, market_deployment, tmp_path_factory) -> AsyncIterator[Market]:
    tmp = tmp_path_factory.mktemp("app-wallet")
    deployment_file.save(market_deployment, tmp / "deployment.json")
    settings = MarketSettings(
        data_dir=tmp / "market", ogmios_url=devnet.url, deployment=tmp / "deployment.json",
        identity=IDENTITY, result_limit_bytes=1 << 20, quote_ttl_ms=60_000,
        settle_window_ms=10 * 60_000,
    )  # fmt: skip
    settings, _ = await leader_settings(settings, devnet, tmp)
    with serve(served_at_head(settings)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, IDENTITY)
            yield Market(settings, http, provider)


class Browser:
    """A wallet as a page sees it: one payment key at two addresses (enterprise, and staked
    as the change address), its UTxOs as getUtxos() gives them, witness sets from signTx."""

    def __init__(self, market: Market, key: PaymentSigningKey) -> None:
        vkh = key.to_verification_key().hash()
        stake = StakeSigningKey.generate().to_verification_key().hash()
        self.key = key
        self.plain = Address(vkh, network=Network.TESTNET)
        self.change = Address(vkh, stake, network=Network.TESTNET)
        self.party = Party(Wallet(key, self.plain), market.http, IDENTITY)

    def utxos(self, devnet) -> list[UTxO]:
        context = devnet.context()
        return [*context.utxos(self.plain), *context.utxos(self.change)]

    def funds(self, devnet) -> dict[str, Any]:
        return {"utxos": [u.to_cbor_hex() for u in self.utxos(devnet)],
                "change_address": bytes(self.change).hex()}  # fmt: skip

    def balance(self, devnet) -> int:
        return sum(u.output.amount.coin for u in self.utxos(devnet))

    def witness_set(self, tx_hex: str, key: PaymentSigningKey | None = None) -> str:
        key = key or self.key
        tx = Transaction.from_cbor(bytes.fromhex(tx_hex))
        witness = VerificationKeyWitness(key.to_verification_key(), key.sign(tx.id.payload))
        return TransactionWitnessSet(vkey_witnesses=[witness]).to_cbor_hex()

    async def send(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return await self.party.send(method, path, body)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        answer = await self.send(method, path, body)
        assert answer.status_code in (200, 201), answer.text
        return answer.json()

    async def quote(self) -> dict[str, Any]:
        request = {"spec": {**SPEC, "max_duration_s": 60}, "consumer_address": str(self.plain)}
        return await self.ok("POST", "/jobs", request)

    def signed(self, built: dict[str, Any], key: PaymentSigningKey | None = None) -> dict:
        """A submit's body: the transaction as built and a witness set of it by `key`."""
        tx_hex = built["transaction"]
        return {"transaction": tx_hex, "witness_set": self.witness_set(tx_hex, key)}

    async def signed_submit(self, path: str, built: dict[str, Any]) -> dict[str, Any]:
        return await self.ok("POST", path, self.signed(built))


async def browser(devnet, market: Market, *amounts: int) -> Browser:
    """A new wallet: one UTxO of each amount, alternately at its plain and staked address."""
    made = Browser(market, PaymentSigningKey.generate())
    for index, lovelace in enumerate(amounts):
        await fund(devnet, made.change if index % 2 else made.plain, lovelace)
    return made


def refused(answer: httpx.Response, status: int, field: str, fragment: str) -> None:
    assert answer.status_code == status, answer.text
    problem = answer.json()["detail"][0]
    assert ".".join(map(str, problem["loc"])) == field and fragment in problem["msg"], problem


async def confirmed(devnet, tx_id: str) -> None:
    """Until the transaction's outputs are on chain (a block or two)."""
    for _ in range(300):
        if devnet.context().utxo_by_tx_id(tx_id, 0) is not None:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{tx_id} never confirmed")


async def locked(devnet, market: Market, wallet: Browser) -> tuple[str, dict[str, Any]]:
    """A job quoted, locked from the wallet's UTxOs through the market, and funded."""
    job = (await wallet.quote())["job_id"]
    built = await wallet.ok("POST", f"/jobs/{job}/lock/build", wallet.funds(devnet))
    await wallet.signed_submit(f"/jobs/{job}/lock", built)
    await wait_for(wallet.party, job, "funded")
    return job, built


def outputs(built: dict[str, Any]) -> list[tuple[str, int]]:
    tx = Transaction.from_cbor(bytes.fromhex(built["transaction"]))
    return [(str(o.address), o.amount.coin) for o in tx.transaction_body.outputs]


async def test_config_and_spec_check_as_the_cli_reads_a_spec(market, market_deployment, tmp_path):
    config = (await market.http.get("/api/app/config")).json()
    assert config["market"] == IDENTITY and config["network_id"] == 0
    assert config["escrow_hash"] == market_deployment.escrow_hash.payload.hex()
    assert config["escrow_address"] == str(market_deployment.escrow_address())
    assert config["settle_hash"] == market_deployment.settle_hash.payload.hex()
    for text in ("image: x\ncommand: [1]\nmax_duration_s: -1\nwhat: 2\n", "image: [", "[]",
                 '{"image": "python:3.11", "command": ["true"], "max_duration_s": 0}'):  # fmt: skip
        (tmp_path / "spec.yaml").write_text(text)
        with pytest.raises(JobSpecError) as cli:
            load_jobspec(tmp_path / "spec.yaml")
        checked = (await market.http.post("/api/app/spec/check", json={"text": text})).json()
        assert not checked["ok"] and checked["spec"] is None
        assert "\n".join(checked["messages"]) == str(cli.value).split("\n", 1)[1]
    good = (await market.http.post("/api/app/spec/check", json={"text": str(SPEC)})).json()
    assert good["ok"] and good["kind"] == "job" and good["messages"] == []
    assert good["spec_digest"] == load_jobspec_text(tmp_path, str(SPEC)).job_id().hex()
    too_long = await market.http.post("/api/app/spec/check", json={"text": "x" * 70_000})
    assert too_long.status_code == 422
    # what POST /jobs would refuse of a spec the CLI reads is refused here too, no 500
    nul = {"text": str(SPEC).replace("print('hello')", "\\u0000")}
    checked = (await market.http.post("/api/app/spec/check", json=nul)).json()
    assert checked["messages"] == ["a string holds NUL (\\u0000), which no process can be given"]
    raw = b'{"text": "\\ud800: 1"}'  # a lone surrogate, as JSON can escape one
    headers = {"content-type": "application/json"}
    surrogate = await market.http.post("/api/app/spec/check", content=raw, headers=headers)
    assert surrogate.status_code == 422


def load_jobspec_text(tmp_path, text: str):
    (tmp_path / "good.yaml").write_text(text)
    return load_jobspec(tmp_path / "good.yaml")


async def test_a_lock_from_wallet_utxos_over_two_addresses(devnet, market):
    wallet = Browser(market, PaymentSigningKey.generate())
    quote = await wallet.quote()
    lock = quote["lock_lovelace"]
    part = lock // 3 + ADA  # no two of three such UTxOs pay the lock, its fee and change
    for index in range(3):
        await fund(devnet, wallet.change if index == 1 else wallet.plain, part)
    before = wallet.balance(devnet)
    job = quote["job_id"]
    built = await wallet.ok("POST", f"/jobs/{job}/lock/build", wallet.funds(devnet))
    assert built["quoted_lovelace"] == lock and built["lovelace"] == lock
    tx = Transaction.from_cbor(bytes.fromhex(built["transaction"]))
    spent = set(tx.transaction_body.inputs)
    assert spent == {u.input for u in wallet.utxos(devnet)}  # both addresses, nothing else
    assert outputs(built) == [
        (built["escrow_address"], lock),
        (str(wallet.change), 3 * part - lock - built["fee"]),
    ]
    assert built["fee"] == tx.transaction_body.fee
    # another key's witness set is refused; the renter's is taken
    stranger = wallet.signed(built, PaymentSigningKey.generate())
    refused(await wallet.send("POST", f"/jobs/{job}/lock", stranger), 422, "transaction",
            "not signed by the consumer's payment key")  # fmt: skip
    forged = {
        "transaction": built["transaction"],
        "witness_set": wallet.witness_set(quote_tx_hex(built)),
    }
    refused(await wallet.send("POST", f"/jobs/{job}/lock", forged), 422, "witness_set",
            "does not sign this transaction")  # fmt: skip
    submitted = await wallet.signed_submit(f"/jobs/{job}/lock", built)
    assert submitted["tx_id"] == built["tx_id"] and submitted["escrow"] == built["escrow"]
    await wait_for(wallet.party, job, "funded")
    assert wallet.balance(devnet) == before - lock - built["fee"]


def quote_tx_hex(built: dict[str, Any]) -> str:
    """Another transaction than the one built (its fee one lovelace more): a witness over it
    signs something else."""
    tx = Transaction.from_cbor(bytes.fromhex(built["transaction"]))
    tx.transaction_body.fee += 1
    return tx.to_cbor_hex()


async def test_utxos_spent_forged_or_foreign_are_refused_and_nothing_recorded(devnet, market):
    wallet = await browser(devnet, market, 100 * ADA)
    job = (await wallet.quote())["job_id"]
    funds = wallet.funds(devnet)
    real = UTxO.from_cbor(bytes.fromhex(funds["utxos"][0]))
    forged = UTxO.from_cbor(bytes.fromhex(funds["utxos"][0]))
    forged.output.amount.coin += 1000 * ADA
    other = await browser(devnet, market, 50 * ADA)
    cases = [
        ([forged.to_cbor_hex()], 409, "utxos.0", "not the output the chain holds"),
        ([real.to_cbor_hex(), real.to_cbor_hex()], 422, "utxos.1", "named twice"),
        ([other.funds(devnet)["utxos"][0]], 422, "utxos.0", "not at an address of the key"),
        (["00ff"], 422, "utxos.0", "not a TransactionUnspentOutput"),
        (
            [UTxO(TransactionInput(real.input.transaction_id, 1 << 16), real.output).to_cbor_hex()],
            422,
            "utxos.0",
            "not an output's",
        ),
    ]
    job2 = (await wallet.quote())["job_id"]
    for utxos, status, field, fragment in cases:
        body = {**funds, "utxos": utxos}
        refused(await wallet.send("POST", f"/jobs/{job2}/lock/build", body), status, field,
                fragment)  # fmt: skip
    assert stored(market.settings, Job, Job.id == job2)[0].lock_tx_id is None
    # the wallet spends its UTxO elsewhere: a build naming it is refused, nothing recorded
    job3 = (await wallet.quote())["job_id"]
    built = await wallet.ok("POST", f"/jobs/{job}/lock/build", funds)
    await wallet.signed_submit(f"/jobs/{job}/lock", built)
    await confirmed(devnet, built["tx_id"])
    refused(await wallet.send("POST", f"/jobs/{job3}/lock/build", funds), 409, "utxos.0",
            "not an unspent output on chain")  # fmt: skip
    assert stored(market.settings, Job, Job.id == job3)[0].lock_tx_id is None
    # a lock is no channel transaction: the market submits only what its step built
    refused(await wallet.send("POST", "/api/app/channels/submit", wallet.signed(built)), 422,
            "transaction", "not a channel transaction")  # fmt: skip
    too_many = {**funds, "utxos": funds["utxos"] * (MAX_WALLET_UTXOS + 1)}
    assert (await wallet.send("POST", f"/jobs/{job3}/lock/build", too_many)).status_code == 422


async def test_cancel_through_the_market_to_the_lovelace(devnet, market):
    wallet = await browser(devnet, market, 60 * ADA, 30 * ADA)
    start = wallet.balance(devnet)
    job, lock = await locked(devnet, market, wallet)
    built = await wallet.ok("POST", f"/jobs/{job}/cancel/build", wallet.funds(devnet))
    assert built["escrow"] == lock["escrow"]
    early = wallet.signed(built)
    refused(await wallet.send("POST", f"/jobs/{job}/cancel/submit", early), 409, "state",
            "not signed by its provider")  # fmt: skip
    await wallet.ok("POST", f"/jobs/{job}/cancel", {"transaction": built["transaction"]})
    signature = market.provider.wallet.key.sign(bytes.fromhex(built["tx_id"])).hex()
    answer = {"action": "signed", "signature": signature}
    answered = await market.provider.send("POST", f"/jobs/{job}/cancel/answer", answer)
    assert answered.status_code == 200, answered.text
    view = await wallet.ok("GET", f"/jobs/{job}/cancel")
    assert view["state"] == "signed"
    submitted = await wallet.signed_submit(f"/jobs/{job}/cancel/submit",
                                           {"transaction": view["transaction"]})  # fmt: skip
    assert submitted["tx_id"] == built["tx_id"]
    await wait_for(wallet.party, job, "cancelled")
    assert wallet.balance(devnet) == start - lock["fee"] - built["fee"]


async def test_refund_slash_and_a_channel_through_the_market_to_the_lovelace(
    devnet, market, market_deployment
):
    wallet = await browser(devnet, market, 60 * ADA, 60 * ADA, 30 * ADA)
    start = wallet.balance(devnet)
    job, lock = await locked(devnet, market, wallet)
    # a second job its provider accepts (backed by its bond), then never delivers
    slashed, slash_lock = await locked(devnet, market, wallet)
    bond = await post_bond(devnet, market_deployment, market.provider.wallet)
    lock_tx = Transaction.from_cbor(bytes.fromhex(slash_lock["transaction"]))
    await accept(market.provider, market_deployment, Locked(slashed, wallet.party, lock_tx, {}))
    refused(await wallet.send("POST", f"/jobs/{job}/refund/build", wallet.funds(devnet)), 409,
            "utxos", "refundable at")  # fmt: skip
    # a channel from the same wallet, to the market's provider, opened and topped up
    provider_id = market.provider.wallet.key_hash.payload.hex()
    opening = {"provider_id": provider_id, "deposit": 5 * ADA, "close_period_ms": 60_000,
               "funds": wallet.funds(devnet)}  # fmt: skip
    opened = await wallet.ok("POST", "/api/app/channels/open/build", opening)
    assert (opened["channel_address"], opened["lovelace"]) in outputs(opened)
    await wallet.signed_submit("/api/app/channels/submit", opened)
    channel = opened["channel_id"]
    await indexed(market, channel, lambda row: row["funded"] == opened["lovelace"])
    topping = {"lovelace": 2 * ADA, "funds": wallet.funds(devnet)}
    topped = await wallet.ok("POST", f"/api/app/channels/{channel}/top-up/build", topping)
    await wallet.signed_submit("/api/app/channels/submit", topped)
    await indexed(market, channel, lambda row: row["funded"] == opened["lovelace"] + 2 * ADA)
    closing = await wallet.ok("POST", f"/api/app/channels/{channel}/close/build",
                              wallet.funds(devnet))  # fmt: skip
    assert closing["step"] == "start_close"
    await wallet.signed_submit("/api/app/channels/submit", closing)
    row = await indexed(market, channel, lambda row: row["state"] == "closing")
    # past the escrow's close and the channel's close period: refund and drain
    deadline = (await wallet.ok("GET", f"/jobs/{slashed}"))["deadline_ms"]
    await travel_to(devnet, max(deadline + market.settings.settle_window_ms,
                                row["closing_at_ms"]) + 1)  # fmt: skip
    await asyncio.sleep(1.1)  # past pycardano's one-second cache of the tip
    refund = await wallet.ok("POST", f"/jobs/{job}/refund/build", wallet.funds(devnet))
    stranger = wallet.signed(refund, PaymentSigningKey.generate())
    refused(await wallet.send("POST", f"/jobs/{job}/refund/submit", stranger), 422,
            "witness_set", "not signed by your payment key")  # fmt: skip
    await wallet.signed_submit(f"/jobs/{job}/refund/submit", refund)
    await wait_for(wallet.party, job, "refunded")
    slash_body = {**wallet.funds(devnet), "slash": True}
    slash = await wallet.ok("POST", f"/jobs/{slashed}/refund/build", slash_body)
    await wallet.signed_submit(f"/jobs/{slashed}/refund/submit", slash)
    await wait_for(wallet.party, slashed, "slashed")
    share = slash_share(bond.output.amount.coin, market_deployment.slash_share_bps)
    drain = await wallet.ok("POST", f"/api/app/channels/{channel}/close/build",
                            wallet.funds(devnet))  # fmt: skip
    assert drain["step"] == "drain"
    await wallet.signed_submit("/api/app/channels/submit", drain)
    await indexed(market, channel, lambda row: row["state"] == "drained")
    fees = lock["fee"] + refund["fee"] + opened["fee"] + topped["fee"] + closing["fee"]
    fees += slash_lock["fee"] + slash["fee"] + drain["fee"]
    assert wallet.balance(devnet) == start - fees + share


async def indexed(market: Market, channel: str, done) -> dict[str, Any]:
    """The channel's row in the market's index once `done(row)`."""
    for _ in range(300):
        answer = await market.http.get(f"/api/explorer/channels/{channel}")
        if answer.status_code == 200 and done(answer.json()["channel"]):
            return answer.json()["channel"]
        await asyncio.sleep(0.1)
    raise AssertionError(f"channel {channel} never got there: {answer.text}")


def test_a_witness_set_that_is_not_one_is_a_422_naming_it():
    key = PaymentSigningKey.generate()
    body = TransactionBody(inputs=[TransactionInput(TransactionId(bytes(32)), 0)], outputs=[],
                           fee=170_000)  # fmt: skip
    tx = Transaction(body, TransactionWitnessSet()).to_cbor_hex()
    wallet = Browser.__new__(Browser)
    wallet.key = key
    assert wallet_txs.witnessed(tx, wallet.witness_set(tx)) != tx
    for garbage, fragment in (("00", "not a witness set"), ("a0", "no key witness"),
                              ("zz", "not a witness set"),
                              (wallet.witness_set(quote_tx_hex({"transaction": tx})),
                               "does not sign")):  # fmt: skip
        with pytest.raises(Invalid, match=fragment) as refused_:
            wallet_txs.witnessed(tx, garbage)
        assert refused_.value.field == "witness_set"
    with pytest.raises(Invalid, match="not a transaction"):
        wallet_txs.witnessed("00", wallet.witness_set(tx))
