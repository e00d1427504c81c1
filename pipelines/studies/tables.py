"""The one Markdown table writer every study's report uses (claims, compare, the LTSF benchmark,
val_choice, ts_defaults, forecast_seeds, the benches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table of ``rows`` under ``header`` (cells already formatted by the caller; a ``|`` in
    a cell is escaped, a line break becomes a space), ending in a newline."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def md_lines(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """:func:`md_table` as a list of lines, for reports built line by line."""
    return md_table(header, rows).splitlines()
