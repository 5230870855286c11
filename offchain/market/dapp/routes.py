"""The renter's pages: server-rendered shells at `/app/...` whose few ES modules (static/) talk
to the wallet (CIP-30) and to the market's signed API; `/app/config.json` tells them the market
they talk to (its identity, network and escrow script, from the deployment it quotes for).

Nothing here is secret or signed: each action is signed by the wallet in the browser."""

from __future__ import annotations

import re
from pathlib import Path as FilePath
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from offchain.market.api.deps import ChainDep, SettingsDep
from offchain.market.explorer import routes as explorer
from offchain.market.services import wallet_txs

HERE = FilePath(__file__).parent
# ours first, then the explorer's (its <head> and stylesheet)
templates = Jinja2Templates(directory=[HERE / "templates", explorer.HERE / "templates"])
router = APIRouter(tags=["app"], include_in_schema=False)
JOB_ID = re.compile(r"[0-9a-f]{1,64}")
PAGES = {
    "/app": ("connect.html", "Connect a wallet"),
    "/app/jobs/new": ("new_job.html", "Rent a GPU"),
    "/app/jobs": ("jobs.html", "My jobs"),
    "/app/channels": ("channels.html", "My channels"),
    "/app/endpoints": ("endpoints.html", "My endpoints"),
}


def mount(app: FastAPI) -> None:
    """Serve the renter's pages and their scripts from `app`."""
    app.include_router(router)
    app.mount("/app/static", StaticFiles(directory=HERE / "static"), name="app-static")


def _page(request: Request, template: str, title: str, **data: str) -> Response:
    return templates.TemplateResponse(request, template, {"title": title, **data})


@router.get("/app/config.json")
def config(settings: SettingsDep, chain: ChainDep) -> dict[str, Any]:
    """What the pages check against (`/api/app/config`: the market's identity signed into each
    request, its network and scripts) and the settle script a receipt's payload names."""
    made = wallet_txs.config(settings, chain).model_dump()
    return made | {"settle_hash": chain.deployment.settle_hash.payload.hex()}


@router.get("/app", response_class=HTMLResponse)
@router.get("/app/jobs/new", response_class=HTMLResponse)
@router.get("/app/jobs", response_class=HTMLResponse)
@router.get("/app/channels", response_class=HTMLResponse)
@router.get("/app/endpoints", response_class=HTMLResponse)
def page(request: Request) -> Response:
    return _page(request, *PAGES[request.url.path])


@router.get("/app/jobs/{job_id}", response_class=HTMLResponse)
def job(request: Request, job_id: str) -> Response:
    """A job's page; an id that is no job id is a page that says so (404), shown as text."""
    if not JOB_ID.fullmatch(job_id):
        return templates.TemplateResponse(
            request, "missing.html", {"title": "No such job", "job_id": job_id}, status_code=404
        )
    return _page(request, "job.html", "Job", job_id=job_id)
