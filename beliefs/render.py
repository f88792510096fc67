"""Beliefs in words for an agent's system text: stance and confidence labels per topic,
and the accounts the agent trusts and distrusts. Never raw numbers (a model reads words
more reliably, and numbers invite it to do arithmetic on them)."""

from __future__ import annotations

import numpy as np

from shoal.beliefs.trust import TrustStore
from shoal.core.language import DEFAULT, templates

# (lower bound, verb): a position >= bound takes the verb; the first match wins.
STANCE_BINS = (
    (0.6, "strongly support"),
    (0.2, "support"),
    (-0.2, "am undecided about"),
    (-0.6, "oppose"),
    (-2.0, "strongly oppose"),
)
def stance_bin(position: np.ndarray) -> np.ndarray:
    """Index into STANCE_BINS for each position."""
    bounds = np.array([b for b, _ in STANCE_BINS[:-1]])
    return (np.asarray(position)[..., None] < bounds).sum(axis=-1)


def stance_verb(position: float) -> str:
    """'strongly support' … 'strongly oppose' for a position in [-1, 1]."""
    return STANCE_BINS[int(stance_bin(np.asarray(position)))][1]


CONFIDENCE_LABELS = (
    (0.8, "you are very sure of this"),
    (0.6, "you are fairly confident"),
    (0.4, "you are not entirely sure"),
    (-1.0, "you are genuinely uncertain and open to persuasion"),
)
TRUSTED, DISTRUSTED = 0.7, 0.3


def confidence_label(confidence: float) -> str:
    """Words for a confidence in [0, 1]."""
    for bound, words in CONFIDENCE_LABELS:
        if confidence > bound:
            return words
    return CONFIDENCE_LABELS[-1][1]


def confidence_bin(confidence: float) -> int:
    """Index into CONFIDENCE_LABELS of a confidence in [0, 1] (as `confidence_label`)."""
    for i, (bound, _) in enumerate(CONFIDENCE_LABELS):
        if confidence > bound:
            return i
    return len(CONFIDENCE_LABELS) - 1


def stance_lines(labels: list[str], position: np.ndarray, confidence: np.ndarray,
                 language: str = DEFAULT) -> list[str]:
    """One sentence per topic in `language`, e.g. 'On the carbon tax: you support it; you
    are fairly confident.' (the bins' words: `beliefs.stances`, `beliefs.confidences` of
    the language's templates)."""
    t = templates(language)
    stances, confidences = t.items("beliefs.stances"), t.items("beliefs.confidences")
    bins = stance_bin(np.asarray(position, dtype=float)).tolist()
    return [t("beliefs.line", label=label, stance=stances[b],
              confidence=confidences[confidence_bin(float(c))])
            for label, b, c in zip(labels, bins, confidence, strict=True)]


def trusted_accounts(trust: TrustStore, agent: int, usernames: list[str], limit: int = 5
                     ) -> tuple[list[str], list[str]]:
    """Usernames the agent trusts (trust > 0.7, highest first) and distrusts (< 0.3, lowest
    first), at most `limit` each. Only pairs that interacted are stored, so this reads one
    slice of the sorted trust keys."""
    lo = np.searchsorted(trust.keys, np.int64(agent) << 32)
    hi = np.searchsorted(trust.keys, np.int64(agent + 1) << 32)
    others = (trust.keys[lo:hi] & 0xFFFFFFFF).astype(np.int64)
    values = trust.values[lo:hi]
    order = np.lexsort((others, -values))
    trusted = [usernames[o] for o, v in zip(others[order], values[order], strict=True)
               if v > TRUSTED][:limit]
    order = np.lexsort((others, values))
    distrusted = [usernames[o] for o, v in zip(others[order], values[order], strict=True)
                  if v < DISTRUSTED][:limit]
    return trusted, distrusted
