"""What a signed job request costs, counted rather than timed (bench/market.py times it, and
fails above a CPU ceiling): the statements and offer rows a quote reads stay the same as the
offers grow tenfold, and a quote encodes its escrow datum once and no transaction output (the
min-UTxO sums priced from cached sizes). Issue 37: each of those had grown per request."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pycardano import Network, PaymentSigningKey, TransactionOutput, min_lovelace_post_alonzo
from sqlalchemy import event
from sqlmodel import Session

from offchain.market import schemas
from offchain.market.db import make_engine
from offchain.market.schemas import OfferTerms
from offchain.market.services import jobs, offers, quotes
from offchain.market.services.chain import Chain, quoted_escrow
from offchain.market.services.nonces import PendingNonce
from offchain.market.settings import MarketSettings
from offchain.protocol.api.signed_request import RequestVerifier, body_digest
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.split import lock_amount
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import Wallet
from tests.market.client import Party
from tests.market.database import engine_at_head
from tests.market.test_lifecycle import GPU, IMAGES, SPEC, job_request, offer_terms

CHEAPEST = 40_000


def seed(session: Session, count: int) -> None:
    """`count` online offers, one provider each, priced apart (the signature is not checked
    here: the search reads the columns and the body)."""
    now = jobs.now_ms()
    for i in range(count):
        provider = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET)
        body = {
            "payout_address": str(provider.address), "gpu_model": GPU, "gpu_count": 1,
            "vram_mib": 81_559, "cpu_cores": 16, "memory_mib": 131_072, "disk_mib": 512_000,
            "price_per_unit": CHEAPEST + 7 * (count - 1 - i), "slots": 2, "images": IMAGES,
        }  # fmt: skip
        signed = (json.dumps(body), "not checked here", "not checked here")
        terms = OfferTerms.model_validate(body)
        offers.post_offer(session, provider.vkey, terms, signed, now)


@pytest.fixture
def counted(monkeypatch) -> Iterator[tuple[Callable[[Any], None], Counter[str]]]:
    """Counts the statements an engine runs and the offer rows read (each made a search
    record as it is read)."""
    counts: Counter[str] = Counter()
    made = offers.OfferRecord

    def record(*args: Any, **kwargs: Any) -> Any:
        counts["offer rows"] += 1
        return made(*args, **kwargs)

    monkeypatch.setattr(offers, "OfferRecord", record)

    def listen(engine: Any) -> None:
        event.listen(engine, "before_cursor_execute", lambda *_: counts.update(["statements"]))

    yield listen, counts


@pytest.mark.parametrize("few, many", [(40, 400)])
def test_a_quote_reads_as_much_with_ten_times_the_offers(tmp_path, counted, few, many):
    listen, counts = counted
    spec = JobSpec.model_validate(SPEC)
    read: dict[int, Counter[str]] = {}
    for count in (few, many):
        settings = MarketSettings(data_dir=tmp_path / str(count))
        engine = engine_at_head(settings)
        try:
            with Session(engine) as session:
                seed(session, count)
            listen(engine)
            for _ in range(2):  # the second as the first: nothing warms up but the SQL cache
                counts.clear()
                with Session(engine) as session:
                    offer, _ = offers.best_offer(
                        session, spec, None, offers.available_now(settings)
                    )
                assert offer.price_per_unit == CHEAPEST
            read[count] = counts.copy()
        finally:
            engine.dispose()
    assert read[few] == read[many]
    assert read[many]["offer rows"] == offers.LIKELY  # the cheapest few, not every offer
    assert read[many]["statements"] == 2  # those offers with their bodies; the one chosen


@pytest.mark.parametrize("database_url", [""])  # counted in Python: any database counts so
async def test_a_quote_encodes_its_escrow_datum_once_and_no_output(http, settings, monkeypatch):
    provider = Party.new(http, settings.identity)
    posted = await provider.send("POST", "/offers", offer_terms(provider))
    assert posted.status_code == 201, posted.text
    consumer = Party.new(http, settings.identity)
    chain = Chain.connect(settings.ogmios_url, settings.deployment)
    engine = make_engine(settings)
    here, counts = threading.get_ident(), Counter[str]()

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == here:  # not the served market's own work
                counts[name] += 1
            return original(self, *args, **kwargs)

        return spy

    for cls, method, name in [
        (EscrowDatum, "validate", "datum checked"),
        (EscrowDatum, "to_validated_primitive", "datum encoded"),
        (TransactionOutput, "to_cbor", "output encoded"),
    ]:
        monkeypatch.setattr(cls, method, counting(name, getattr(cls, method)))

    def request(n: int) -> tuple[Any, Counter[str]]:
        body = json.dumps(job_request(consumer, command=["python", "-c", f"print({n})"]))
        headers = consumer.headers("POST", "/jobs", body.encode())
        nonce = PendingNonce()
        verifier = RequestVerifier(settings.identity, nonce, settings.clock_tolerance_ms)
        signed = verifier.verify(headers, "POST", "/jobs", body_digest(body.encode()),
                                 jobs.now_ms())  # fmt: skip
        asked = schemas.JobRequest.model_validate_json(body)
        counts.clear()
        quote = quotes.request_job(engine, settings, chain, signed, nonce, asked)
        return quote, counts.copy()

    try:
        request(0)  # the first prices the min-UTxO of its shapes
        for n in (1, 2):
            quote, spent = request(n)
            assert spent == {"datum checked": 1, "datum encoded": 1}, spent
            with Session(engine) as session:  # the lock priced as pycardano prices it
                datum = quoted_escrow(jobs.get(session, quote.job_id))
            deposit = escrows.refund_deposit(chain.context, chain.deployment, datum.consumer)
            needed = lock_amount(datum.price_per_unit, datum.max_units, datum.fee_allowance,
                                 deposit)  # fmt: skip
            address = chain.deployment.escrow_address(consumer.wallet.address)
            probe = TransactionOutput(address, 2**40, datum=datum)
            assert quote.lock_lovelace == max(
                needed, min_lovelace_post_alonzo(probe, chain.context)
            )
    finally:
        engine.dispose()
