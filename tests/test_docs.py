"""The docs stay true: the generated pages (every setting, every benchmark figure) equal what
`scripts/docs.py` writes from the code and `bench/results/` now, the README stays a short
front page, and every relative link of every page leads to a file that is there. Each
page's `unchained` commands are checked by tests/test_readme.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
README_MAX_LINES = 150


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generator", ROOT / "scripts" / "docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["operator-reference.md", "benchmarks.md"])
def test_each_generated_page_is_what_the_code_and_results_give_now(page: str):
    docs = generator()
    path = ROOT / "docs" / page
    made = {p.name: make for p, make in docs.PAGES.items()}[page]()
    assert path.read_text() == made, f"docs/{page} is stale: run .venv/bin/python scripts/docs.py"


def test_every_setting_of_every_process_is_in_the_reference():
    """A field of any settings class (its sections' fields included) has a row."""
    from devnet.settings import DevnetSettings
    from offchain.market.settings import MarketSettings
    from provider.config import ProviderConfig

    reference = (ROOT / "docs" / "operator-reference.md").read_text()

    def keys(model: type[BaseModel], section: str = "") -> list[str]:
        found = []
        for name, field in model.model_fields.items():
            kind = field.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                found += keys(kind, f"{section}.{name}" if section else name)
            else:
                found.append(f"`[{section}] {name}`" if section else f"`{name}`")
        return found

    models = (MarketSettings, ProviderConfig, DevnetSettings)
    missing = [f"{m.__name__}: {key}" for m in models for key in keys(m) if key not in reference]
    assert missing == []


def test_the_readme_is_a_short_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert any(line.startswith(command) for line in lines), command


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_leads_to_a_file(page: Path):
    targets = [t for t in LINK.findall(page.read_text()) if "://" not in t]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert missing == [], f"{page.name} links to {missing}"


REPO_PATH = re.compile(
    r"`((?:contracts|offchain|provider|consumer|devnet|samples|unchained|tests|bench|scripts|docs)"
    r"/[\w/.-]*(?:\.\w+|/))`"  # a file (with its extension) or a folder (with its slash)
)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_file_of_ours_a_page_names_is_there(page: Path):
    """A page that names `provider/gateway/app.py` names a file that exists (the re-layout
    moved every module once; a page must not keep an old path)."""
    named = REPO_PATH.findall(page.read_text())
    missing = [path for path in named if not (ROOT / path).exists()]
    assert missing == [], f"{page.name} names {missing}"
