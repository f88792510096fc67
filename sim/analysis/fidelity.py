"""Fidelity of LLM-driven agents: do their posts say what their beliefs hold, stay on their
persona's side, read as text, and answer at all? A small model that is too weak for a
scenario shows here (docs/llm.md#fidelity).

Everything is computed from what a run's trajectory already stores: the posts the model
wrote (`actions.source = 'llm'` and the post it made), their stances (`post_stances`,
stated by the model or estimated from the text), the authors' beliefs per round, and the
`llm_calls` rows of each turn (outcome, fallback reason, error). The model's raw reply is
not stored, so refusals are seen where they left a trace: the text of a post, or a
provider's content-filter error; a reply that held no action at all is counted apart, as
the upper bound of what a refusal in prose could be.

    from shoal.analysis.fidelity import fidelity
    f = fidelity(run)          # a `Run`, or a DuckDB connection to a trajectory file
    f.stance_agreement, f.by_round, f.flagged[f.flagged.refusal]

`measure(...)` takes the frames themselves (hand-built ones too).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import duckdb
import numpy as np
import pandas as pd

# Kinds of post whose text the model wrote (a repost has none: it copies its root).
WRITTEN_KINDS = ("post", "reply", "quote", "comment")
STOPPED = "round_stopped"  # `llm_calls.outcome` of a stopped round's calls: redone later

# Stances and beliefs are in [-1, 1]. A value within NEUTRAL of 0 takes no side; a stance
# agrees with a belief when it takes the same side (both neutral counts) and is within
# TOLERANCE of it: "support" for a belief of +0.2 agrees, "strongly oppose" for +0.3 not.
NEUTRAL = 0.1
TOLERANCE = 0.5

# Degenerate text. Thresholds are on the normalised text's words (see `normalise`).
MIN_WORDS = 3  # fewer: empty or very short
DOMINANT_SHARE = 0.5  # one word is more than this share of the words ...
DOMINANT_MIN_WORDS = 5  # ... of a text of at least this many words ("no no no no no")
LOOP_REPEATS = 4  # a phrase of 1 to LOOP_PHRASE words said this many times in a row: a
LOOP_PHRASE = 6  # generation loop ("we must act now we must act now we must act now ...")

# Refusals: the one list of patterns (case-insensitive, matched anywhere in a post's text
# and in `llm_calls.error`). Each is anchored to the assistant's own voice, because a
# persona may well write "I can't believe ..." or "I'm sorry, but this tax ...": a bare
# "I can't" or "I'm sorry, but" would count ordinary posts. Curly apostrophes are matched
# as straight ones.
_DECLINE = r"I(?: can(?:no|')?t| can not| won't| will not|(?: am|'m) (?:unable|not able) to)"
_AI = r"(?:AI|artificial intelligence|(?:large )?language model|LLM)"
REFUSAL_PATTERNS: tuple[str, ...] = (
    # the classic opener: an apology leading into declining, at the start of the reply
    rf"^\W*(?:I(?:'m| am) sorry|I apologi[sz]e|sorry)\b[^.!?]{{0,40}}?\b{_DECLINE}\b",
    # declining to do what was asked, in the assistant's words
    rf"\b{_DECLINE} "
    r"(?:help(?! but)|assist|comply|fulfil|generate|role-?play|pretend|engage in|"
    r"take part in|participate in|continue with|do that|do this|"
    r"provide (?:that|this|personal|opinions?)|take (?:sides|a side|a stance)|"
    r"(?:share|express|give) (?:my |personal |an? )?(?:personal )?(?:opinions?|views?|beliefs?|"
    r"stances?))",
    r"\bI (?:must|have to|need to) (?:respectfully |politely )?(?:decline|refuse)\b",
    # speaking as the model, not as the persona
    rf"\bas an? {_AI}(?: (?:language )?model| assistant)?(?:,|\s+I\b)",
    r"\bas an? (?:(?:large )?language model|AI (?:language )?model|AI assistant)\b",
    rf"\bI(?:'m| am) (?:just |only |merely )?an? {_AI}(?: (?:language )?model| assistant)?"
    r"(?=\s*[.,;:!]|\s+(?:and|so|without|with|that|which|trained|developed|made|by)\b|\s*$)",
    r"\bI (?:do not|don't) have (?:personal )?(?:opinions|beliefs|views|feelings|"
    r"preferences)\b",
    # a provider's content filter (in `llm_calls.error`)
    r"\bcontent[ _-]?(?:policy|filter|management)",
)
REFUSAL = re.compile("|".join(f"(?:{p})" for p in REFUSAL_PATTERNS), re.I | re.M)
# Words one of the patterns needs, as a pattern Arrow's regex engine runs over a whole
# column at once: only the texts it finds go through REFUSAL (which needs Python's `re`),
# so a run's ordinary posts cost next to nothing.
_REFUSAL_HINT = (r"sorry|apologi|can'?t|cannot|can not|won't|will not|unable|not able|"
                 r"decline|refuse|\bas an? |I(?:'m| am) (?:just |only |merely )?an? |"
                 r"have (?:personal )?(?:opinions|beliefs|views|feelings|preferences)|content")
# `llm_calls.error` of a reply that held no action at all (agents/llm_tools.py)
NO_ACTION_ERRORS = ("no action found in the reply", "empty reply")

TURN = ["round", "agent", "platform"]  # one LLM agent's decision on one platform


class RunFrames(Protocol):
    """What `fidelity` reads of a run: a `shoal.analysis.runs.Run` (named here, not
    imported: a Run imports this module)."""

    @property
    def llm_calls(self) -> pd.DataFrame: ...
    @property
    def actions(self) -> pd.DataFrame: ...
    @property
    def beliefs(self) -> pd.DataFrame: ...
    def table(self, name: str) -> pd.DataFrame: ...


@dataclass(frozen=True)
class Fidelity:
    """How faithfully a run's LLM agents played their part. Rates are shares in [0, 1]
    (NaN where there is nothing to count); definitions in docs/llm.md#fidelity."""

    agents: int  # LLM agents that took at least one turn
    turns: int  # LLM turns (one agent deciding on one platform in one round)
    posts: int  # posts, replies, quotes and comments whose text the model wrote
    stance_pairs: int  # (post, topic) stances compared with the author's belief
    stance_agreement: float  # pairs on the belief's side and within TOLERANCE of it
    sign_agreement: float  # pairs on the belief's side (NEUTRAL: no side)
    stance_gap: float  # mean |stance - belief|
    self_reported: float  # share of the pairs whose stance the model stated (else lexicon)
    persona_consistency: float  # pairs on the side of the author's initial belief
    repeat_rate: float  # posts repeating one of the author's earlier posts (normalised)
    short_rate: float  # posts of fewer than MIN_WORDS words
    degenerate_rate: float  # posts dominated by one word or looping a phrase
    refusals: int  # turns whose post or error reads as a refusal
    refusal_rate: float  # refusals / turns
    no_action_rate: float  # turns with a reply that held no action (refusals in prose too)
    fallback_rate: float  # turns decided by the fallback
    fallback_reasons: dict[str, float]  # reason (e.g. deadline, invalid) -> share of turns
    by_round: pd.DataFrame = field(repr=False)  # the measures per round
    by_agent: pd.DataFrame = field(repr=False)  # the measures per LLM agent
    flagged: pd.DataFrame = field(repr=False)  # each LLM post with its text flags

    def summary(self) -> dict[str, float]:
        """The run-level numbers as one flat mapping (a row of a comparison table)."""
        out = {k: float(v) for k, v in vars(self).items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
        out.update({f"fallback_{k}": v for k, v in self.fallback_reasons.items()})
        return out

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) rows for the run summary and the report."""
        reasons = ", ".join(f"{k} {_pct(v)}" for k, v in self.fallback_reasons.items())
        return [
            ("LLM fidelity", f"{self.posts:,} posts written by {self.agents:,} LLM agents in "
                             f"{self.turns:,} turns; stance agrees with belief "
                             f"{_pct(self.stance_agreement)} (same side "
                             f"{_pct(self.sign_agreement)}, mean gap "
                             f"{_num(self.stance_gap)}); on the persona's side "
                             f"{_pct(self.persona_consistency)}"),
            ("LLM text", f"repeated {_pct(self.repeat_rate)}, short {_pct(self.short_rate)}, "
                         f"degenerate {_pct(self.degenerate_rate)} of posts; refusals "
                         f"{_pct(self.refusal_rate)} of turns ({self.refusals:,}), replies "
                         f"without an action {_pct(self.no_action_rate)}"),
            ("LLM fallbacks", f"{_pct(self.fallback_rate)} of turns"
                              + (f" ({reasons})" if reasons else "")),
        ]


def _pct(value: float) -> str:
    return "—" if pd.isna(value) else f"{value:.1%}"


def _num(value: float) -> str:
    return "—" if pd.isna(value) else f"{value:.2f}"


# ---------------------------------------------------------------------- entry points


def fidelity(source: RunFrames | duckdb.DuckDBPyConnection) -> Fidelity | None:
    """The fidelity measures of a run: a `Run` (its frames, through the lineage) or a
    connection to a trajectory file (that file's rows only, filtered in SQL). None when
    the run has no LLM turns (a rule-based run)."""
    if isinstance(source, duckdb.DuckDBPyConnection):
        return _of_connection(source)
    return measure(source.llm_calls, source.actions, source.table("posts"),
                   source.table("post_stances"), source.beliefs)


def summary_lines(db: str | Path) -> list[tuple[str, str]]:
    """The run summary's fidelity rows for the trajectory file `db` (none for a run
    without LLM turns)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        result = fidelity(con)
    finally:
        con.close()
    return result.lines() if result is not None else []


def _of_connection(con: duckdb.DuckDBPyConnection) -> Fidelity | None:
    """The inputs of `measure` read from a trajectory file, cut down in SQL to the LLM
    agents' rows (a big run's beliefs and actions never reach pandas whole)."""
    tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables"
                                        ).fetchall()}
    if not {"llm_calls", "actions", "posts", "post_stances", "beliefs"} <= tables:
        return None  # a file from before Shoal logged LLM calls
    calls = con.execute(
        "SELECT round, agent, platform, outcome, fallback_reason, error FROM llm_calls "
        f"WHERE agent IS NOT NULL AND outcome IS DISTINCT FROM '{STOPPED}'").df()
    if calls.empty:
        return None
    kinds = ", ".join(f"'{k}'" for k in WRITTEN_KINDS)
    mine = "source = 'llm' AND status = 'ok' AND new_post_id IS NOT NULL"
    llm_posts = f"SELECT new_post_id FROM actions WHERE {mine}"
    actions = con.execute(
        "SELECT round, platform::VARCHAR AS platform, agent, new_post_id, "
        f"source::VARCHAR AS source, status::VARCHAR AS status FROM actions WHERE {mine}").df()
    columns = {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns "
                                         "WHERE table_name = 'posts'").fetchall()}
    method = ("stance_method::VARCHAR" if "stance_method" in columns  # (older files: none)
              else "NULL::VARCHAR")
    posts = con.execute(
        "SELECT post_id, round, author, platform::VARCHAR AS platform, kind::VARCHAR AS kind, "
        f"text, {method} AS stance_method FROM posts "
        f"WHERE kind IN ({kinds}) AND post_id IN ({llm_posts})").df()
    stances = con.execute(
        f"SELECT post_id, topic, stance FROM post_stances WHERE post_id IN ({llm_posts})").df()
    beliefs = con.execute(
        "SELECT round, agent, topic, position FROM beliefs WHERE agent IN (SELECT DISTINCT "
        f"author FROM posts WHERE post_id IN ({llm_posts}))").df()
    return measure(calls, actions, posts, stances, beliefs)


# ---------------------------------------------------------------------- the measures


def measure(calls: pd.DataFrame, actions: pd.DataFrame, posts: pd.DataFrame,
            stances: pd.DataFrame, beliefs: pd.DataFrame) -> Fidelity | None:
    """The fidelity measures from the frames of a run (columns as in the store; extra
    rows and columns are ignored): `llm_calls` (round, agent, platform, outcome,
    fallback_reason, error), `actions` (source, status, new_post_id), `posts` (post_id,
    round, author, kind, text; stance_method if known), `post_stances` (post_id, topic,
    stance) and `beliefs` (round, agent, topic, position). None without LLM turns."""
    turns = _turns(calls)
    if turns.empty:
        return None
    written = _llm_posts(actions, posts)
    flagged = _text_flags(written)
    turns = _refusals(turns, flagged)
    pairs = _stance_pairs(written, stances, beliefs)

    n_turns, n_posts = len(turns), len(flagged)
    fell = turns[turns["reason"] != ""]
    reasons = (fell["reason"].str.split(":").str[0].str.strip().value_counts() / n_turns)
    return Fidelity(
        agents=int(turns["agent"].nunique()), turns=n_turns, posts=n_posts,
        stance_pairs=len(pairs),
        stance_agreement=_mean(pairs["agree"]), sign_agreement=_mean(pairs["same_side"]),
        stance_gap=_mean(pairs["gap"]), self_reported=_mean(pairs["self_report"]),
        persona_consistency=_mean(pairs["consistent"]),
        repeat_rate=_mean(flagged["repeat"]), short_rate=_mean(flagged["short"]),
        degenerate_rate=_mean(flagged["degenerate"]),
        refusals=int(turns["refusal"].sum()), refusal_rate=_mean(turns["refusal"]),
        no_action_rate=_mean(turns["no_action"]), fallback_rate=len(fell) / n_turns,
        fallback_reasons={str(k): float(v) for k, v in reasons.items()},
        by_round=_grouped(turns, flagged, pairs, "round", "round"),
        by_agent=_grouped(turns, flagged, pairs, "agent", "author"),
        flagged=flagged.reset_index(drop=True))


def _mean(values: pd.Series) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _text(df: pd.DataFrame, col: str) -> pd.Series:
    """A text column with missing values (or a missing column) as ""."""
    if col not in df:
        return pd.Series("", index=df.index, dtype=object)
    return df[col].astype(object).where(df[col].notna(), "").astype(str)


def _turns(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per LLM turn: its fallback reason ("" if none), whether a reply held no
    action, whether an error reads as a refusal. Memory summaries (no agent) and the
    calls of a stopped round (redone after the resume) are no turns."""
    calls = calls[calls["agent"].notna() & (_text(calls, "outcome") != STOPPED)]
    error = _text(calls, "error")
    rows = pd.DataFrame({
        "round": calls["round"].astype("int64"), "agent": calls["agent"].astype("int64"),
        "platform": _text(calls, "platform"),
        # every row of a turn carries its reason: the largest string is it ("" < any)
        "reason": _text(calls, "fallback_reason"),
        "no_action": error.isin(NO_ACTION_ERRORS),
        "error_refusal": _refusal(error),
    })
    return rows.groupby(TURN, as_index=False).agg(
        reason=("reason", "max"), no_action=("no_action", "any"),
        error_refusal=("error_refusal", "any"))


def _llm_posts(actions: pd.DataFrame, posts: pd.DataFrame) -> pd.DataFrame:
    """The posts whose text the model wrote, in the order they were made."""
    mine = actions[(_text(actions, "source") == "llm") & (_text(actions, "status") == "ok")
                   & actions["new_post_id"].notna()]
    ids = set(mine["new_post_id"].astype("int64"))
    out = posts[posts["post_id"].isin(ids) & _text(posts, "kind").isin(WRITTEN_KINDS)]
    cols = ["post_id", "round", "author", "platform", "kind", "text", "stance_method"]
    out = out.assign(**{c: _text(out, c) for c in ("platform", "kind", "text",
                                                   "stance_method")})[cols]
    out = out.astype({"post_id": "int64", "round": "int64", "author": "int64"})
    return out.sort_values(["round", "post_id"], ignore_index=True)


def normalise(text: pd.Series) -> pd.Series:
    """Text as compared for repeats: lower case, no links, @mentions, digits or
    punctuation, single spaces (so "Agreed, @ann!" and "agreed @bob" are one text)."""
    return (text.str.casefold()
            .str.replace(r"https?://\S+|@\w+", " ", regex=True)
            .str.replace(r"[\W\d_]+", " ", regex=True)
            .str.strip())


def _text_flags(written: pd.DataFrame) -> pd.DataFrame:
    """Each post with `words`, `repeat` (the same normalised text as an earlier post of
    its author), `short`, `degenerate` and `refusal`."""
    norm = normalise(written["text"])
    n_words = norm.str.count(r"\S+").astype("int64")
    # Every word of every text in one array (`doc`: the text's position), as codes.
    words = norm.str.split().explode().dropna()
    codes = pd.factorize(words)[0]
    doc = np.repeat(np.arange(len(norm)), n_words.to_numpy())
    # the most frequent word's count in each text
    top = pd.Series(codes).groupby([doc, codes]).size().groupby(level=0).max()
    top_share = top.reindex(range(len(norm))).fillna(0).to_numpy() / np.maximum(n_words, 1)
    return written.assign(
        words=n_words,
        repeat=(norm != "") & pd.DataFrame({"a": written["author"], "n": norm}).duplicated(),
        short=n_words < MIN_WORDS,
        degenerate=((n_words >= DOMINANT_MIN_WORDS) & (top_share > DOMINANT_SHARE))
        | _loops(doc, codes, len(norm)),
        refusal=_refusal(written["text"]))


def _loops(doc: np.ndarray, codes: np.ndarray, n_docs: int) -> np.ndarray:
    """Whether each text says a phrase of k <= LOOP_PHRASE words LOOP_REPEATS times in a
    row: a run of (LOOP_REPEATS - 1) * k words each equal to the word k before it, in the
    same text (vectorised over all texts' words: no regular expression per text)."""
    out = np.zeros(n_docs, dtype=bool)
    for k in range(1, LOOP_PHRASE + 1):
        run = (LOOP_REPEATS - 1) * k
        if len(codes) <= run:
            break
        same = (codes[k:] == codes[:-k]) & (doc[k:] == doc[:-k])
        total = np.concatenate(([0], np.cumsum(same)))
        whole = np.flatnonzero(total[run:] - total[:-run] == run)  # windows all `same`
        out[doc[whole]] = True
    return out


def _refusal(text: pd.Series) -> pd.Series:
    """Whether each text reads as a refusal (REFUSAL_PATTERNS)."""
    text = text.astype(str).str.replace("\u2019", "'", regex=False)
    hinted = text.str.contains(_REFUSAL_HINT, case=False, regex=True).to_numpy(dtype=bool)
    return _only_where(hinted, text, lambda t: REFUSAL.search(t) is not None)


def _only_where(where: np.ndarray, text: pd.Series, test: Callable[[str], bool]
                ) -> pd.Series:
    """`test` of each text where `where` holds (False elsewhere, untested)."""
    out = np.zeros(len(text), dtype=bool)
    at = np.flatnonzero(where)
    out[at] = [test(t) for t in text.iloc[at]]
    return pd.Series(out, index=text.index)


def is_refusal(text: str) -> bool:
    """Whether one text reads as a refusal (REFUSAL_PATTERNS)."""
    return bool(_refusal(pd.Series([text])).iloc[0])


def _refusals(turns: pd.DataFrame, flagged: pd.DataFrame) -> pd.DataFrame:
    """`refusal` on each turn: its post reads as one, or an error of its calls does."""
    refused = flagged.loc[flagged["refusal"], ["round", "author", "platform"]]
    refused = refused.rename(columns={"author": "agent"}).drop_duplicates().assign(post=True)
    out = turns.merge(refused, on=TURN, how="left")
    return out.assign(refusal=out["post"].eq(True) | out["error_refusal"]).drop(
        columns="post")


def _side(values: pd.Series) -> np.ndarray:
    """-1, 0 or +1: the side a stance or belief takes (0 within NEUTRAL of 0)."""
    x = values.to_numpy(dtype=float)
    return np.where(np.abs(x) <= NEUTRAL, 0.0, np.sign(x))


def _stance_pairs(written: pd.DataFrame, stances: pd.DataFrame,
                  beliefs: pd.DataFrame) -> pd.DataFrame:
    """Each (LLM post, topic) stance with the author's belief when writing and its
    initial belief: `same_side`, `agree`, `gap`, `consistent`, `self_report`.

    The belief an agent wrote from is the one its prompt showed: the state at the end of
    the round before (`beliefs` of round r - 1); an agent that joined in round r has
    only round r's. Its initial belief is its first row (round 0, or when it joined)."""
    pairs = stances[stances["post_id"].isin(written["post_id"]) & stances["stance"].notna()]
    pairs = pairs.astype({"post_id": "int64"}).assign(topic=_text(pairs, "topic"))
    pairs = pairs[["post_id", "topic", "stance"]].merge(
        written[["post_id", "round", "author", "stance_method"]], on="post_id")
    held = beliefs[beliefs["agent"].isin(written["author"])]
    held = pd.DataFrame({"author": held["agent"].astype("int64"), "topic": _text(held, "topic"),
                         "at": held["round"].astype("int64"),
                         "belief": held["position"].astype(float)})
    key = ["author", "topic", "at"]
    pairs = pairs.assign(at=pairs["round"] - 1).merge(held, on=key, how="left")
    late = pairs["belief"].isna()
    if late.any():  # joined this round: the belief it joined with
        same = pairs.loc[late, ["author", "topic", "round"]].rename(columns={"round": "at"})
        pairs.loc[late, "belief"] = same.merge(held, on=key, how="left")["belief"].to_numpy()
    first = held.sort_values("at").drop_duplicates(["author", "topic"])
    pairs = pairs.merge(first[["author", "topic", "belief"]].rename(
        columns={"belief": "initial"}), on=["author", "topic"], how="left")
    pairs = pairs[pairs["belief"].notna()].reset_index(drop=True)
    side = _side(pairs["stance"])
    gap = (pairs["stance"] - pairs["belief"]).abs()
    same_side = pd.Series(side == _side(pairs["belief"]), index=pairs.index)
    return pairs.assign(
        gap=gap, same_side=same_side, agree=same_side & (gap <= TOLERANCE),
        consistent=side == _side(pairs["initial"]),
        self_report=pairs["stance_method"] == "self_report")


def _grouped(turns: pd.DataFrame, flagged: pd.DataFrame, pairs: pd.DataFrame,
             turn_key: str, post_key: str) -> pd.DataFrame:
    """The measures per round (or per agent): turns, posts and stance pairs grouped by
    the key, then joined."""
    by_turn = turns.assign(fell=turns["reason"] != "").groupby(turn_key).agg(
        turns=("refusal", "size"), refusal_rate=("refusal", "mean"),
        no_action_rate=("no_action", "mean"), fallback_rate=("fell", "mean"))
    by_post = flagged.groupby(post_key).agg(
        posts=("post_id", "size"), repeat_rate=("repeat", "mean"),
        short_rate=("short", "mean"), degenerate_rate=("degenerate", "mean"))
    by_pair = pairs.groupby(post_key).agg(
        stance_pairs=("gap", "size"), stance_agreement=("agree", "mean"),
        sign_agreement=("same_side", "mean"), stance_gap=("gap", "mean"),
        persona_consistency=("consistent", "mean"))
    by_post.index.name = by_pair.index.name = turn_key
    out = by_turn.join(by_post, how="outer").join(by_pair, how="outer")
    for col in ("turns", "posts", "stance_pairs"):
        out[col] = out[col].fillna(0).astype("int64")
    cols = ["turns", "posts", "stance_pairs", "stance_agreement", "sign_agreement",
            "stance_gap", "persona_consistency", "repeat_rate", "short_rate",
            "degenerate_rate", "refusal_rate", "no_action_rate", "fallback_rate"]
    return out[cols].astype({c: float for c in cols[3:]}).reset_index()
