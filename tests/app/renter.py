"""A renter in Chromium with the test wallet: the explorer's viewer (pages by path, every
console error kept) at phone width (390x844), whose screenshots must not scroll sideways."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pycardano import Transaction, TransactionOutput

from tests.explorer.viewer import Viewer
from tests.wallet.wallet import BrowserWallet

PHONE = {"width": 390, "height": 844}


@dataclasses.dataclass
class Renter:
    view: Viewer
    wallet: BrowserWallet

    @classmethod
    async def open(cls, browser: Any, wallet: BrowserWallet, base: str, shots: Path) -> Renter:
        view = await Viewer.open_in(browser, base, shots)
        await view.page.set_viewport_size(PHONE)
        await wallet.install(view.page)
        return cls(view, wallet)

    @property
    def page(self) -> Any:  # playwright.async_api.Page
        return self.view.page

    @property
    def errors(self) -> list[str]:
        return self.view.errors

    async def visit(self, path: str) -> None:
        await self.view.visit(path)

    async def text(self, selector: str) -> str:
        return await self.view.text(selector)

    async def connect(self) -> None:
        await self.visit("/app")
        await self.page.click("button[data-wallet=testwallet]")
        address = str(self.wallet.wallet.address)
        await self.page.locator("#address", has_text=address).wait_for()

    async def shoot(self, name: str) -> Path:
        width = await self.page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{name}: {width} px wide on a {PHONE['width']} px phone"
        path = self.view.artifacts / f"{name}.png"
        await self.page.screenshot(path=path, full_page=True)
        return path

    async def said(self, words: str, timeout_ms: float = 60_000) -> None:
        """Wait until the page's message holds `words`."""
        await self.page.locator("#message", has_text=words).wait_for(timeout=timeout_ms)

    async def sign_after_review(self, button: str, shot: str) -> None:
        """`button` builds a transaction; once the page shows it and offers to sign, a
        screenshot, then sign it."""
        await self.page.click(button)
        await self.page.locator("#sign").wait_for()
        await self.shoot(shot)
        await self.page.click("#sign")


def tampering(change: Callable[[list[TransactionOutput]], None]) -> Callable[[Any], Any]:
    """A route handler that passes the market's build on with its outputs changed by
    `change` (the answer's own figures left as the market said them): a misbehaving market."""

    async def handler(route: Any) -> None:
        answer = await route.fetch()
        built = await answer.json()
        tx = Transaction.from_cbor(built["transaction"])
        change(tx.transaction_body.outputs)
        built["transaction"] = tx.to_cbor_hex()
        await route.fulfill(response=answer, body=json.dumps(built))

    return handler
