"""The renter's pages in Chromium (the explorer tests' browser): `libs`, a page whose requests
under LIBS are answered from the pages' static folder, so the ES modules load without a
market (localhost: a secure context, where SubtleCrypto exists)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from offchain.market.dapp.routes import HERE
from tests.explorer.conftest import artifacts, browser  # noqa: F401 - its Chromium, its folder

LIBS = "http://localhost:9"  # localhost: a secure context (SubtleCrypto)
TYPES = {".js": "text/javascript", ".html": "text/html"}


async def _serve_static(route: Any) -> None:
    name = route.request.url.removeprefix(LIBS).lstrip("/") or "index.html"
    if name == "index.html":
        await route.fulfill(body="<!doctype html><title>libs</title>", content_type="text/html")
        return
    path = HERE / "static" / name
    if path.is_file():
        await route.fulfill(path=str(path), content_type=TYPES.get(path.suffix, "text/plain"))
    else:
        await route.fulfill(status=404, body="")


@pytest.fixture
async def libs(browser: Any) -> AsyncIterator[Any]:  # noqa: F811
    """A blank page at LIBS that can `import()` the pages' modules; no console error allowed."""
    page = await browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.extend([m.text] if m.type == "error" else []))
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.route(f"{LIBS}/**", _serve_static)
    await page.goto(f"{LIBS}/index.html")
    yield page
    assert errors == []
    await page.close()
