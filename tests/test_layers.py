"""Layers point down only. Each package sits in one layer of LAYERS (top to bottom, the map
docs/architecture.md shows); a module may import its own package and the layers below
it, never a layer above, and never a package beside it in its own layer (apps never import
each other). `devnet`, a local chain for trying things out, is imported by nothing
but the tests, the CLI and the demo.

Read with `ast` from the source, nothing imported, so an import made inside a function or
only for type checking counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Top to bottom; the packages in one row never import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("unchained",),  # the CLI root and the demo
    ("samples",),  # the demo's and the tests' sample services, built on the provider's images
    ("consumer.cli", "offchain.market", "provider.cli", "devnet"),  # the apps' front doors
    ("consumer.sdk", "provider.daemon"),  # what the front doors run
    ("provider",),  # the provider's parts: gateway, rentals, sandbox, metering, gpu, money...
    ("offchain.protocol",),
    ("offchain.chain",),
    ("contracts",),
    ("offchain.core",),  # imports nothing of ours
)
# Packages whose members are apps that never import each other, wherever they sit in LAYERS.
APPS = ("consumer", "offchain.market", "provider", "devnet")
DEVNET = "devnet"
DEVNET_USERS = ("unchained",)  # and the tests, which are not scanned
SOURCES = ("unchained", "samples", "consumer", "provider", "offchain", "contracts", "devnet")
NAMESPACES = {"offchain", "consumer"}  # hold layers but are none themselves


def package_of(module: str) -> str | None:
    """The LAYERS package `module` belongs to (the longest one that prefixes it), or None."""
    found = [p for row in LAYERS for p in row if module == p or module.startswith(f"{p}.")]
    return max(found, key=len, default=None)


def app_of(package: str) -> str | None:
    """The app (APPS) a LAYERS package is part of, or None for the shared layers."""
    return next((a for a in APPS if package == a or package.startswith(f"{a}.")), None)


def rank(package: str) -> int:
    return next(i for i, row in enumerate(LAYERS) if package in row)


def module_of(path: Path) -> tuple[str, bool]:
    """The dotted module a source file is, and whether it is a package's `__init__`."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def imports(module: str, is_package: bool, source: str) -> list[tuple[int, str]]:
    """(line, module) for each import in `source`; `from a import b` gives `a.b`, which puts
    `from provider.sandbox import runner` in its layer, and relative imports are made absolute."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parent = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*parent, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def violations(module: str, is_package: bool, source: str, where: str) -> list[str]:
    """Each import in `source` that points up, sideways into another app, or into the devnet."""
    importer = package_of(module)
    if importer is None:
        return []
    found = []
    for line, name in imports(module, is_package, source):
        imported = package_of(name)
        if name.split(".")[0] not in SOURCES or imported == importer:
            continue
        if imported is None:
            found.append(f"{where}:{line} imports {name}, which is in no layer")
        elif imported == DEVNET and importer not in DEVNET_USERS:
            found.append(f"{where}:{line} imports {name}: only the tests, the CLI and the demo "
                         "use the devnet")  # fmt: skip
        elif app_of(imported) and app_of(importer) and app_of(imported) != app_of(importer):
            found.append(f"{where}:{line}: {importer} imports {name}, another app")
        elif rank(imported) < rank(importer):
            found.append(f"{where}:{line}: {importer} imports {name}, a layer above it")
        elif rank(imported) == rank(importer):
            found.append(f"{where}:{line}: {importer} imports {name}, beside it in its layer")
    return found


def sources(root: str) -> list[Path]:
    return sorted((ROOT / root).rglob("*.py"))


def test_every_module_has_a_layer():
    modules = [module_of(p)[0] for root in SOURCES for p in sources(root)]
    unplaced = [m for m in modules if m not in NAMESPACES and package_of(m) is None]
    assert unplaced == [], f"put these in a layer of LAYERS: {unplaced}"


@pytest.mark.parametrize("root", SOURCES)
def test_imports_point_down_only(root: str):
    found = [
        problem
        for path in sources(root)
        for problem in violations(*module_of(path), path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    ("module", "is_package", "source", "complaint"),
    [
        ("offchain.chain.utxo", False, "from offchain.protocol.tx.txbuild import out_ref", "above"),
        ("offchain.core.errors", False, "import contracts.artifacts", "a layer above"),
        ("contracts.escrow", False, "from offchain.core.errors import UnchainedError", None),
        ("provider.cli.main", False, "from consumer.sdk import keys", "another app"),
        ("consumer.sdk.session", False, "from provider.money import receipts", "another app"),
        ("provider.money.receipts", False, "from provider.daemon import jobs", "a layer above"),
        ("provider.daemon.jobs", False, "from provider.money import receipts", None),
        ("provider.gateway.app", False, "from ..rentals import book", None),
        ("consumer.sdk.spend", False, "from consumer.cli import table", "a layer above"),
        ("samples.images", False, "from provider.images import recipes", None),
        ("provider.images.recipes", False, "import samples.images", "a layer above"),
        ("offchain.market.app", False, "import devnet", "only the tests, the CLI"),
        ("consumer.cli.main", False, "    from devnet.errors import X", "only the tests"),
        ("offchain.protocol.tx", True, "from . import txbuild", None),
        ("offchain.protocol.tx.bond", False, "from ...chain import time", None),
        ("offchain.protocol.tx.bond", False, "from ...market import db", "a layer above"),
        ("offchain.protocol.tx.bond", False, "from offchain.elsewhere import x", "in no layer"),
        ("unchained.demo", True, "from devnet.process import DevnetProcess", None),
        ("unchained.cli", False, "import pycardano", None),
    ],
)
def test_the_check_sees_each_kind(
    module: str, is_package: bool, source: str, complaint: str | None
):
    """The rules applied to a line written for the test, as if `module` held it."""
    found = violations(module, is_package, source.strip(), "probe.py")
    if complaint is None:
        assert found == []
    else:
        assert len(found) == 1 and complaint in found[0], found
