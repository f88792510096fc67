"""Extraction: from a text to entity mentions and facts, behind one interface with two
backends (registered in `shoal.core.registry.EXTRACTORS` by `memory/knowledge/extractors.py`):

- `offline` (default): no model, no download. Sentences are split with their character
  spans; mentions are capitalised name sequences and acronyms, stakeholder groups from a
  lexicon ("farmers", "small businesses"), the names the caller already knows (topics'
  keywords, known entities) and first-person subjects (the author of a post); facts are
  sentences where a mention is followed by a verb cue and another mention ("the Farmers'
  Union opposes the levy" → Farmers' Union –opposes→ levy), with negation ("does not
  support" → opposes). Keyphrases (for topics, `shoal init`) come from YAKE.
- `llm`: a tool call (`record_facts`) through the chat-model interface, its calls logged
  as `llm_calls` rows (`memory/knowledge/llm_extractor.py`).

Both return `Extraction`s: plain data, no ids; resolution into the graph is the caller's.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Protocol

ORG_WORDS = ("ministry", "department", "union", "council", "party", "association",
             "agency", "bank", "inc", "ltd", "corp", "company", "university", "commission",
             "government", "parliament", "committee", "federation", "institute", "board",
             "authority", "court", "league", "coalition", "group", "foundation", "society")
TITLES = ("minister", "president", "senator", "dr", "mr", "ms", "mrs", "professor",
          "mayor", "governor", "chancellor", "ceo", "chair", "secretary")
GROUPS = ("farmers", "workers", "commuters", "residents", "businesses", "unions", "students",
          "parents", "teachers", "doctors", "nurses", "drivers", "landlords", "tenants",
          "retailers", "consumers", "taxpayers", "households", "families", "pensioners",
          "employers", "employees", "investors", "environmentalists", "activists",
          "scientists", "economists", "voters", "citizens", "manufacturers", "airlines",
          "cyclists", "fishers", "miners", "patients", "homeowners", "renters", "exporters",
          "importers", "truckers", "shopkeepers", "youth", "retirees", "hospitals",
          "schools", "charities", "insurers", "utilities", "automakers", "shipowners")
# verb cue -> predicate (with polarity where it has one)
CUES = [
    (r"(?:do|does|did) not (?:support|back|endorse|favou?r)|no longer (?:supports?|backs?)",
     "opposes"),
    (r"(?:do|does|did) not oppose|no longer opposes?", "supports"),
    (r"supports?|supported|backs?|backed|endorses?|endorsed|welcomes?|welcomed|"
     r"favou?rs?|favou?red|praises?|praised|approves?|approved|champions?|championed|"
     r"(?:is|are|am|was|were) (?:in favou?r of|for)", "supports"),
    (r"oppose[sd]?|rejects?|rejected|critici[sz]es?|critici[sz]ed|condemns?|condemned|"
     r"fights?|fought|resists?|resisted|protests? against|protested against|"
     r"warns? against|warned against|(?:is|are|am|was|were) against", "opposes"),
    (r"proposes?|proposed|introduces?|introduced|announces?|announced|plans?|planned",
     "proposes"),
    (r"funds?|funded|pays? for|paid for|subsidi[sz]es?|subsidi[sz]ed", "funds"),
    (r"(?:would |will |could )?(?:affects?|affected|hits?|hurts?|burdens?|costs?|"
     r"benefits?|benefited|helps?|helped)", "affects"),
    (r"regulates?|regulated|taxes|taxed|bans?|banned|exempts?|exempted", "regulates"),
    (r"(?:is|are|am|was|were) undecided about|(?:is|are) unsure about", "is undecided about"),
]
_CUE = re.compile(r"\b(" + "|".join(f"(?:{c})" for c, _ in CUES) + r")\b", re.IGNORECASE)
_CUE_PRED = [(re.compile(rf"^(?:{c})$", re.IGNORECASE), p) for c, p in CUES]
_SENTENCE = re.compile(r"(?:[^.!?\n]|\n(?!\s*\n))+(?:[.!?]+|$)")  # a line break is a space
# (One run of spaces on each side of a connector: `\s+(?:of…)?\s*` would try every split of
# a long run of spaces, quadratic in its length.)
_NAME = re.compile(r"\b(?:[A-Z][\w&'’.-]*[\w&'’])(?:\s+(?:(?:of|for|and|on|the|de|du|van|von)"
                   r"\s+)?[A-Z][\w&'’.-]*[\w&'’])*(?:\s+\([A-Z][A-Za-z0-9&]{1,9}\))?")
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9&]{1,9}\b")
_GROUP = re.compile(r"\b(?:(?:small|large|rural|urban|local|young|older|low-income|"
                    r"high-income|independent|public|private|domestic|foreign)\s+)?(?:"
                    + "|".join(GROUPS) + r")\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:I|we|We)\b")
_STARTERS = {"the", "a", "an", "in", "on", "at", "this", "that", "these", "those", "it",
             "we", "they", "he", "she", "i", "but", "and", "or", "if", "when", "while",
             "after", "before", "since", "as", "so", "yet", "for", "with", "without",
             "under", "over", "from", "to", "by", "of", "hot", "let", "honestly",
             "thinking", "people", "nobody", "everyone", "breaking", "today", "yesterday",
             "tomorrow", "both", "many", "some", "most", "all", "each", "every", "our",
             "their", "its", "his", "her", "my", "your", "there", "here", "what", "why",
             "how", "who", "which", "where", "not", "no", "yes", "also", "however",
             "meanwhile", "still", "now", "then", "last", "next", "new", "later",
             "earlier", "soon", "first", "finally", "instead", "indeed", "monday",
             "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january",
             "february", "march", "april", "may", "june", "july", "august", "september",
             "october", "november", "december"}


@dataclass
class Mention:
    """A name found in the text (character offsets in the whole text)."""

    name: str
    type: str
    start: int
    end: int


@dataclass
class Fact:
    """subject –predicate→ object, stated by the sentence `text` at `span`."""

    subject: Mention
    predicate: str
    object: Mention
    text: str
    span: tuple[int, int]


@dataclass
class Extraction:
    """What one text yields."""

    mentions: list[Mention] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)


class Extractor(Protocol):
    """Extraction backends: `extract(texts, known)` gives one `Extraction` per text;
    `known` maps names the caller knows (topic keywords, entities) to their types."""

    def extract(self, texts: list[str], known: dict[str, str]) -> list[Extraction]: ...


def trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """The span without the whitespace at its ends (empty: start == end)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


MAX_SENTENCE = 1000  # characters: a longer "sentence" is cut into clauses (see `sentences`)
_CLAUSE_END = (";", ":", ",", "\n", " ")  # where a long sentence is cut, best first


def sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of `text` (trimmed). A sentence longer than
    `MAX_SENTENCE` (a text without full stops, a list run together) is cut into pieces of
    at most that length, each at the last clause break (";", ":", ",", a line break, then
    a space) in its second half: so a fact's text stays a sentence's length, and the work
    per cue does not grow with the paragraph."""
    out = []
    for m in _SENTENCE.finditer(text):
        start, end = trimmed(text, m.start(), m.end())
        while end - start > MAX_SENTENCE:
            stop = start + MAX_SENTENCE
            cut = next((i + 1 for i in (text.rfind(c, start + MAX_SENTENCE // 2, stop)
                                        for c in _CLAUSE_END) if i >= 0), stop)
            a, b = trimmed(text, start, cut)
            if b > a:
                out.append((a, b))
            start, end = trimmed(text, cut, end)
        if end > start:
            out.append((start, end))
    return out


def _type(name: str, before: str) -> str:
    words = name.lower().replace("’", "'").split()
    if any(w.strip("'s") in ORG_WORDS for w in words):
        return "organisation"
    prev = before.rstrip().split()[-1:] if before.strip() else []
    if prev and prev[0].lower().strip(".") in TITLES:
        return "person"
    if name.isupper() and len(name) <= 10:
        return "organisation"
    return "name"


def mentions(text: str, known: dict[str, str]) -> list[Mention]:
    """Every mention in `text`, leftmost-longest, none overlapping."""
    found: list[Mention] = []
    lower = text.lower()
    for name, type_ in sorted(known.items(), key=lambda kv: (-len(kv[0]), kv[0])):
        for m in re.finditer(rf"\b{re.escape(name.lower())}\b", lower):
            found.append(Mention(text[m.start():m.end()], type_, m.start(), m.end()))
    for m in _GROUP.finditer(text):
        found.append(Mention(m.group(0).lower(), "group", m.start(), m.end()))
    for m in _NAME.finditer(text):
        name = m.group(0)
        words = name.split()
        lead = 0  # (an index, not `words[1:]` in a loop: "The The The …" stays linear)
        while lead < len(words) and words[lead].lower().strip("'’") in _STARTERS:
            lead += 1
        words = words[lead:]
        if not words or (len(words) == 1 and words[0].lower() in _STARTERS):
            continue
        start = m.start() + name.index(words[0])
        name = name[name.index(words[0]):].rstrip("'’")
        end = start + len(name)
        name = " ".join(name.split())  # a name broken over two lines
        type_ = _type(name, text[max(0, start - 40):start])  # a title just before it
        if len(words) > 1 and words[0].lower().strip(".") in TITLES:  # "Minister Ana Costa"
            type_ = "person"
        if _CUE.fullmatch(name) or name.lower() in _STARTERS:
            continue
        found.append(Mention(name, type_, start, end))
    for m in _ACRONYM.finditer(text):
        if m.group(0).lower() not in _STARTERS and m.group(0) != "I":
            found.append(Mention(m.group(0), "organisation", m.start(), m.end()))
    found.sort(key=lambda x: (x.start, -(x.end - x.start)))
    out: list[Mention] = []
    for mention in found:  # known names and longer names win overlaps (sorted first)
        if out and mention.start < out[-1].end:
            continue
        out.append(mention)
    return out


_PHRASE = re.compile(r"\s*(?:(?:the|a|an|this|these|that|its|their|our)\s+)?"
                     r"((?:[A-Za-z][\w'’-]*)(?:\s+[A-Za-z][\w'’-]*){0,4})")
_PHRASE_END = frozenset([
    "because", "and", "but", "as", "if", "saying", "that", "which", "who", "for", "from",
    "before", "after", "outside", "inside", "until", "when", "while", "with", "without", "to",
    "in", "on", "of", "at", "by", "than", "so", "since", "unless", "whether", "where", "said",
    "says", "calls", "call", "warns", "warned", "arguing", "argue"
])


def object_phrase(text: str, at: int) -> Mention | None:
    """The noun phrase right after position `at` ("the carbon levy on fuel" → "carbon
    levy"): an object the sentence names without capitals."""
    m = _PHRASE.match(text, at)
    if not m:
        return None
    words: list[str] = []
    for w in m.group(1).split():
        low = w.lower()
        if low == "of" and words and "of" not in [x.lower() for x in words]:
            words.append(w)  # "the loss of parking": one "of" belongs to the phrase
            continue
        if low in _PHRASE_END or (low in _STARTERS and words):
            break
        words.append(w)
    while words and words[-1].lower() == "of":
        words.pop()
    if not words or words[0].lower() in _STARTERS:
        return None
    start = m.start(1)
    name = text[start:start + len(" ".join(words))]
    return Mention(name.lower(), "issue", start, start + len(name))


def _predicate(cue: str) -> str:
    for pattern, predicate in _CUE_PRED:
        if pattern.match(cue):
            return predicate
    return "related to"


def facts(text: str, found: list[Mention], author: str | None = None) -> list[Fact]:
    """Sentence-level facts: the mention closest before a verb cue, the cue, the mention
    closest after it. With `author`, a first-person subject ("I", "we") is the author."""
    out = []
    starts = [m.start for m in found]  # sorted: `mentions` returns them in text order
    for start, end in sentences(text):
        lo, hi = bisect_left(starts, start), bisect_left(starts, end)
        inside = [m for m in found[lo:hi] if m.end <= end]
        # Mentions do not overlap, so their ends are sorted too: the ones around a cue are
        # found by bisection, not by a scan of the sentence per cue.
        begins, ends = [m.start for m in inside], [m.end for m in inside]
        sentence = text[start:end]
        said = " ".join(sentence.split())
        pronouns = [(start + p.start(), start + p.end()) for p in
                    _FIRST_PERSON.finditer(sentence)] if author is not None else []
        pronoun_ends = [b for _, b in pronouns]
        for cue in _CUE.finditer(sentence):
            c0, c1 = start + cue.start(), start + cue.end()
            i, j = bisect_right(ends, c0), bisect_left(begins, c1)
            subject = inside[i - 1] if i else None
            following = inside[j] if j < len(inside) else None
            k = bisect_right(pronoun_ends, c0)
            if k and (subject is None or pronouns[k - 1][0] > subject.end):
                a, b = pronouns[k - 1]
                subject = Mention(author, "agent", a, b)
            obj = following if following is not None and following.start - c1 <= 12 else (
                object_phrase(text, c1) or following)
            if subject is None or obj is None:
                continue
            out.append(Fact(subject, _predicate(cue.group(0)), obj, said, (start, end)))
    return out


class OfflineExtractor:
    """Mentions and pattern facts, no model (see the module docstring)."""

    def extract(self, texts: list[str], known: dict[str, str],
                authors: list[str | None] | None = None) -> list[Extraction]:
        """One extraction per text; `authors`: who wrote each (first-person subjects)."""
        out = []
        for i, text in enumerate(texts):
            found = mentions(text, known)
            author = authors[i] if authors else None
            out.append(Extraction(found, facts(text, found, author)))
        return out


def keyphrases(text: str, n: int = 10, max_words: int = 3) -> list[tuple[str, float]]:
    """The `n` most characteristic phrases of a text (YAKE: lower score = more
    characteristic), for topics and keywords."""
    import yake

    extractor = yake.KeywordExtractor(lan="en", n=max_words, top=n, dedupLim=0.7)
    return [(phrase, float(score)) for phrase, score in extractor.extract_keywords(text)]
