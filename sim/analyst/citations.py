"""Citations in the analyst's text, and the verifier that checks each sentence against
the rows it cites (docs/analyst.md).

A sentence cites with bracketed tags:

    [post 123]              the post's row (with its engagement counts)
    [agent 12 round 5]      the agent's beliefs and actions at the end of round 5
    [step 3]                the result of the section's 3rd tool call (re-run to check)

(several ids may share a tag: `[post 1, 2]`, `[step 2, 3]`). A quotation (“…” or "…")
is never split into sentences at the full stops inside it: a quoted answer with its
citation is one claim. The verifier resolves every tag to rows, then checks every number
the sentence states against them: a number is supported if some value of the cited rows
equals it as written (rounded to the decimals shown, sign aside), or as a percentage; the
numbers inside a quotation found word for word in a cited value (an interview answer, a
post's text; "…" may stand for left-out words) are supported by it. Verdicts:

    verified        every citation resolves and every number is supported
    unresolved      a citation names a post, agent, round or step that does not exist,
                    or a re-run step no longer gives the result the model saw
    unsupported     the citations resolve but a number is not in their rows
    uncited         the sentence states a number but cites nothing
    interpretation  no number and no citation: prose around the facts, not checked
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

_TAG = re.compile(r"\[(post|posts|agent|step|steps)\s+([^\]]*)\]", re.IGNORECASE)
_AGENT = re.compile(r"^\s*(\d+)\s*,?\s*(?:at\s+)?round\s+(\d+)\s*$", re.IGNORECASE)
# A number as written: optional minus (ASCII or U+2212), digits with thousands commas or
# decimals, or a bare decimal (".9"), an optional exponent ("5e-3"); "%" marks a percentage.
# A multiplier ("3x") does not hide it from the check; an ordinal ("2nd") is no number.
_NUMBER = re.compile(r"(?<![\w.\-\u2212])([-\u2212]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
                     r"|\.\d+)(?:[eE][-+]?\d+)?)(%?)(?:(?![\w])|(?=[x\u00d7](?!\w)))")
# A number that names a cited thing ("post 447", "agent 12", "round 5", "step 3").
_NAMED = re.compile(r"\b(post|agent|round|step)s?\s+#?(\d+)\b", re.IGNORECASE)
# Keys of a tool result that echo what the model asked (its query, question, limit) or
# number the call: not evidence of anything the run holds.
_ECHOED = frozenset({"query", "question", "note", "citation", "step", "limit"})
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“(\[*_])")
_QUOTES = {"“": "”", "«": "»", '"': '"'}  # opening → closing
_MASK = "\ue000"  # stands for a sentence end inside a quotation while splitting
_GAP = re.compile(r"\s*(?:…|\.\.\.)\s*")  # words left out of a quotation
VERDICTS = ("verified", "unresolved", "unsupported", "uncited", "interpretation")


@dataclass
class Citation:
    """One cited thing: kind post | agent | step, and its key."""

    kind: str
    key: tuple[int, ...]

    def label(self) -> str:
        """The citation as written in canonical form."""
        if self.kind == "agent":
            return f"agent {self.key[0]} round {self.key[1]}"
        return f"{self.kind} {self.key[0]}"


@dataclass
class Claim:
    """A sentence of a section, its citations and the verifier's verdict."""

    sentence: str
    citations: list[Citation]
    bad_tags: list[str] = field(default_factory=list)  # tags that do not parse
    verdict: str = ""
    detail: str = ""
    evidence: list[dict] = field(default_factory=list)  # {citation, columns, rows}
    paragraph: int = 0

    @property
    def text(self) -> str:
        """The sentence without its citation tags."""
        # (" .9" keeps its space: it is a number, not a full stop)
        return re.sub(r"\s+([.,;:!?])(?!\d)", r"\1", _TAG.sub("", self.sentence)).strip()


def sentences(text: str) -> Iterator[str]:
    """The sentences of a Markdown text, paragraph by paragraph (a tag standing after
    the full stop belongs to the sentence before it). Headings and blank lines are
    skipped."""
    for para in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in para.splitlines()
                 if ln.strip() and not ln.lstrip().startswith("#")]
        if not lines:
            continue
        joined = " ".join(lines)
        masked = joined
        for start, end in quotations(joined):  # (a full stop inside a quote ends nothing)
            masked = (masked[:start] + re.sub(r"[.!?]", _MASK, masked[start:end])
                      + masked[end:])
        parts, at = [], 0
        for piece in _SENTENCE_END.split(masked):  # the pieces of the unmasked text
            at = masked.index(piece, at)
            parts.append(joined[at:at + len(piece)].strip())
            at += len(piece)
        parts = [p for p in parts if p]
        merged: list[str] = []
        for part in parts:
            if merged and not _TAG.sub("", part).strip(" .;,"):
                merged[-1] += " " + part  # only tags: they cite the sentence before
            else:
                merged.append(part)
        yield from merged
        yield "\n"  # paragraph break


def quotations(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each closed quotation of `text`, outermost only: “…”, «…», and
    "…" outside them. A quotation never closed is not one (a stray inch mark)."""
    spans, i = [], 0
    while i < len(text):
        closing = _QUOTES.get(text[i])
        if closing is None:
            i += 1
            continue
        depth, j = 1, i + 1
        while j < len(text) and depth:
            if text[j] == closing and (closing != '"' or depth == 1):
                depth -= 1
            elif text[j] == text[i] and closing != '"':
                depth += 1  # a nested quotation of the same kind
            j += 1
        if depth:
            i += 1
            continue
        spans.append((i, j))
        i = j
    return spans


def _quoted(text: str, evidence: list[dict]) -> str:
    """`text` without the quotations found word for word in a string of `evidence`
    (their numbers are the cited value's own)."""
    values = [" ".join(v.split()) for v in _strings(_data(evidence))]
    kept, at = [], 0
    for start, end in quotations(text):
        inner = text[start + 1:end - 1]
        pieces = [" ".join(p.split()) for p in _GAP.split(inner)]
        pieces = [p.strip(" .,;:") for p in pieces if p.strip(" .,;:")]
        if pieces and any(all(_has_words(v, p) for p in pieces) for v in values):
            kept.append(text[at:start])
            at = end
    return "".join(kept) + text[at:]


def _has_words(value: str, piece: str) -> bool:
    """Whether `piece` occurs in `value` as whole words (a quoted "6" is not in "16")."""
    return re.search(rf"(?<!\w){re.escape(piece)}(?!\w)", value) is not None


def _data(obj: Any) -> Any:
    """A cited result without what merely echoes the call (`_ECHOED`): the model's own
    query or question is not evidence for a quotation or a number."""
    if isinstance(obj, dict):
        return {k: _data(v) for k, v in obj.items() if k not in _ECHOED}
    if isinstance(obj, list | tuple):
        return [_data(v) for v in obj]
    return obj


def _leaves(obj: Any) -> Iterator[Any]:
    """Every value inside a JSON value that is not a list or an object."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def _strings(obj: Any) -> Iterator[str]:
    """Every string inside a JSON value."""
    return (v for v in _leaves(obj) if isinstance(v, str))


def parse_claim(sentence: str) -> Claim:
    """A sentence with its citations parsed."""
    citations, bad = [], []
    for kind, body in _TAG.findall(sentence):
        kind = kind.lower().rstrip("s")
        if kind == "agent":
            m = _AGENT.match(body)
            if m:
                citations.append(Citation("agent", (int(m.group(1)), int(m.group(2)))))
            else:
                bad.append(f"[{kind} {body}]")
            continue
        for part in re.split(r"\s*,\s*", body.strip()):
            if part.isdigit():
                citations.append(Citation(kind, (int(part),)))
            elif part:
                bad.append(f"[{kind} {part}]")
    unique = list({(c.kind, c.key): c for c in citations}.values())
    return Claim(sentence, unique, bad)


def numbers(text: str) -> list[tuple[float, int, bool, str]]:
    """The numbers a text states: (value, decimals shown, is a percentage, as written)."""
    out = []
    for m in _NUMBER.finditer(text):
        raw = m.group(1).replace(",", "").replace("\u2212", "-")
        mantissa, _, exponent = raw.lower().partition("e")
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        if exponent:  # 5e-3: the decimals its value shows
            decimals = max(0, decimals - int(exponent))
        out.append((float(raw), decimals, m.group(2) == "%", m.group(0)))
    return out


def supports(value: float, decimals: int, percent: bool, evidence: list[float]) -> bool:
    """Whether a stated number matches some evidence value, as rounded when written.

    Sign aside ("fell by 0.12" is -0.12), except that a number written with a minus sign
    needs a negative value. A whole number is not the rounding of a fraction between -1
    and 1 ("1" is not 0.57, "0" is not 0.3). A percentage is a fraction times 100
    (0.452 is "45%"), or a value already in percent, which is then at least 1 in size
    ("0.32%" is not 0.32)."""
    tolerance = 0.5 * 10.0 ** -decimals + 1e-9
    stated = abs(value)
    for v in evidence:
        if value < 0 and v > 0:
            continue
        size = abs(v)
        if percent:
            if abs(size - stated / 100) <= tolerance / 100:
                return True
            if size >= 1 and abs(size - stated) <= tolerance:
                return True
            continue
        if abs(size - stated) > tolerance:
            continue
        if decimals == 0 and size < 1 and abs(size - round(size)) > 1e-9:
            continue  # a whole number stated for a fraction
        return True
    return False


def numeric_values(obj: Any) -> Iterator[float]:
    """Every number inside a JSON value (booleans excluded; numeric strings included)."""
    for v in _leaves(obj):
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int | float):
            if not (isinstance(v, float) and math.isnan(v)):
                yield float(v)
        elif isinstance(v, str):
            with contextlib.suppress(ValueError):
                yield float(v)


# A resolver: the evidence of a citation ({"columns", "rows", ...}), or None if it does
# not resolve, plus the reason why not.
Resolver = Callable[[Citation], tuple[dict | None, str]]


def verify(claim: Claim, resolve: Resolver) -> Claim:
    """Set the claim's verdict, detail and evidence."""
    stated = numbers(claim.text)
    if not claim.citations and not claim.bad_tags:
        claim.verdict = "uncited" if stated else "interpretation"
        claim.detail = ("states " + ", ".join(s[3] for s in stated) + " without a citation"
                        if stated else "")
        return claim
    problems = [f"{t}: not a citation this report knows" for t in claim.bad_tags]
    values: list[float] = []
    for c in claim.citations:
        evidence, why = resolve(c)
        if evidence is None:
            problems.append(f"[{c.label()}]: {why}")
            continue
        claim.evidence.append({"citation": c.label(), **evidence})
        values.extend(numeric_values(_data(_without_ids(evidence, c))))
    if problems:
        claim.verdict, claim.detail = "unresolved", "; ".join(problems)
        return claim
    # a quotation's numbers are its own; "post 123" is supported by citing post 123
    stated = numbers(_unnamed(_quoted(claim.text, claim.evidence), claim.citations))
    missing = [s[3] for s in stated if not supports(s[0], s[1], s[2], values)]
    if missing:
        claim.verdict = "unsupported"
        claim.detail = f"not in the cited rows: {', '.join(missing)}"
    else:
        claim.verdict = "verified"
    return claim


def _without_ids(evidence: dict, c: Citation) -> dict:
    """A post's or an agent's cited rows without the columns that are the citation's own
    key (`post_id`; `agent` and `round`): an id supports only the number that names it
    (`_unnamed`), not "45%" citing [post 45]."""
    own = {"post": ("post_id",), "agent": ("agent", "round")}.get(c.kind)
    columns, rows = evidence.get("columns"), evidence.get("rows")
    if not own or not isinstance(columns, list) or not isinstance(rows, list):
        return evidence
    keep = [i for i, name in enumerate(columns) if name not in own]
    return {**evidence, "columns": [columns[i] for i in keep],
            "rows": [[r[i] for i in keep] for r in rows if isinstance(r, list)]}


def _unnamed(text: str, citations: list[Citation]) -> str:
    """`text` without the numbers that name a cited thing as such ("post 123" citing
    [post 123], "agent 12" and "round 5" citing [agent 12 round 5], "step 3" citing
    [step 3]): only written that way does an id count as evidence for itself."""
    named = set()
    for c in citations:
        if c.kind == "agent":
            named |= {("agent", c.key[0]), ("round", c.key[1])}
        else:
            named.add((c.kind, c.key[0]))

    def drop(m: re.Match) -> str:
        return m.group(1) if (m.group(1).lower(), int(m.group(2))) in named else m.group(0)

    return _NAMED.sub(drop, text)


def citations_json(claim: Claim) -> str:
    """The claim's citations as JSON text (for the store)."""
    return json.dumps([c.label() for c in claim.citations] + claim.bad_tags)
