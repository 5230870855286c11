"""What the browser pages call with a CIP-30 wallet (`offchain.market.services.wallet_txs`):
transactions built unsigned from the wallet's own UTxOs, and submitted with the witness set
its `signTx(tx, true)` returns. Every route that acts for a party is a signed request of
that party, as the CLI's are; the market's config and the spec check are public (a page
reads the identity it must sign for from the config)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI

from offchain.market import schemas
from offchain.market.api.deps import (
    ChainDep,
    PartyDep,
    SessionDep,
    SettingsDep,
    SignedDep,
    storable_params,
)  # fmt: skip
from offchain.market.api.routes.jobs import JobIdDep
from offchain.market.services import jobs, wallet_txs
from offchain.protocol.api import wire

job_router = APIRouter(prefix="/jobs", tags=["wallet"], dependencies=[Depends(storable_params)])
router = APIRouter(prefix="/api/app", tags=["wallet"], dependencies=[Depends(storable_params)])


@router.get("/config")
def config(settings: SettingsDep, chain: ChainDep) -> wire.AppConfig:
    """The market's identity (signed into every request), network and scripts."""
    return wallet_txs.config(settings, chain)


@router.post("/spec/check")
def check_spec(body: schemas.SpecText) -> wire.SpecCheck:
    """A spec (YAML or JSON text) read as `unchained job submit` reads a spec file: the CLI's
    messages when refused, else the spec as the job request carries it."""
    return wallet_txs.check_spec(body.text)


@job_router.post("/{job_id}/lock/build")
def build_lock(
    body: schemas.WalletFunds, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    chain: ChainDep,
) -> wire.WalletLock:  # fmt: skip
    """The quoted job's lock from the wallet's UTxOs (change to its change address), recorded
    as the job's one lock: sign it and post it with the witness set to POST /jobs/{id}/lock."""
    job = jobs.consumers_job(session, job_id, party)
    return wallet_txs.lock(session, chain, job, body)


@job_router.post("/{job_id}/cancel/build")
def build_cancel(
    body: schemas.WalletFunds, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    chain: ChainDep,
) -> wire.WalletTransaction:  # fmt: skip
    """The locked job's Cancel, the wallet paying the fee: post it unsigned to
    POST /jobs/{id}/cancel; once its provider signed, add the wallet's witness at
    /jobs/{id}/cancel/submit."""
    job = jobs.consumers_job(session, job_id, party)
    return wallet_txs.cancel(chain, job, body)


@job_router.post("/{job_id}/cancel/submit")
def submit_cancel(
    body: schemas.WitnessedTransaction, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    settings: SettingsDep,
) -> wire.Submitted:  # fmt: skip
    """The provider-signed Cancel (GET /jobs/{id}/cancel's transaction) with the wallet's
    witness set: submitted."""
    job = jobs.consumers_job(session, job_id, party)
    return wallet_txs.submit_cancel(settings, job, body)


@job_router.post("/{job_id}/refund/build")
def build_refund(
    body: schemas.RefundBuild, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    chain: ChainDep,
) -> wire.WalletTransaction:  # fmt: skip
    """The escrow's refund after its close (`slash`: with the bond's slash share), the wallet
    paying the fee, as `unchained job refund` / `job slash` build it."""
    job = jobs.consumers_job(session, job_id, party)
    return wallet_txs.refund(session, chain, job, body, body.slash)


@job_router.post("/{job_id}/refund/submit")
def submit_refund(
    body: schemas.WitnessedTransaction, party: PartyDep, job_id: JobIdDep, session: SessionDep,
    settings: SettingsDep,
) -> wire.Submitted:  # fmt: skip
    """The refund (or slash) built above with the wallet's witness set: submitted."""
    job = jobs.consumers_job(session, job_id, party)
    return wallet_txs.submit_refund(settings, job, body)


@router.post("/channels/open/build")
def build_open(
    body: schemas.ChannelOpen, signed: SignedDep, session: SessionDep, chain: ChainDep
) -> wire.WalletChannel:
    """A channel to the provider its offer names, from the wallet's UTxOs."""
    return wallet_txs.open_channel(session, chain, signed.key_hash, signed.vkey.payload, body)


@router.post("/channels/{channel_id}/top-up/build")
def build_top_up(
    channel_id: str, body: schemas.ChannelTopUp, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> wire.WalletTransaction:  # fmt: skip
    return wallet_txs.top_up(session, chain, party, channel_id, body)


@router.post("/channels/{channel_id}/close/build")
def build_close(
    channel_id: str, body: schemas.WalletFunds, party: PartyDep, session: SessionDep,
    chain: ChainDep,
) -> wire.WalletTransaction:  # fmt: skip
    """The close's next step: start the close of an open channel, or drain a closing one
    once its close period passed (`step` says which)."""
    return wallet_txs.close(session, chain, party, channel_id, body)


@router.post("/channels/submit")
def submit_channel(
    body: schemas.WitnessedTransaction, party: PartyDep, session: SessionDep,
    settings: SettingsDep, chain: ChainDep,
) -> wire.Submitted:  # fmt: skip
    """A channel transaction built above, with the wallet's witness set: submitted."""
    return wallet_txs.submit_channel(session, settings, chain, party, body)


def mount(app: FastAPI) -> None:
    app.include_router(job_router)
    app.include_router(router)
