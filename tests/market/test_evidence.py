"""The metering record upload: taken only after the receipt and only if it is the record the
receipt's evidence hash signed; anything else is refused with nothing stored. The provider
daemon's own upload (provider/daemon/evidence.py) reaches the same route."""

from __future__ import annotations

import hashlib

from sqlmodel import Session

from offchain.market.db import make_engine
from offchain.market.models import Blob
from offchain.market.services import delivery, storage
from offchain.protocol.api.market_link import MarketLink
from offchain.protocol.api.signed_request import KeySigner
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.receipt import Receipt
from provider.daemon import evidence
from provider.daemon.journal import JobEntry
from provider.sandbox.runner import RunResult
from tests.market.client import Party
from tests.market.flow import (
    RESULT,
    UNITS,
    Locked,
    accept,
    provider_with_offer,
    quote_and_lock,
    stored,
)  # fmt: skip
from tests.market.records import metering, receipt_body
from tests.market.test_lifecycle import PRICE, SPEC, report_escrow
from tests.protocol.onchain import wallet


async def running(devnet, deployment, http, settings) -> tuple[Party, Locked]:
    """A provider and its funded, accepted, started job."""
    provider = await provider_with_offer(devnet, http, settings.identity)
    locked = await quote_and_lock(devnet, deployment, http, settings.identity)
    await report_escrow(locked.consumer, locked.job, locked.ref)
    await accept(provider, deployment, locked)
    return provider, locked


async def hand_in(provider: Party, locked: Locked, receipt: dict) -> None:
    handed = await provider.send("POST", f"/jobs/{locked.job}/receipt", receipt)
    assert handed.status_code == 200, handed.text


async def test_only_the_record_the_receipt_signed_is_kept(
    devnet, market_deployment, http, settings, monkeypatch
):
    provider, locked = await running(devnet, market_deployment, http, settings)
    path = f"/jobs/{locked.job}/metering"
    record = metering(locked.job, UNITS)
    body = record.canonical_json()

    early = await provider.send("PUT", path, raw=body)
    assert early.status_code == 409, early.text  # no receipt yet: nothing to check it against
    receipt = receipt_body(provider, market_deployment, locked, RESULT, record)
    await hand_in(provider, locked, receipt)
    before = blobs(settings)

    other = metering(locked.job, UNITS - 1).canonical_json()  # not what was signed
    pretty = record.model_dump_json(indent=1).encode()  # the same record, not canonical
    stranger = Party.new(http, settings.identity, await wallet(devnet))
    refused = {
        "mismatch": (await provider.send("PUT", path, raw=other)).status_code,
        "not canonical": (await provider.send("PUT", path, raw=pretty)).status_code,
        "another provider": (await stranger.send("PUT", path, raw=body)).status_code,
    }
    monkeypatch.setattr(delivery, "EVIDENCE_LIMIT_BYTES", len(body) - 1)
    refused["too large"] = (await provider.send("PUT", path, raw=body)).status_code
    monkeypatch.undo()
    assert refused == {"mismatch": 422, "not canonical": 422, "another provider": 403,
                       "too large": 413}  # fmt: skip
    assert blobs(settings) == before
    for refused_body in (other, pretty):
        sha256 = hashlib.sha256(refused_body).hexdigest()
        assert sha256 not in blobs(settings)
    shown = (await http.get(f"/api/explorer/jobs/{locked.job}")).json()
    assert shown["metering"] is None and shown["job"]["state"] == "completed"

    taken = await provider.send("PUT", path, raw=body)
    assert taken.status_code == 200, taken.text
    engine = make_engine(settings)
    with Session(engine) as session:
        assert storage.blob_bytes(session, record.digest()) == body
    engine.dispose()
    again = await provider.send("PUT", path, raw=body)  # a retry after a lost answer
    assert again.status_code == 200, again.text
    shown = (await http.get(f"/api/explorer/jobs/{locked.job}")).json()["metering"]
    assert shown["matches"] is True and shown["record"]["billable_units"] == UNITS


async def test_the_daemon_uploads_the_record_its_receipt_signed(
    devnet, market_deployment, http, settings, tmp_path
):
    provider, locked = await running(devnet, market_deployment, http, settings)
    record = metering(locked.job, UNITS)
    receipt = receipt_body(provider, market_deployment, locked, RESULT, record)
    await hand_in(provider, locked, receipt)
    results = tmp_path / "results"
    (results / locked.job).mkdir(parents=True)
    saved = RunResult(job_id=locked.job, status="succeeded", exit_code=0, record=record)
    (results / locked.job / "result.json").write_text(saved.model_dump_json())
    entry = JobEntry(
        job_id=locked.job, escrow=locked.ref, spec=JobSpec.model_validate(SPEC),
        price_per_unit=PRICE, gpu_uuids=[], slot=0, close_ms=0, accepted_at_ms=0,
        receipt=receipt,
    )  # fmt: skip
    signer = KeySigner(provider.wallet.key, provider.wallet.address.network)
    link = MarketLink.open(str(http.base_url), settings.identity, signer)
    try:
        # a receipt for other evidence: the daemon sends nothing it did not sign
        other = Receipt.from_body(locked.escrow.input, receipt | {"evidence_hash": "00" * 32})
        assert not await evidence.upload(link, results, entry.model_copy(update={"receipt": other}))
        assert blobs(settings) == set()
        assert await evidence.upload(link, results, entry)
    finally:
        await link.aclose()
    assert blobs(settings) == {record.digest()}
    shown = (await http.get(f"/api/explorer/jobs/{locked.job}")).json()["metering"]
    assert shown["matches"] is True


def blobs(settings) -> set[str]:
    """Blobs stored besides the result archive (none is uploaded here)."""
    return {b.sha256 for b in stored(settings, Blob)}
