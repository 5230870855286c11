"""Plain-text tables for the CLI's listings (`job list`, `job spend`, `offers search`).

Rich's table pulls in its console, which took longer to import than the rest of `unchained job
list` (bench/consumer.py's cli_start_s). These tables are plain: aligned columns, never
wrapped (a long line is the terminal's to wrap, and a pipe gets every cell whole)."""

from __future__ import annotations

from collections.abc import Sequence

GAP = "  "


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> str:
    """The table as lines: the title, the headers underlined, then one line per row."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return GAP.join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    lines = [title] if title else []
    lines += [line(headers), line(["-" * width for width in widths])]
    lines += [line(row) for row in rows]
    return "\n".join(text.rstrip() for text in lines)
