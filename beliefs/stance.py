"""Stance of a free text (an LLM agent's post) towards each topic: a small lexicon with
word boundaries, negation and intensity.

The estimate is per topic, in [-1, 1], and NaN for topics the text does not take a stance
on (a post only moves the topics it addresses, docs/beliefs.md). How it works:

1. The text is cut into clauses at sentence ends and at contrast words ("but", "however",
   "although", …), and each clause into parts at "and", "or" and commas.
2. Topics are found on word boundaries (`beliefs.topics.TopicMatcher` patterns).
3. Cue phrases are found in each part: support terms (+), oppose terms (−) and undecided
   terms (0). A negator ("not", "never", "n't", "no", …) up to three words before a cue
   flips it: "do not support" is −, "never opposed" +, "isn't a good idea" −; "I don't
   think …" flips the rest of its clause. An intensifier ("strongly", "totally", …) makes
   a cue ±0.9 instead of ±0.5, a softener ("somewhat", "kind of", …) ±0.25. A cue after
   "used to" is a past stance and is dropped.
4. A cue counts for the nearest topic of its part (ties: the topic after the cue, as verbs
   precede their objects). A part with cues but no topic ("…, safe and reliable") counts
   for the topics of the nearest part that has some; a part with a topic but no cue
   ("support X and Y", "X and Y are terrible") borrows the cues of the nearest part that
   has some (flipped if it is negated: "… and not Y"). A sentence naming no topic ("It is
   a bad idea.") counts for the topics of the one before, for topics without a cue of
   their own.
5. A topic's stance is the mean of its cues' values.

`method` is "lexicon" when at least one topic got a stance, else "none". The rule-based
agents' posts ("I strongly support the carbon tax. …", `agents/post_text.py`) are read back
into the stance bins they were written from; accuracy on a labelled set is in
docs/models.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shoal.beliefs.topics import TopicMatcher

STRONG, PLAIN, WEAK = 0.9, 0.5, 0.25
NEGATION_WINDOW = 3  # words between a negator and the cue it flips


def _verb(stem: str, *, e: bool = False, double: bool = False) -> list[str]:
    """A verb and its -s, -ed, -ing forms ('support' → supports, supported, supporting)."""
    if e:  # oppose → opposes, opposed, opposing
        base = stem[:-1]
        return [stem, stem + "s", base + "ed", base + "ing"]
    last = stem[-1] if double else ""
    return [stem, stem + "s", stem + last + "ed", stem + last + "ing"]


_SUPPORT_WORDS = [
    *_verb("support"), "supporter", "supporters", "supportive", *_verb("favor"),
    *_verb("favour"), *_verb("endorse", e=True), *_verb("welcome", e=True),
    *_verb("love", e=True), *_verb("approve", e=True), *_verb("applaud"),
    *_verb("embrace", e=True), *_verb("champion"), *_verb("agree"), *_verb("help"),
    *_verb("benefit"), *_verb("improve", e=True), "great", "good", "excellent",
    "brilliant", "fantastic", "amazing", "wonderful", "awesome", "smart", "sensible",
    "necessary", "needed", "essential", "overdue", "beneficial", "helpful", "promising",
    "positive", "worthwhile", "fair", "best", "better", "pro", "yes", "backing", "clean",
    "safe", "safer", "reliable", "affordable", "works", "answer", "solution", "hopeful",
    "optimistic", "excited", "glad", "proud", "thrilled",
]
_OPPOSE_WORDS = [
    *_verb("oppose", e=True), "opposition", "against", *_verb("reject"), *_verb("disagree"),
    *_verb("hate", e=True), *_verb("dislike", e=True), *_verb("hurt"), *_verb("harm"),
    *_verb("ban", double=True), *_verb("scrap", double=True), *_verb("abolish"),
    *_verb("repeal"), *_verb("fail"), "failure", "bad", "terrible", "awful", "horrible",
    "dangerous", "harmful", "mistake", "disaster", "disastrous", "waste", "wasteful",
    "wrong", "scam", "stupid", "ridiculous", "nonsense", "unfair", "unnecessary",
    "pointless", "useless", "reckless", "worried", "worry", "worrying", "afraid",
    "fear", "fears", "worst", "worse", "anti", "overpriced", "opposing", "sceptical",
    "skeptical", "doubt", "doubts", "expensive", "costly", "unaffordable", "problem",
    "problems", "problematic", *_verb("scare", e=True), "scary", "frightening",
    "alarming", "threat", "nightmare", "catastrophe", "catastrophic", *_verb("ruin"),
    *_verb("destroy"), "concerned", "concerning", "unsafe", "unreliable",
]
_NEUTRAL_PHRASES = [
    "undecided", "unsure", "not sure", "on the fence", "mixed feelings", "torn",
    "both sides", "it depends", "depends on the details", "need to see more",
    "can't decide", "cannot decide", "neutral", "no opinion", "ambivalent",
    "haven't decided", "have not decided", "don't know", "do not know", "no strong view",
    "no strong feelings", "still reading up", "make up my mind",
]
_SUPPORT_PHRASES = [
    "in favor of", "in favour of", "all for", "long overdue", "good idea", "great idea",
    "yes to", "vote yes", "voting yes", "thumbs up", "big fan of", "a fan of",
    "on board with", "get behind", "stand behind", "stand with", "worth it", "the way to go",
    "makes sense", "make sense", "step forward", "step in the right direction",
    "way forward", "right thing", "the future", "need more", "more of", "i like",
    "we like", "kinda like", "really like", "do like", "actually like", "still like",
]
_OPPOSE_PHRASES = [
    "bad idea", "terrible idea", "no to", "say no", "vote no", "voting no", "thumbs down",
    "against it", "step backward", "step backwards", "step back", "rip off", "rip-off",
    "money pit", "waste of money", "waste of time", "get rid of", "do away with",
    "no way", "not a fan", "never again", "too far", "wrong direction", "not so much",
    "doesnt work", "dont work", "wont work", "didnt work", "never work", "never works",
    "too slow",
]
_NEGATORS = {
    "not", "no", "never", "neither", "nor", "cannot", "hardly", "barely", "without",
    "nobody", "none", "nothing", "isnt", "arent", "wasnt", "werent", "dont", "doesnt",
    "didnt", "wont", "wouldnt", "cant", "couldnt", "shouldnt", "aint", "hasnt", "havent",
    "hadnt",
}
_INTENSIFIERS = {
    "strongly", "really", "totally", "absolutely", "completely", "fully", "very", "deeply",
    "firmly", "wholeheartedly", "100%", "so", "truly", "entirely", "definitely",
    "passionately", "utterly", "extremely", "incredibly", "hugely", "vehemently",
}
_SOFTENERS = {
    "somewhat", "slightly", "mildly", "tentatively", "partly", "partially", "cautiously",
    "kinda", "sorta", "leaning", "lean", "moderately", "fairly", "reluctantly",
}
_SOFT_PHRASES = ("kind of", "sort of", "a bit", "a little", "more or less")
# "I don't think X is dangerous": the negation governs the whole rest of the clause.
_NEG_RAISING = ("dont think", "do not think", "dont believe", "do not believe",
                "never thought", "not convinced")
_PAST = ("used to", "previously", "at first")  # a cue after these is a past stance

# Clause boundaries: sentence ends, semicolons, dashes, line breaks and contrast words.
_CLAUSE = re.compile(
    r"[.!?;\n]+|\s[-–—]\s|,?\s+\b(?:but|however|although|though|whereas|yet|while)\b",
    re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9%]+")  # on normalised text: apostrophes are gone


def _phrase_pattern(phrases: Sequence[str]) -> re.Pattern[str]:
    alts = sorted({p.replace("'", "") for p in phrases}, key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(re.escape(a) for a in alts) + r")\b")


_CUES = (  # (pattern, polarity); matched in this order, earlier matches win overlaps
    (_phrase_pattern(_NEUTRAL_PHRASES), 0),
    (_phrase_pattern(_SUPPORT_PHRASES), 1),
    (_phrase_pattern(_OPPOSE_PHRASES), -1),
    (_phrase_pattern(_SUPPORT_WORDS), 1),
    (_phrase_pattern(_OPPOSE_WORDS), -1),
)
_SOFT = _phrase_pattern(_SOFT_PHRASES)
_RAISING = _phrase_pattern(_NEG_RAISING)
_PAST_MARK = _phrase_pattern(_PAST)
# Parts of a clause: "X is bad and Y is great", "clean, safe and reliable".
_PART = re.compile(r",|&|\b(?:and|or|plus)\b")


@dataclass
class _Cue:
    start: int  # character offsets in the normalised clause
    end: int
    value: float  # signed stance in [-1, 1]


def _normalise(text: str) -> str:
    """Lower case, straight apostrophes dropped ("isn't" → "isnt") so word boundaries and
    the lexicon line up; character offsets of topics are taken in this same string."""
    return text.lower().replace("’", "'").replace("'", "")


def _cues(clause: str) -> list[_Cue]:
    """Stance cues of one normalised clause part, with negation and intensity applied."""
    taken = np.zeros(len(clause) + 1, dtype=bool)
    found: list[tuple[int, int, int]] = []
    for pattern, polarity in _CUES:
        for m in pattern.finditer(clause):
            if taken[m.start():m.end()].any():
                continue
            taken[m.start():m.end()] = True
            found.append((m.start(), m.end(), polarity))
    words = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(clause)]
    raised = _RAISING.search(clause)
    out = []
    previous_end = 0
    for start, end, polarity in sorted(found):
        # Modifiers reach a cue from up to three words before it, never across another cue
        # (so "not sure" — itself a cue — does not flip what follows).
        before = [w for w in words if w[0] >= previous_end and w[1] <= start]
        before = before[-NEGATION_WINDOW:]
        window = clause[before[0][0] if before else start:start]
        previous_end = end
        if _PAST_MARK.search(window):
            continue
        negated = any(w[2] in _NEGATORS for w in before)
        if raised is not None and raised.end() <= start:
            negated = not negated
        strength = PLAIN
        if any(w[2] in _INTENSIFIERS for w in before):
            strength = STRONG
        elif any(w[2] in _SOFTENERS for w in before) or _SOFT.search(window):
            strength = WEAK
        if polarity == 0:
            if not negated:
                out.append(_Cue(start, end, 0.0))
            continue
        value = polarity * strength
        out.append(_Cue(start, end, -value if negated else value))
    return out


def _negated(part: str) -> bool:
    """Does a part carry a negator of its own ("… and not nuclear power")?"""
    return any(w in _NEGATORS for w in _TOKEN.findall(part))


@dataclass
class _Part:
    spans: list[list[tuple[int, int]]]  # per topic, mention spans in this part
    topics: list[int]
    cues: list[_Cue]
    negated: bool


class StanceEstimator:
    """Estimates per-topic stance of free texts for a fixed topic list."""

    def __init__(self, keywords: list[list[str]]):
        self.n_topics = len(keywords)
        self.matcher = TopicMatcher([[_normalise(k) for k in kws] for kws in keywords])

    def estimate(self, text: str) -> tuple[np.ndarray, str]:
        """(stance [T] with NaN where the text takes no stance, method)."""
        n = self.n_topics
        direct: list[list[float]] = [[] for _ in range(n)]
        carried: list[list[float]] = [[] for _ in range(n)]
        last_topics: list[int] = []
        for clause in _CLAUSE.split(_normalise(text or "")):
            parts = [self._part(p) for p in _PART.split(clause or "") if p.strip()]
            topics = sorted({t for p in parts for t in p.topics})
            if not topics:
                for t in last_topics:  # "It is a bad idea." refers back
                    carried[t] += [c.value for p in parts for c in p.cues]
                continue
            last_topics = topics
            for t, values in enumerate(self._assign(parts)):
                direct[t] += values
        stance = np.full(n, np.nan)
        for t in range(n):
            values = direct[t] or carried[t]
            if values:
                stance[t] = float(np.clip(np.mean(values), -1.0, 1.0))
        return stance, ("lexicon" if not np.isnan(stance).all() else "none")

    def _part(self, text: str) -> _Part:
        spans = self.matcher.spans(text)
        return _Part(spans, [t for t in range(self.n_topics) if spans[t]], _cues(text),
                     _negated(text))

    def _assign(self, parts: list[_Part]) -> list[list[float]]:
        """Cue values per topic within one clause. Cues go to the nearest topic of their
        part; a part with cues but no topic ("…, safe and reliable") gives them to the
        nearest part with topics (the one before first); a part with a topic but no cue
        ("support X and Y", "X and Y are terrible") borrows the cues of the nearest part
        with cues, flipped if it is negated ("… and not Y")."""
        got: list[list[float]] = [[] for _ in range(self.n_topics)]
        for p in parts:
            if p.topics:
                for cue in p.cues:
                    got[self._nearest(cue, p.spans, p.topics)].append(cue.value)
        for i, p in enumerate(parts):
            if p.cues and not p.topics:
                j = _nearest_part(parts, i, lambda q: bool(q.topics))
                if j is not None:
                    for t in parts[j].topics:
                        got[t] += [c.value for c in p.cues]
        for i, p in enumerate(parts):
            if p.topics and not p.cues:
                j = _nearest_part(parts, i, lambda q: bool(q.cues))
                if j is None:
                    continue
                sign = -1.0 if p.negated and not parts[j].negated else 1.0
                for t in p.topics:
                    if not got[t]:
                        got[t] += [sign * c.value for c in parts[j].cues]
        return got

    @staticmethod
    def _nearest(cue: _Cue, spans: list[list[tuple[int, int]]], mentioned: list[int]) -> int:
        """The mentioned topic closest to the cue (ties: the one after the cue)."""
        best, key = mentioned[0], (np.inf, 1)
        for t in mentioned:
            for start, end in spans[t]:
                if start >= cue.end:
                    k = (start - cue.end, 0)
                elif end <= cue.start:
                    k = (cue.start - end, 1)
                else:
                    k = (0, 0)
                if k < key:
                    best, key = t, k
        return best


def _nearest_part(parts: list[_Part], i: int, wanted) -> int | None:
    """Index of the closest part before i satisfying `wanted`, else the closest after."""
    for j in range(i - 1, -1, -1):
        if wanted(parts[j]):
            return j
    for j in range(i + 1, len(parts)):
        if wanted(parts[j]):
            return j
    return None


def _keywords(topics) -> tuple[tuple[str, ...], ...]:
    """Keyword lists from config topic specs (name, label, keywords), a TopicMatcher's
    source lists, plain names, or lists of keywords."""
    out = []
    for t in topics:
        if isinstance(t, str):
            out.append((t.replace("_", " "),))
        elif hasattr(t, "keywords"):
            out.append(tuple(sorted({t.name.replace("_", " "), getattr(t, "label", None) or "",
                                     *t.keywords} - {""})))
        else:
            out.append(tuple(t))
    return tuple(out)


@lru_cache(maxsize=32)
def _estimator(keywords: tuple[tuple[str, ...], ...]) -> StanceEstimator:
    return StanceEstimator([list(k) for k in keywords])


def estimate_stance(text: str, topics) -> tuple[np.ndarray, str]:
    """Per-topic stance of `text` in [-1, 1] (NaN where it takes none) and the method used,
    "lexicon" or "none". `topics`: the config's topic specs (their name, label and
    keywords are matched on word boundaries), topic names, or lists of keywords."""
    return _estimator(_keywords(topics)).estimate(text)
