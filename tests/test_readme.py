"""Every `unchained` command line in the shell blocks of the README and of every page of docs/
names commands and flags that exist: each one's subcommand path is run with `--help`, and
every flag the line uses must be in that help. Cheap (no devnet), and it fails the moment a
command or flag is renamed under the docs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from unchained.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "shell", "console", "")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


COMMAND_LINE = re.compile(r"(?:^|[\s(|;&=])(?:\S*/)?unchained\s")


def shell_lines(text: str) -> list[str]:
    """The lines of a page's shell code blocks that run `unchained`."""
    lines, fence = [], None  # fence: the open block's language, None outside a block
    for line in text.splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
        elif fence in SHELL and COMMAND_LINE.search(line):
            lines.append(line)
    return lines


def unchained_commands(line: str) -> list[list[str]]:
    """The argument lists of each `unchained` command on one shell line: the line split at
    pipes, `&`, `;`, `$(` and `)`, variable assignments before a command skipped, comments
    dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], []
    for token in [*lexer, ";"]:
        if token and set(token) <= set("|&;()<>"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    found = []
    for words in commands:
        while words and ASSIGNMENT.match(words[0]):
            words = words[1:]
        if words and Path(words[0]).name == "unchained":
            found.append(words[1:])
    return found


def readme_commands() -> list[list[str]]:
    """Each `unchained` command of every page, in page order."""
    return [
        args
        for page in PAGES
        for line in shell_lines(page.read_text())
        for args in unchained_commands(line)
    ]


def split_path(args: list[str]) -> tuple[list[str], list[str]]:
    """The subcommand path at the head of `args` (as the CLI resolves it) and the rest."""
    command = typer.main.get_command(app)
    path: list[str] = []
    for word in args:
        if not isinstance(command, TyperGroup):  # a group loads its sub-commands on demand
            break
        found = command.get_command(typer.Context(command), word)
        if found is None:
            break
        command = found
        path.append(word)
    return path, args[len(path) :]


def test_the_docs_have_the_commands_of_every_part():
    paths = {" ".join(split_path(args)[0]) for args in readme_commands()}
    for expected in ("demo", "devnet", "deploy", "market serve", "provider run", "job submit",
                     "job status", "job logs", "job results", "job refund", "job slash",
                     "wallet new", "offers search", "channel open", "endpoint deploy",
                     "pod start", "provider gateway", "provider selftest"):  # fmt: skip
        assert expected in paths, (expected, sorted(paths))


@pytest.mark.parametrize("args", readme_commands(), ids=lambda args: " ".join(args)[:60])
def test_each_readme_command_and_flag_exists(args: list[str]):
    path, rest = split_path(args)
    assert path, f"`unchained {' '.join(args)}`: no such command"
    shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "Usage:" in shown.output
    assert "Commands" not in shown.output, f"`unchained {' '.join(path)}` needs a command"
    for flag in (word.split("=")[0] for word in rest if word.startswith("-")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown.output), (
            f"`unchained {' '.join(path)}` has no {flag}:\n{shown.output}"
        )
