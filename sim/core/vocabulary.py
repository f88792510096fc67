"""The coded names the engine, the agents and the store share: action types, why an
action was rejected, what changed a trust value, where a decision came from, how a post's
stance was obtained. Codes are stored as small integers in arrays and as DuckDB ENUMs in
the trajectory, so their order is part of the file format: append, never reorder."""

from __future__ import annotations

from enum import IntEnum


class ActionType(IntEnum):
    """Platform actions. Which of them a platform offers is its spec's business
    (`shoal.platforms`); DO_NOTHING is everywhere."""

    DO_NOTHING = 0
    POST = 1
    REPOST = 2
    QUOTE = 3
    REPLY = 4
    COMMENT = 5
    LIKE = 6
    UPVOTE = 7
    DOWNVOTE = 8
    FOLLOW = 9
    UNFOLLOW = 10
    BUY = 11
    SELL = 12


ACTION_NAMES = {a: a.name.lower() for a in ActionType}
CREATES_POST = frozenset({ActionType.POST, ActionType.REPOST, ActionType.QUOTE,
                          ActionType.REPLY, ActionType.COMMENT})
TARGETS_POST = frozenset({ActionType.REPOST, ActionType.QUOTE, ActionType.REPLY,
                          ActionType.COMMENT, ActionType.LIKE, ActionType.UPVOTE,
                          ActionType.DOWNVOTE})
TARGETS_AGENT = frozenset({ActionType.FOLLOW, ActionType.UNFOLLOW})
VOTES = frozenset({ActionType.LIKE, ActionType.UPVOTE, ActionType.DOWNVOTE})


class Reason(IntEnum):
    """Why an action was rejected (OK: applied)."""

    OK = 0
    NOT_ALLOWED = 1
    NOT_IN_FEED = 2
    DUPLICATE = 3
    SELF = 4
    UNKNOWN_AGENT = 5
    NOT_MEMBER = 6
    ALREADY_FOLLOWING = 7
    NOT_FOLLOWING = 8
    UNKNOWN_MARKET = 9  # no such market or outcome
    MARKET_CLOSED = 10  # not open this round (or resolved)
    BAD_AMOUNT = 11  # not a positive, finite amount
    NO_CASH = 12  # more than the trader's cash
    NO_SHARES = 13  # more shares than the trader holds
    PRICE_LIMIT = 14  # the price had already passed the order's limit


REASON_NAMES = {r: r.name.lower() for r in Reason}
TRUST_CAUSES = ("like", "repost", "downvote", "follow", "unfollow", "reply_agree",
                "reply_disagree")
FOLLOW_OPS = ("init", "follow", "unfollow")
# Where an action row's decision came from, and how a new post's stance was obtained.
SOURCE = {"rule": 0, "llm": 1, "fallback_rule": 2, "fallback_nothing": 3}
STANCE_METHOD = {"data": 0, "self_report": 1, "lexicon": 2, "none": 3}
# Outcome metrics an experiment compares (docs/experiments.md): per topic (the state of
# beliefs at a round) and for the whole run (rates per round). The config names them in
# `experiment.metrics`; shoal.analysis.experiments computes them.
TOPIC_METRICS = ("belief_mean", "belief_sd", "polarization")
RUN_METRICS = ("activity", "engagement")


def outcome_metrics(topics: list[str]) -> list[str]:
    """Every outcome metric of a run with these topics, in the order tables show them."""
    return [f"{m}.{t}" for t in topics for m in TOPIC_METRICS] + list(RUN_METRICS)
