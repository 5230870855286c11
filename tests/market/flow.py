"""Jobs driven through a running market over real HTTP, for the follower, settlement, crash and
leadership tests: a provider with an offer, consumers who lock what they are quoted (with the
protocol's builder, and without telling the market: its chain follower finds the escrow), and
the scripted provider's acceptance, start and signed receipt."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from typing import Any, TypeVar

import httpx
from pycardano import Transaction, UTxO
from sqlmodel import Session, SQLModel, select

from devnet.process import DevnetProcess
from offchain.chain.submit import submit_and_wait
from offchain.chain.utxo import format_out_ref
from offchain.market.db import make_engine
from offchain.market.models import JobEvent
from offchain.market.services import jobs
from offchain.market.settings import MarketSettings
from offchain.protocol.api.wire import EscrowParameters
from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.payloads import acceptance_payload, sign
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from tests.chains import confirmations
from tests.market.client import Party
from tests.market.test_lifecycle import job_request, offer_terms
from tests.protocol.onchain import output, wallet

T = TypeVar("T", bound=SQLModel)
FAST = {"settle_every_ms": 300, "schedule_every_ms": 300, "leader_poll_ms": 200,
        "resubmit_after_ms": 1000}  # fmt: skip


async def leader_settings(
    settings: MarketSettings, devnet, tmp_path, **changes
) -> tuple[MarketSettings, Wallet]:
    """`settings` with a funded market wallet, the chain's confirmations (one on an instant
    chain) and quick scheduled work."""
    market = await wallet(devnet)
    market.key.save(str(tmp_path / "market.skey"))
    update = {"wallet_key": tmp_path / "market.skey", "confirmations": confirmations(devnet),
              **FAST, **changes}  # fmt: skip
    return settings.model_copy(update=update), market


UNITS = 42
RESULT = hashlib.sha256(b"the result").digest()
EVIDENCE = hashlib.sha256(b"the metering").digest()


@dataclasses.dataclass
class Locked:
    """A quoted job and the escrow its consumer locked for it."""

    job: str
    consumer: Party
    lock: Transaction
    block: dict[str, Any]  # the block that took the lock

    @property
    def escrow(self) -> UTxO:
        return output(self.lock, escrows.ESCROW_OUTPUT)

    @property
    def ref(self) -> str:
        return format_out_ref(escrows.lock_escrow(self.lock.id))

    @property
    def fee_allowance(self) -> int:
        """The allowance the quote asked for, as its escrow's datum holds it."""
        return EscrowDatum.from_cbor(self.escrow.output.datum.to_cbor()).fee_allowance


async def provider_with_offer(
    devnet: DevnetProcess, http: httpx.AsyncClient, identity: str
) -> Party:
    provider = Party.new(http, identity, await wallet(devnet))
    offered = await provider.send("POST", "/offers", offer_terms(provider))
    assert offered.status_code == 201, offered.text
    return provider


async def quote(devnet: DevnetProcess, http: httpx.AsyncClient, identity: str) -> tuple[Party, str]:
    """A new consumer with a quoted job."""
    consumer = Party.new(http, identity, await wallet(devnet))
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    return consumer, quoted.json()["job_id"]


async def lock(
    devnet: DevnetProcess,
    deployment: Deployment,
    consumer: Party,
    job: str,
    params: dict[str, Any] | None = None,
) -> Locked:
    """Lock the job's escrow exactly as quoted, on chain only (the market is not told);
    `params`: its escrow terms as the market gave them earlier (it may be down by now)."""
    if params is None:
        params = await escrow_terms(consumer, job)
    datum = EscrowParameters.model_validate(params).to_datum()
    unsigned = escrows.lock(
        devnet.context(), deployment, consumer.wallet.address, datum, params["lovelace"]
    )
    signed = consumer.wallet.sign(unsigned)
    block = await submit_and_wait(devnet.url, signed, timeout_s=30)
    return Locked(job, consumer, signed, block)


async def escrow_terms(consumer: Party, job: str) -> dict[str, Any]:
    """The escrow the market quoted for the job: what the consumer locks."""
    answer = await consumer.send("GET", f"/jobs/{job}/escrow")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def quote_and_lock(
    devnet: DevnetProcess, deployment: Deployment, http: httpx.AsyncClient, identity: str
) -> Locked:
    return await lock(devnet, deployment, *await quote(devnet, http, identity))


async def funded_deal(
    devnet: DevnetProcess, deployment: Deployment, http: httpx.AsyncClient, identity: str
) -> tuple[Party, Locked]:
    """A provider with an offer, and a new consumer's job quoted to it, locked on chain and
    funded by the market's follower."""
    provider = await provider_with_offer(devnet, http, identity)
    deal = await quote_and_lock(devnet, deployment, http, identity)
    await wait_for(deal.consumer, deal.job, "funded")
    return provider, deal


async def accept(provider: Party, deployment: Deployment, locked: Locked) -> None:
    """The scripted provider accepts the funded job (backing it with its bond) and starts it."""
    job_id = escrows.escrow_datum(deployment, locked.escrow).job_id
    payload = acceptance_payload(
        deployment.network_id, deployment.escrow_hash, locked.escrow.input, job_id,
        deployment.bond_hash,
    )  # fmt: skip
    body = {"signature": sign(provider.wallet.key, payload).hex()}
    accepted = await provider.send("POST", f"/jobs/{locked.job}/acceptance", body)
    assert accepted.status_code == 200, accepted.text
    assert (await provider.send("POST", f"/jobs/{locked.job}/start")).status_code == 200


async def deliver(provider: Party, deployment: Deployment, locked: Locked) -> None:
    """Accept, start, and hand in a signed receipt."""
    await accept(provider, deployment, locked)
    receipt = await send_receipt(provider, deployment, locked)
    assert receipt.status_code == 200, receipt.text


async def send_receipt(
    provider: Party, deployment: Deployment, locked: Locked, units: int = UNITS
) -> httpx.Response:
    body = Receipt.sign(
        provider.wallet.key, deployment.network_id, deployment.settle_hash, locked.escrow.input,
        units, RESULT, EVIDENCE,
    ).body()  # fmt: skip
    return await provider.send("POST", f"/jobs/{locked.job}/receipt", body)


async def job_status(party: Party, job: str) -> dict[str, Any]:
    answer = await party.send("GET", f"/jobs/{job}")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def wait_for(party: Party, job: str, state: str, timeout_s: float = 60) -> dict[str, Any]:
    """The job's status once it is in `state` (polled: the follower and batcher move it)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while True:
        status = await job_status(party, job)
        if status["state"] == state:
            return status
        assert loop.time() < until, f"job {job} is {status['state']}, not {state}"
        await asyncio.sleep(0.2)


def timeline(settings: MarketSettings, job: str) -> list[JobEvent]:
    """The job's events as stored, oldest first."""
    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            return list(jobs.events(session, job))
    finally:
        engine.dispose()


def stored(settings: MarketSettings, model: type[T], *where: Any) -> list[T]:
    """Rows of `model` as the market stored them."""
    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            return list(session.exec(select(model).where(*where)))
    finally:
        engine.dispose()
