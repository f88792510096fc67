"""The docs' tables of columns name every column the store declares, so a column added to
a table cannot go undocumented (docs/store.md for the file, docs/analysis.md for the
notebook's frames, docs/markets.md and docs/graph.md for theirs)."""

from __future__ import annotations

import re

import pytest

from shoal.store.tables import TABLES
from tests.conftest import ROOT

PAGES = ("docs/store.md", "docs/analysis.md")


def table_rows(page: str) -> dict[str, str]:
    """The rows of the page's Markdown tables whose first cell names one table (`name`),
    as {table: the rest of the row}."""
    rows = {}
    for line in (ROOT / page).read_text().splitlines():
        m = re.match(r"\|\s*`(\w+)`(?: \(view\))?\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def declared() -> dict[str, list[str]]:
    """Every table the engine and its built-in parts declare, with its columns."""
    TABLES.with_run()  # loads the parts that declare tables (the market, the graph, ...)
    return {s.name: s.column_names for s in TABLES}


@pytest.mark.parametrize("page", PAGES)
def test_every_declared_column_is_on_the_page(page: str):
    """Each table the page lists has each of its declared columns named in its row."""
    tables = declared()
    rows = table_rows(page)
    listed = [name for name in rows if name in tables]
    assert len(listed) >= 8, f"{page}: the table of tables was not found"
    missing = {name: [c for c in tables[name] if not re.search(rf"\b{c}\b", rows[name])]
               for name in listed}
    missing = {name: cols for name, cols in missing.items() if cols}
    assert not missing, f"{page}: columns the store has and the page does not name: {missing}"


def test_every_frame_is_in_the_frames_table():
    """Every table the notebook shows as a frame has its row in analysis.md's Frames."""
    rows = table_rows("docs/analysis.md")
    frames = [s.name for s in (TABLES.with_run(), TABLES)[1] if s.frame]
    assert [f for f in frames if f not in rows] == []
