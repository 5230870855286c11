"""A person's view of the explorer in the browser: pages opened by path, every console error
and uncaught exception kept, and screenshots at phone and desktop sizes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

PHONE = {"width": 360, "height": 740}
DESKTOP = {"width": 1440, "height": 900}


@dataclasses.dataclass
class Viewer:
    page: Any  # playwright.async_api.Page
    base: str
    artifacts: Path
    errors: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    async def open_in(cls, browser: Any, base: str, artifacts: Path) -> Viewer:
        page = await browser.new_page(viewport=DESKTOP)
        viewer = cls(page, base, artifacts)
        page.on("console", lambda m: m.type == "error" and viewer.errors.append(m.text))
        page.on("pageerror", lambda e: viewer.errors.append(str(e)))
        return viewer

    async def visit(self, path: str) -> None:
        answer = await self.page.goto(self.base + path)
        assert answer is not None and answer.status < 500, path

    async def shoot(self, name: str) -> None:
        """Screenshots at both sizes; at phone width the page itself must not scroll sideways
        (wide tables scroll inside their own box)."""
        await self.page.set_viewport_size(PHONE)
        width = await self.page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{name}: {width} px wide on a {PHONE['width']} px phone"
        await self.page.screenshot(path=self.artifacts / f"{name}-phone.png", full_page=True)
        await self.page.set_viewport_size(DESKTOP)
        await self.page.screenshot(path=self.artifacts / f"{name}-desktop.png", full_page=True)

    async def text(self, selector: str) -> str:
        return await self.page.locator(selector).first.inner_text()
