"""Every relative link of the README and the docs leads somewhere: the file exists and,
where the link names a heading (`page.md#anchor`), the page has that heading, with the
anchor made as GitHub makes it (lower case, punctuation dropped, spaces to hyphens, a
repeated heading numbered)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "bench").glob("*.md")), *sorted((ROOT / "examples").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks)."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.*)$", FENCE.sub("", page.read_text()), re.M):
        a = _anchor(m.group(1))
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` that lead nowhere, each with why."""
    bad = []
    for m in LINK.finditer(FENCE.sub("", page.read_text())):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path) if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: {dest.name} has no such heading")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page):
    assert broken_links(page) == []


def test_the_check_finds_a_broken_link_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Title: one `thing`\n\n## Title: one `thing`\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#title-one-thing-1) [gone](nothing.md) [no](a.md#nope)\n"
                    "```\n[in code](ignored.md)\n```\n[web](https://example.org/x)\n")
    assert broken_links(page) == ["nothing.md: no such file", "a.md#nope: a.md has no such heading"]
