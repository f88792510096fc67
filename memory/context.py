"""Assembling an agent's context from sections, within a token budget.

A context is the system text (persona, how to act, beliefs, round memory, active events,
cross-platform digest, the platform's actions) plus the observation (notifications and the
feed), both rebuilt from typed state for every call, sections in the order they are given
(agents/prompt.py orders them for prefix caching). Each section has a priority and a token limit;
lines are whole units. Assembly first applies every section's own limit, then, while the
total is over the budget, drops the last line of the least important section that still
has lines to give. Every dropped line is recorded with its section and reason, and the
final token counts are exact counts of the rendered text (cl100k_base).

Text written by other agents enters only through `quote`, which turns it into one JSON
string on one line: it cannot start a new line, so it cannot close a section or open a
fake one, and it is visibly data. The agent's own profile fields enter through `inline`,
which keeps them on one line and out of the markers that start headers and feed lines;
so do names that come from documents, presets and imports (a fact's source, a topic's
label, a persona written by `shoal init`). `one_line` is the part of `inline` that also
suits text outside a prompt (a YAML comment, a Markdown table cell).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from shoal.memory.tokens import count, count_many, truncate

HEADER = "## "


def quote(text: str, max_chars: int = 200) -> str:
    """Someone else's text as inert data: one line, escaped, bounded."""
    text = " ".join(text.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return json.dumps(text, ensure_ascii=False)


_MARKERS = ("#", "-", "*", ">", "[", "=")  # what starts a header, a list or a feed line
# Whatever may end a line for a reader (str.splitlines' breaks, YAML's NEL and separators),
# the other control characters but the tab (a YAML reader refuses most of them), and lone
# surrogates (a file name's undecodable bytes: no UTF-8 writer takes them).
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def one_line(text: str) -> str:
    """Text as one line of printable characters: every run of whitespace (line breaks of
    every kind included) becomes one space, and other control characters and lone
    surrogates are dropped. Text without any of them is returned unchanged."""
    if not _UNSAFE.search(text):
        return text
    return " ".join(_UNSAFE.sub("", " ".join(text.split())).split())


def inline(text: str) -> str:
    """A field of a profile (a name, a bio, a persona, a group), or a name from a document
    or a preset, as text of one line that cannot open a section or pass for a feed entry:
    line breaks become spaces, and markers at its start are dropped. Ordinary one-line
    text is returned unchanged."""
    if not _UNSAFE.search(text) and not text.lstrip().startswith(_MARKERS):
        return text
    return one_line(text).lstrip("".join(_MARKERS) + " ")


@dataclass
class Line:
    """One line of a section, with where it came from (round, platform, ids, kind). Under
    a tight budget the line with the lowest `provenance["rank"]` goes first (default: later
    lines before earlier ones)."""

    text: str
    provenance: dict = field(default_factory=dict)


@dataclass
class Section:
    """A titled block. Lower `priority` numbers are more important (trimmed last)."""

    name: str
    title: str
    priority: int
    max_tokens: int
    lines: list[Line]
    intro: str = ""  # a fixed first line (not trimmable), e.g. what the section is
    part: str = "system"  # "system" text or "observation" (the user message)

    def render(self, keep: set[int] | None = None) -> str:
        """The section text with the lines whose indices are in `keep` (all by default)."""
        body = [self.intro] if self.intro else []
        body += [ln.text for i, ln in enumerate(self.lines) if keep is None or i in keep]
        return HEADER + self.title + "\n" + "\n".join(body)

    def drop_order(self) -> list[int]:
        """Line indices, first to drop first: lowest rank, later lines before earlier."""
        def rank(i: int) -> tuple[float, int]:
            return (self.lines[i].provenance.get("rank", -i), -i)
        return sorted(range(len(self.lines)), key=rank)


@dataclass
class Trimmed:
    """A line left out, and why."""

    section: str
    text: str
    reason: str  # "section_limit" or "budget"
    provenance: dict


@dataclass
class Assembled:
    """The texts a model receives, with exact token accounting."""

    system: str
    observation: str
    tokens: dict[str, int]  # per section (estimate), "system", "observation", "total" (exact)
    trimmed: list[Trimmed]
    kept: dict[str, int]  # lines kept per section
    # The system text, then the observation, in pieces whose cl100k tokens, one piece
    # after the other, are the tokens of the two texts (`joined_pieces`): what the prefix
    # reuse measure compares (memory/prefix_reuse.py).
    pieces: tuple[str, ...] = ()
    # The indices of each section's lines that were kept, in order.
    kept_lines: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # What the texts show, as data, set by whoever built the sections (agents/prompt.py:
    # the request metadata of a turn, shoal.llm.metadata).
    meta: dict = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        """Tokens of system text and observation together."""
        return self.tokens["total"]


class _Plan:
    """Which lines of which sections are kept, with token estimates per line."""

    def __init__(self, sections: list[Section]):
        # Lines a section limit may shorten are copied first (the caller's stay as given).
        sections = [replace(s, lines=[replace(ln) if ln.provenance.get("truncatable") else ln
                                      for ln in s.lines]) for s in sections]
        self.sections = sections
        self.keep = {s.name: set(range(len(s.lines))) for s in sections}
        self.order = {s.name: s.drop_order() for s in sections}
        self.line_tokens = {s.name: [n + 1 for n in count_many([ln.text for ln in s.lines])]
                            for s in sections}
        self.base = {s.name: count(s.render(set())) + 2 for s in sections}
        self.trimmed: list[Trimmed] = []

    def used(self, s: Section) -> int:
        return self.base[s.name] + sum(self.line_tokens[s.name][i] for i in self.keep[s.name])

    def estimate(self) -> int:
        return sum(self.used(s) for s in self.sections)

    def drop(self, s: Section, reason: str) -> bool:
        """Drop the next line of `s` in its drop order (a `truncatable` line over its
        section's limit is cut to fit instead, once); False if none is left."""
        for i in self.order[s.name]:
            if i in self.keep[s.name]:
                line = s.lines[i]
                if reason == "section_limit" and line.provenance.get("truncatable") \
                        and self.truncate(s, i):
                    return True
                self.keep[s.name].discard(i)
                self.trimmed.append(Trimmed(s.name, line.text, reason, line.provenance))
                return True
        return False

    def truncate(self, s: Section, i: int) -> bool:
        """Cut line i of `s` to what the section limit leaves it (if that is a useful
        part of it), recording the cut; False if it should go whole."""
        line = s.lines[i]
        room = self.line_tokens[s.name][i] - (self.used(s) - s.max_tokens) - 2
        if room < 8:
            return False
        full = line.text
        line.text = truncate(full, room)
        line.provenance = {**line.provenance, "truncatable": False}
        self.line_tokens[s.name][i] = count(line.text) + 1
        self.trimmed.append(Trimmed(s.name, full, "truncated", line.provenance))
        return True

    def drop_by_priority(self) -> bool:
        """Drop one line of the least important section that still has lines."""
        return any(self.drop(s, "budget") for s in sorted(self.sections,
                                                          key=lambda s: -s.priority))

    def parts(self, part: str) -> list[str]:
        return [s.render(self.keep[s.name]) for s in self.sections if s.part == part]


def joined_pieces(parts: list[str]) -> list[str]:
    """`"\n\n".join(parts)` cut where cl100k's tokens of the whole are cut too: when
    every part after the first starts with a section header, `part + "\n\n"` for each
    part but the last, then the last (cl100k's pre-tokenizer always ends a piece at the
    blank line before a "#", so the tokens of the whole are the tokens of the pieces, one
    after the other); otherwise the whole text as one piece."""
    if not parts:
        return []
    if any(not p.startswith(HEADER) for p in parts[1:]):
        return ["\n\n".join(parts)]
    return [p + "\n\n" for p in parts[:-1]] + [parts[-1]]


def count_joined(parts: list[str]) -> int:
    """Tokens of `"\n\n".join(parts)`, exactly, from counts of its `joined_pieces` (which
    recur across agents and rounds, so they come from the cache)."""
    return sum(count(p) for p in joined_pieces(parts))


def assemble(sections: list[Section], budget: int) -> Assembled:
    """Render sections (in the given order) within `budget` tokens for the whole context:
    each section's own limit first, then the least important sections give up lines."""
    plan = _Plan(sections)
    for s in sections:
        while plan.used(s) > s.max_tokens and plan.drop(s, "section_limit"):
            pass
    while True:
        # Fast on per-line estimates, then confirmed by an exact count of the final text.
        while plan.estimate() > budget and plan.drop_by_priority():
            pass
        system_parts, observation_parts = plan.parts("system"), plan.parts("observation")
        system_pieces, observation_pieces = (joined_pieces(system_parts),
                                             joined_pieces(observation_parts))
        n_system = sum(count(p) for p in system_pieces)
        n_observation = sum(count(p) for p in observation_pieces)
        if n_system + n_observation <= budget or not plan.drop_by_priority():
            break
    # Per section: its header and lines, each counted on its own (cached: lines recur
    # across agents), so within a few tokens of the section's text; the totals are exact.
    tokens = {s.name: plan.used(s) for s in sections}
    tokens.update(system=n_system, observation=n_observation)
    tokens["total"] = n_system + n_observation
    system, observation = "\n\n".join(system_parts), "\n\n".join(observation_parts)
    return Assembled(system, observation, tokens, plan.trimmed,
                     {name: len(k) for name, k in plan.keep.items()},
                     (*system_pieces, *observation_pieces),
                     {name: tuple(sorted(k)) for name, k in plan.keep.items()})


def accounting_rows(assembled: Assembled) -> list[tuple[str, int, int | None, str]]:
    """The budget accounting of one assembled context, as rows of the `context` table
    (section, tokens, lines kept, the lines trimmed as JSON with their provenance), one
    per section and a `total` row: built where the context is (the driver or a shard),
    so only these rows, not the trimmed lines, travel back."""
    by_section: dict[str, list] = {}
    for t in assembled.trimmed:
        by_section.setdefault(t.section, []).append(
            {"reason": t.reason, "text": t.text, "provenance": t.provenance})
    return [(section, assembled.tokens[section], lines,
             json.dumps(by_section.get(section, []), default=str))
            for section, lines in [*assembled.kept.items(), ("total", None)]]
