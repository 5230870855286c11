"""Every error of ours is an `UnchainedError` (offchain/core/errors.py), as pycardano's are
`PyCardanoException`s: a CLI or an API turns the root into a message, and a caller can tell
our refusals from a library's accident. Read with `ast` from the source, so an exception
defined anywhere counts, imported or not."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("unchained", "samples", "consumer", "provider", "offchain", "devnet", "contracts")
ROOT_NAME = "UnchainedError"
BUILTIN = {"Exception", "BaseException", "ValueError", "RuntimeError", "KeyError", "OSError",
           "LookupError", "TypeError"}  # fmt: skip
# Signals that never leave the module raising them (control flow, not errors), each with why.
SIGNALS = {
    "offchain/market/services/settlement.py:Left": "a batch item leaving its batch, caught there",
    "offchain/market/app.py:BodyOverLimit": "stops reading a body; the middleware answers 413",
    "provider/gateway/limits.py:BodyRefused": "stops reading a body; the route answers its status",
    "provider/gateway/limits.py:ClientGone": "the renter went away mid-body; nothing to answer",
}


def exception_classes() -> dict[str, list[str]]:
    """`path:Name` -> its bases' names, for every class of ours whose bases name an exception
    or another class of ours (resolved below)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = [
                        b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases
                    ]
                    found[f"{path.relative_to(ROOT)}:{node.name}"] = bases
    return found


def test_every_exception_of_ours_is_an_unchained_error():
    classes = exception_classes()
    by_name: dict[str, list[list[str]]] = {}
    for key, bases in classes.items():
        by_name.setdefault(key.split(":")[1], []).append(bases)

    def rooted(name: str, seen: frozenset[str] = frozenset()) -> bool | None:
        """True under the root, False under a builtin exception only, None: not an exception."""
        if name == ROOT_NAME:
            return True
        if name in BUILTIN:
            return False
        if name in seen or name not in by_name:
            return None
        answers = [rooted(b, seen | {name}) for bases in by_name[name] for b in bases]
        if any(answers):
            return True
        return False if False in answers else None

    stray = [key for key, bases in classes.items()
             if key not in SIGNALS and key.split(":")[1] != ROOT_NAME
             and rooted(key.split(":")[1]) is False]  # fmt: skip
    assert stray == [], f"derive these from UnchainedError (or list them in SIGNALS): {stray}"


def test_the_signals_listed_are_still_there():
    classes = exception_classes()
    assert [key for key in SIGNALS if key not in classes] == []
