"""Payment channel costs, measured on the devnet with the real builders and its
evaluateTransaction (issue 22).

- every channel action once (open, claim one, top up, start a close, drain, provider end,
  mutual close): memory, cpu, fee and size;
- `channels_per_claim_tx`: the largest batch claim within mainnet limits (16,384 bytes, 14M
  memory, 10B cpu), each channel its own renter (its own key: one IOU signature check each),
  one provider, every party with a payment and a stake credential; the batch's memory fitted
  as a + b n + c n^2 (`claim_memory_per_channel` is b) and its fee per channel;
- `iou_verify_per_s`: SignedIou.signed_by on one core (what a provider checks per request);
- a 1,000-request session paid by IOUs (one open, N claims, one provider end) against the
  same work as 1,000 escrows (one lock each, settled in the largest batch bench/contracts.py
  measured): fees, and the minimum UTxO each keeps locked.

Prints a table and writes bench/results/channels.json.
Run: .venv/bin/python -m bench.channels
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from ogmios.errors import ResponseError
from pycardano import PaymentSigningKey, ScriptHash, Transaction, TransactionOutput
from pycardano.exception import PyCardanoException

from bench.contracts import (
    Limits,
    Measure,
    cost,
    cost_rows,
    deployed,
    fit_memory,
    largest_batch,
    profile,
    wallet,
)
from devnet.genesis import ADA
from devnet.process import DevnetProcess
from offchain.chain.ogmios import OgmiosError
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.iou import SignedIou
from offchain.protocol.ledger.types import ChannelDatum, ChannelTerms, TxOutRef
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.channel import Channel
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import (
    SIZE_MARGIN,
    BuildError,
    Clock,
    Wallet,
    build,
    new_builder,
    sign_tx,
)
from tests.protocol.onchain import confirm, output, staked, travel_to

RESULTS = Path(__file__).parent / "results" / "channels.json"
CONTRACTS = RESULTS.with_name("contracts.json")  # bench/contracts.py's settle costs
TARGETS = {"channels_per_claim_tx": 60, "claim_memory_per_channel": 100_000}  # issue 22
DEPOSIT, CLAIM = 20 * ADA, 1 * ADA  # a benched channel's deposit, and what a claim takes
CLOSE_MS = 20_000
REQUESTS, PRICE_PER_REQUEST = 1_000, 10_000  # a session of 0.01 ADA requests (the issue's)
OPEN_PER_TX = 40  # channel outputs one funding transaction makes (full addresses)


def renter_iou(deployment: Deployment, renter: Wallet, channel: Channel, amount: int) -> SignedIou:
    return SignedIou.sign(
        renter.key, deployment.network_id, deployment.channel_hash, channel.id, amount
    )


async def open_many(
    devnet: DevnetProcess,
    deployment: Deployment,
    funder: Wallet,
    provider: Wallet,
    count: int,
    stake: bool = True,
) -> list[tuple[Channel, Wallet]]:
    """`count` channels for `provider`, each its own renter (staked, or with `stake` False at
    an enterprise address, as its channel then is), made as outputs in as few transactions
    as fit (as bench/contracts.py's lock_many makes escrows): a claim reads only the datum,
    so each nonce is only made unique (a hash of the renter's key) instead of an input the
    open spends."""
    made: list[tuple[Channel, Wallet]] = []
    while len(made) < count:
        context = devnet.context()
        builder = new_builder(context)
        builder.add_input_address(funder.address)
        keys = [PaymentSigningKey.generate() for _ in range(min(OPEN_PER_TX, count - len(made)))]
        renters = [staked(k) if stake else Wallet.of(k, deployment.network) for k in keys]
        for renter in renters:
            nonce = TxOutRef(hashlib.sha256(renter.vkey).digest(), 0)
            terms = ChannelTerms(
                to_plutus(renter.address), to_plutus(provider.address), provider.vkey, CLOSE_MS,
                nonce,
            )  # fmt: skip
            datum = ChannelDatum(
                renter.vkey, channels.payee_hash(terms.provider), channels.channel_id(terms), 0,
                channels.OPEN,
            )  # fmt: skip
            out = TransactionOutput(deployment.channel_address(renter.address), 0, datum=datum)
            out.amount.coin = DEPOSIT + channels.return_deposit(context, out)
            builder.add_output(out)
        tx = await confirm(devnet, funder.sign(build(builder, funder.address)))
        made += [
            (channels.read_channel(deployment, output(tx, i)), renter)
            for i, renter in enumerate(renters)
        ]
    return made


async def claim_cost(
    devnet: DevnetProcess,
    deployment: Deployment,
    provider: Wallet,
    opened: list[tuple[Channel, Wallet]],
) -> dict[str, Any]:
    """The cost of claiming CLAIM from each of `opened` in one transaction the provider
    submits, or why it cannot be built."""
    claims = [(c, renter_iou(deployment, renter, c, CLAIM)) for c, renter in opened]
    try:
        built = channels.claim_channels(devnet.context(), deployment, claims, provider.address)
        return await cost(devnet, provider.sign(built))
    except (BuildError, OgmiosError, ResponseError, PyCardanoException) as exc:  # over a limit
        return {"error": str(exc).splitlines()[0][:200]}


def iou_verify_rate(seconds: float) -> int:
    """IOUs SignedIou.signed_by verifies per second on this one thread."""
    key = PaymentSigningKey.generate()
    vkey, script = key.to_verification_key().payload, ScriptHash(bytes(28))
    signed = SignedIou.sign(key, 0, script, bytes(28), 123_456_789)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            assert signed.signed_by(vkey, 0, script)
        count += 100
    return int(count / (time.perf_counter() - start))


class Actions:
    """Each channel action run once through the builders, its cost kept by name."""

    def __init__(self, devnet: DevnetProcess, deployment: Deployment) -> None:
        self.devnet, self.deployment = devnet, deployment
        self.measured: dict[str, dict[str, Any]] = {}

    async def run(self, name: str, tx: Transaction) -> Transaction:
        self.measured[name] = await cost(self.devnet, tx)
        return await confirm(self.devnet, tx)

    async def open(
        self, renter: Wallet, provider: Wallet, deposit: int, name: str = "open"
    ) -> tuple[Channel, ChannelTerms]:
        tx, terms = channels.open_channel(
            self.devnet.context(), self.deployment, renter.address, renter.vkey,
            provider.address, provider.vkey, deposit, CLOSE_MS,
        )  # fmt: skip
        await self.run(name, renter.sign(tx))
        return channels.read_channel(self.deployment, output(tx, channels.CHANNEL_OUTPUT)), terms

    async def claim(
        self, name: str, channel: Channel, renter: Wallet, provider: Wallet, amount: int
    ) -> Channel:
        """`channel` claimed alone by its provider up to `amount`; the channel going on."""
        signed = renter_iou(self.deployment, renter, channel, amount)
        built = channels.claim_channels(
            self.devnet.context(), self.deployment, [(channel, signed)], provider.address
        )
        tx = await self.run(name, provider.sign(built))
        return channels.read_channel(self.deployment, output(tx, 1))


async def actions(actions: Actions) -> None:
    """Every channel action once."""
    devnet, deployment = actions.devnet, actions.deployment
    renter, provider = [await wallet(devnet) for _ in range(2)]
    channel, terms = await actions.open(renter, provider, DEPOSIT)
    channel = await actions.claim("claim", channel, renter, provider, CLAIM)
    topped = channels.top_up(devnet.context(), deployment, channel, terms, DEPOSIT, renter.address)
    tx = await actions.run("top_up", renter.sign(topped))
    channel = channels.read_channel(deployment, output(tx, channels.CHANNEL_OUTPUT))
    closing = channels.start_close(devnet.context(), deployment, channel, terms, renter.address)
    tx = await actions.run("start_close", renter.sign(closing))
    channel = channels.read_channel(deployment, output(tx, channels.CHANNEL_OUTPUT))
    await travel_to(devnet, channel.datum.closing_at + 1)
    drained = channels.drain(devnet.context(), deployment, channel, terms, provider.address)
    await actions.run("drain", provider.sign(drained))
    channel, terms = await actions.open(renter, provider, DEPOSIT, "open (again)")
    ended = channels.provider_end(devnet.context(), deployment, channel, terms, provider.address)
    await actions.run("provider_end", provider.sign(ended))
    channel, terms = await actions.open(renter, provider, DEPOSIT, "open (again)")
    both = channels.mutual_close(
        devnet.context(), deployment, channel, terms, renter.address, CLAIM
    )
    await actions.run("mutual_close", sign_tx(both, renter.key, provider.key))


async def channel_session(actions: Actions, claims: int) -> dict[str, Any]:
    """REQUESTS requests at PRICE_PER_REQUEST paid by IOUs on one channel: one open, `claims`
    claims (each of this channel alone, evenly spread) and the provider's end, which pays the
    rest (the return deposit) back."""
    devnet, deployment = actions.devnet, actions.deployment
    renter, provider = [await wallet(devnet) for _ in range(2)]
    deposit = REQUESTS * PRICE_PER_REQUEST
    channel, terms = await actions.open(renter, provider, deposit, "session open")
    fees = [actions.measured["session open"]["fee_lovelace"]]
    for k in range(1, claims + 1):
        channel = await actions.claim(
            "session claim", channel, renter, provider, deposit * k // claims
        )
        fees.append(actions.measured["session claim"]["fee_lovelace"])
    ended = channels.provider_end(devnet.context(), deployment, channel, terms, provider.address)
    await actions.run("session end", provider.sign(ended))
    fees.append(actions.measured["session end"]["fee_lovelace"])
    return {
        "transactions": len(fees),
        "claims": claims,
        "fees_lovelace": sum(fees),
        "fee_per_request_lovelace": -(-sum(fees) // REQUESTS),
        "min_utxo_locked_lovelace": channel.lovelace,  # the return deposit, all that is left
        "fees_by_transaction": fees,
    }


async def escrow_session(devnet: DevnetProcess, deployment: Deployment) -> dict[str, Any]:
    """The same work as REQUESTS one-request escrows: each its own lock (measured here) and
    its share of a settle in the largest batch (bench/contracts.py's measure), and each lock's
    minimum UTxO (the return deposit, raised to the escrow output's minimum)."""
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    context = devnet.context()
    datum = escrows.new_escrow(
        consumer.address, provider.address, provider.vkey, PRICE_PER_REQUEST, 1,
        Clock.now(context).tip_ms + 600_000, 60_000, bytes(32), 0,
    )  # fmt: skip
    locked = escrows.lock_lovelace(context, deployment, datum)
    lock = escrows.lock(context, deployment, consumer.address, datum, locked)
    lock_fee = lock.transaction_body.fee
    settled = json.loads(CONTRACTS.read_text())
    settle_fee = settled["settle_fee_per_escrow_lovelace"]
    return {
        "transactions": f"{REQUESTS} locks + {-(-REQUESTS // settled['max_batch_settle'])} settles",
        "lock_fee_lovelace": lock_fee,
        "settle_fee_per_escrow_lovelace": settle_fee,
        "settle_batch": settled["max_batch_settle"],
        "fees_lovelace": REQUESTS * (lock_fee + settle_fee),
        "fee_per_request_lovelace": lock_fee + settle_fee,
        "min_utxo_locked_per_escrow_lovelace": locked - PRICE_PER_REQUEST,
        "min_utxo_locked_lovelace": REQUESTS * (locked - PRICE_PER_REQUEST),
    }


async def measure(batch_limit: int, claims: int, verify_seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        devnet = DevnetProcess(Path(tmp) / "data").start()
        try:
            deployment = await deployed(devnet)
            limits = Limits.of(devnet.context().protocol_param)
            done = Actions(devnet, deployment)
            await actions(done)
            session = await channel_session(done, claims)
            by_escrows = await escrow_session(devnet, deployment)
            provider, funder = [await wallet(devnet, 100_000 * ADA) for _ in range(2)]
            pools = [
                await open_many(devnet, deployment, funder, provider, batch_limit + 1, stake)
                for stake in (True, False)
            ]

            def claiming(pool: list[tuple[Channel, Wallet]]) -> Measure:
                return lambda n: claim_cost(devnet, deployment, provider, pool[:n])

            size, batch, stop = await largest_batch(claiming(pools[0]), batch_limit, limits)
            costs = await profile(claiming(pools[0]), size, limits)
            print("  renters at enterprise addresses (no stake part):")
            enterprise = await largest_batch(claiming(pools[1]), batch_limit, limits)
        finally:
            devnet.stop()
    fit = fit_memory(costs)
    return {
        "channels_per_claim_tx": size,
        "claim_stopped_by": stop,
        "enterprise_renters": {  # no stake part: 28 bytes less in each continuing output
            "channels_per_claim_tx": enterprise[0],
            "claim_fee_per_channel_lovelace": -(-enterprise[1]["fee_lovelace"] // enterprise[0]),
            "stopped_by": enterprise[2],
        },
        "claim_memory_per_channel": fit["per_escrow"],
        "claim_memory_fit": {
            "constant": fit["constant"],
            "per_channel": fit["per_escrow"],
            "per_channel_squared": fit["per_escrow_squared"],
        },
        "claim_memory_per_channel_at_largest": batch["memory"] // size,
        "claim_fee_per_channel_lovelace": -(-batch["fee_lovelace"] // size),
        "iou_verify_per_s": iou_verify_rate(verify_seconds),
        "session": {
            "requests": REQUESTS,
            "price_per_request_lovelace": PRICE_PER_REQUEST,
            "channel": session,
            "escrows": by_escrows,
        },
        "script_bytes": {
            "channel": len(deployment.channel_script),
            "claim": len(deployment.claim_script),
        },
        "addresses": "payment + stake credential for every party",
        "targets": TARGETS,
        "claim_by_size": {
            str(n): {k: m[k] for k in ("memory", "cpu", "fee_lovelace", "tx_bytes")}
            for n, m in costs.items()
        },
        "batch": batch,
        "actions": done.measured,
        "limits": {**limits.tx, "size_margin_bytes": SIZE_MARGIN},
    }


def table(results: dict[str, Any]) -> str:
    lines = cost_rows(
        {**results["actions"], f"claim x{results['channels_per_claim_tx']}": results["batch"]},
        results["script_bytes"],
    )
    session = results["session"]
    channel, by_escrows = session["channel"], session["escrows"]
    lines += [
        f"largest batch claim: {results['channels_per_claim_tx']} channels "
        f"(target {TARGETS['channels_per_claim_tx']}); "
        f"{results['channels_per_claim_tx'] + 1} goes over: {results['claim_stopped_by']}",
        "claim memory fit: {constant:,} + {per_channel:,} n + {per_channel_squared:,} n^2".format(
            **results["claim_memory_fit"]
        )
        + f" (target {TARGETS['claim_memory_per_channel']:,} per channel)",
        f"claim fee per channel: {results['claim_fee_per_channel_lovelace']:,} lovelace",
        "renters at enterprise addresses (channels too): {channels_per_claim_tx} channels per "
        "claim ({claim_fee_per_channel_lovelace:,} lovelace each); stopped by {stopped_by}".format(
            **results["enterprise_renters"]
        ),
        f"IOU verifications per second (one core): {results['iou_verify_per_s']:,}",
        f"{session['requests']:,} requests at {session['price_per_request_lovelace']:,} lovelace:",
        f"  by IOUs: {channel['transactions']} transactions ({channel['claims']} claims), "
        f"{channel['fees_lovelace']:,} lovelace of fees "
        f"({channel['fee_per_request_lovelace']:,} a request), "
        f"{channel['min_utxo_locked_lovelace']:,} lovelace of minimum UTxO locked",
        f"  by escrows: {by_escrows['transactions']}, {by_escrows['fees_lovelace']:,} lovelace "
        f"of fees ({by_escrows['fee_per_request_lovelace']:,} a request), "
        f"{by_escrows['min_utxo_locked_lovelace']:,} lovelace of minimum UTxO locked "
        f"({by_escrows['min_utxo_locked_per_escrow_lovelace']:,} each)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-limit", type=int, default=120, help="largest batch to try")
    parser.add_argument("--claims", type=int, default=10, help="claims in the session")
    parser.add_argument("--verify-seconds", type=float, default=3.0)
    args = parser.parse_args()
    logging.getLogger("PyCardano").setLevel(logging.CRITICAL)  # failed builds dump their state
    results = asyncio.run(measure(args.batch_limit, args.claims, args.verify_seconds))
    print(table(results))
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
