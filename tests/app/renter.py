"""A renter in Chromium with the test wallet: the pages of a market opened by path, every
console error kept, phone-width screenshots (390x844) that must not scroll sideways."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tests.wallet.wallet import BrowserWallet

PHONE = {"width": 390, "height": 844}


@dataclasses.dataclass
class Renter:
    page: Any  # playwright.async_api.Page
    wallet: BrowserWallet
    base: str
    shots: Path
    errors: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    async def open(cls, browser: Any, wallet: BrowserWallet, base: str, shots: Path) -> Renter:
        page = await browser.new_page(viewport=PHONE)
        renter = cls(page, wallet, base, shots)
        page.on("console", lambda m: renter.errors.extend([m.text] if m.type == "error" else []))
        page.on("pageerror", lambda e: renter.errors.append(str(e)))
        await wallet.install(page)
        return renter

    async def visit(self, path: str) -> None:
        answer = await self.page.goto(self.base + path)
        assert answer is not None and answer.status == 200, path

    async def connect(self) -> None:
        await self.visit("/app")
        await self.page.click("button[data-wallet=testwallet]")
        address = str(self.wallet.wallet.address)
        await self.page.locator("#address", has_text=address).wait_for()

    async def shoot(self, name: str) -> Path:
        width = await self.page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{name}: {width} px wide on a {PHONE['width']} px phone"
        path = self.shots / f"{name}.png"
        await self.page.screenshot(path=path, full_page=True)
        return path

    async def text(self, selector: str) -> str:
        return await self.page.locator(selector).first.inner_text()

    async def said(self, words: str, timeout_ms: float = 60_000) -> None:
        """Wait until the page's message holds `words`."""
        await self.page.locator("#message", has_text=words).wait_for(timeout=timeout_ms)
