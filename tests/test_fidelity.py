"""Fidelity measures of LLM agents (shoal.analysis.fidelity, docs/llm.md#fidelity): each
measure on hand-built frames and a hand-built trajectory file whose right answers are
known, then the LLM quick start against the loopback server, through the notebook API,
the run summary and the report; a rule-based run shows none of it.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from rich.console import Console

from shoal.analysis.fidelity import (
    REFUSAL_PATTERNS,
    Fidelity,
    fidelity,
    is_refusal,
    measure,
    normalise,
)
from shoal.analysis.report import render_report
from shoal.analysis.runs import Run, Runs
from shoal.cli.summary import summarize
from shoal.store.schema import schema
from tests.helpers import make_config, run_config
from tests.test_llm import llm_dict

TOPICS = ("carbon_tax", "nuclear_power")


class World:
    """A tiny run as frames: LLM turns, the posts they made, stances and beliefs."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.actions: list[dict] = []
        self.posts: list[dict] = []
        self.stances: list[dict] = []
        self.beliefs: list[dict] = []

    def turn(self, round_: int, agent: int, reason: str = "", error: str = "",
             outcome: str = "do_nothing", platform: str = "twitter") -> None:
        self.calls.append({"round": round_, "agent": agent, "platform": platform,
                           "outcome": outcome, "fallback_reason": reason, "error": error})

    def post(self, round_: int, agent: int, text: str, stance: dict[str, float] | None = None,
             kind: str = "post", source: str = "llm", method: str = "self_report") -> int:
        """An applied action of `source` that made a post (and, for `llm`, its turn)."""
        post_id = len(self.posts)
        if source == "llm":
            self.turn(round_, agent, outcome=kind)
        self.actions.append({"round": round_, "platform": "twitter", "agent": agent,
                             "new_post_id": post_id, "source": source, "status": "ok"})
        self.posts.append({"post_id": post_id, "round": round_, "author": agent,
                           "platform": "twitter", "kind": kind, "text": text,
                           "stance_method": method})
        for topic, value in (stance or {}).items():
            self.stances.append({"post_id": post_id, "topic": topic, "stance": value})
        return post_id

    def belief(self, agent: int, positions: dict[int, float], topic: str = TOPICS[0]) -> None:
        """The agent's position on `topic` at each round given."""
        self.beliefs += [{"round": r, "agent": agent, "topic": topic, "position": p,
                          "confidence": 0.5} for r, p in positions.items()]

    def frames(self) -> dict[str, pd.DataFrame]:
        cols = {"calls": ["round", "agent", "platform", "outcome", "fallback_reason", "error"],
                "actions": ["round", "platform", "agent", "new_post_id", "source", "status"],
                "posts": ["post_id", "round", "author", "platform", "kind", "text",
                          "stance_method"],
                "stances": ["post_id", "topic", "stance"],
                "beliefs": ["round", "agent", "topic", "position", "confidence"]}
        return {k: pd.DataFrame(getattr(self, k), columns=c) for k, c in cols.items()}

    def measure(self) -> Fidelity:
        result = measure(**self.frames())
        assert result is not None
        return result


def flags(world: World) -> pd.DataFrame:
    return world.measure().flagged.set_index("post_id")


# ------------------------------------------------------------------ text


def test_the_same_text_twice_is_one_repeat_in_two():
    w = World()
    w.post(1, 0, "The carbon tax is a good idea.")
    w.post(2, 0, "the carbon tax is a GOOD idea!!")  # near-verbatim: case, punctuation
    assert w.measure().repeat_rate == 0.5
    assert flags(w)["repeat"].tolist() == [False, True]


def test_repeats_are_an_agents_own_and_ignore_mentions_links_and_numbers():
    w = World()
    w.post(1, 0, "Nuclear power keeps the lights on.")
    w.post(1, 1, "Nuclear power keeps the lights on.")  # someone else's: no repeat
    w.post(2, 0, "@ann nuclear power keeps the lights on https://x.org/1")  # a repeat
    w.post(3, 0, "Nuclear power keeps the lights on, 24/7.")  # a repeat
    w.post(3, 0, "Nuclear power keeps the lights off.")  # different
    assert flags(w)["repeat"].tolist() == [False, False, True, True, False]
    assert w.measure().repeat_rate == pytest.approx(2 / 5)
    assert normalise(pd.Series(["Agreed, @ann!", "agreed @bob 100%"])).tolist() == \
        ["agreed", "agreed"]


def test_empty_and_very_short_posts():
    w = World()
    for text in ("", "   ", "Agreed!", "So true, @ann", "I support the carbon tax."):
        w.post(1, len(w.posts), text)
    assert flags(w)["short"].tolist() == [True, True, True, True, False]
    assert w.measure().repeat_rate == 0.0  # an empty text repeats nothing


@pytest.mark.parametrize(("text", "degenerate"), [
    ("tax tax tax tax tax good", True),  # one word: 5 of 6
    ("no no no no no", True),
    ("we must act now we must act now we must act now we must act now", True),  # a loop
    ("the tax, the levy, the rebate and the rest", False),  # "the": 4 of 8, not more
    ("very very very good", False),  # three times is speech, not a loop
    ("I strongly support the carbon tax, and the rebate makes it fair.", False),
    ("go go go", False),  # too short to judge by one word
])
def test_degenerate_text(text, degenerate):
    w = World()
    w.post(1, 0, text)
    assert bool(flags(w)["degenerate"].iloc[0]) is degenerate


def test_a_loop_does_not_run_from_one_post_into_the_next():
    w = World()
    w.post(1, 0, "act now act now")
    w.post(1, 0, "act now act now")  # with the post before: four in a row, but two posts
    w.post(1, 1, "Please: act now, act now, act now, act now!")
    assert flags(w)["degenerate"].tolist() == [False, False, True]


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("text", [
    "I'm sorry, but I can't help with that.",
    "I’m sorry, but I cannot comply with this request.",  # a curly apostrophe
    "Sorry, I won't be able to do that... I cannot role-play a political persona.",
    "As an AI, I don't take sides on the carbon tax.",
    "As an AI language model I have no opinion.",
    "I am an AI and do not hold views on nuclear power.",
    "I don't have personal opinions on policy.",
    "I must respectfully decline.",
    "I'm unable to provide opinions on political topics.",
    "I can't assist with that.",
])
def test_refusals_are_recognised(text):
    assert is_refusal(text)


@pytest.mark.parametrize("text", [
    "I can't believe the carbon tax passed.",
    "I'm sorry, but this tax is ridiculous.",
    "I can't help but think nuclear power is the answer.",
    "As an AI researcher, I think nuclear is safe.",
    "As an assistant professor of economics, I back the levy.",
    "I cannot support this tax.",
    "I'm an AI ethics student and I oppose it.",
])
def test_ordinary_posts_are_not_refusals(text):
    assert not is_refusal(text)


def test_the_refusal_rate_is_of_turns_and_counts_post_text_and_provider_filters():
    w = World()
    w.post(1, 0, "I'm sorry, but I can't help with that.")
    w.post(1, 1, "I support the carbon tax, with the rebate.")
    w.turn(1, 2, reason="http_error",
           error="HTTP 400: the response was filtered by the content management policy")
    w.turn(1, 3)  # liked something: no text, no refusal
    f = w.measure()
    assert (f.turns, f.refusals, f.refusal_rate) == (4, 2, 0.5)
    assert flags(w)["refusal"].tolist() == [True, False]
    assert len(REFUSAL_PATTERNS) == len(set(REFUSAL_PATTERNS))


def test_replies_without_an_action_and_fallbacks_by_reason():
    w = World()
    w.turn(1, 0, reason="invalid: no action found in the reply",
           error="no action found in the reply", outcome="invalid")
    w.turn(1, 0, reason="invalid: no action found in the reply", error="empty reply",
           outcome="invalid")  # the repair of the same turn: one turn
    w.turn(1, 1, reason="deadline", outcome="fallback_rule")
    w.turn(1, 2, error="no action found in the reply", outcome="invalid")  # repaired
    w.turn(1, 2, outcome="like")
    w.turn(2, 3, outcome="like")
    w.turn(2, 4, reason="deadline", outcome="round_stopped")  # the stopped round: redone
    w.calls.append({"round": 2, "agent": None, "platform": "memory", "outcome": "summary",
                    "fallback_reason": "", "error": ""})  # a memory summary: no turn
    f = w.measure()
    assert f.turns == 4 and f.agents == 4
    assert f.no_action_rate == 0.5  # agents 0 and 2
    assert f.fallback_rate == 0.5
    assert f.fallback_reasons == {"invalid": 0.25, "deadline": 0.25}
    by_round = f.by_round.set_index("round")
    assert by_round.loc[1, "turns"] == 3 and by_round.loc[2, "turns"] == 1
    assert by_round.loc[1, "fallback_rate"] == pytest.approx(2 / 3)
    assert f.summary()["fallback_deadline"] == 0.25


def test_only_text_the_model_wrote_counts():
    w = World()
    mine = w.post(1, 0, "I support the carbon tax.", {"carbon_tax": 0.5})
    w.post(2, 0, "I support the carbon tax.", {"carbon_tax": 0.5}, kind="repost",
           method="data")  # copies its root
    w.post(1, 1, "Rule text", {"carbon_tax": 0.5}, source="rule", method="data")
    w.post(1, 2, "Rule text", {"carbon_tax": 0.5}, source="fallback_rule", method="data")
    w.turn(1, 2, reason="timeout")
    w.belief(0, {0: 0.4})
    f = w.measure()
    assert f.posts == 1 and f.flagged["post_id"].tolist() == [mine]
    assert f.stance_pairs == 1 and f.turns == 3  # reposting was a turn too


def test_a_rule_run_has_no_fidelity():
    w = World()
    w.post(1, 0, "Rule text", source="rule", method="data")
    assert measure(**w.frames()) is None


# ------------------------------------------------------------------ stances


def test_stance_agreement_against_the_belief_held_when_writing():
    w = World()
    # belief at the end of round 1 (what the round-2 prompt showed): +0.6; round 2's own
    # update (to -0.6) came after the post and is not what the agent wrote from
    w.belief(0, {0: 0.6, 1: 0.6, 2: -0.6})
    w.post(2, 0, "a", {"carbon_tax": 0.8})  # same side, gap 0.2: agrees
    w.post(2, 0, "b", {"carbon_tax": -0.5})  # the other side, gap 1.1
    w.post(2, 0, "c", {"carbon_tax": 0.05})  # neutral: not the belief's side, gap 0.55
    w.post(2, 0, "d", {"carbon_tax": 1.0, "nuclear_power": 0.3})  # no belief on nuclear
    f = w.measure()
    assert f.stance_pairs == 4  # a topic without a belief is not compared
    assert f.sign_agreement == 0.5
    assert f.stance_agreement == 0.5  # a and d (gap 0.4 <= 0.5)
    assert f.stance_gap == pytest.approx((0.2 + 1.1 + 0.55 + 0.4) / 4)


def test_on_the_right_side_but_too_far_does_not_agree():
    w = World()
    w.belief(0, {0: 0.15})
    w.post(1, 0, "a", {"carbon_tax": 1.0})  # same side, gap 0.85
    f = w.measure()
    assert (f.sign_agreement, f.stance_agreement) == (1.0, 0.0)


def test_persona_consistency_is_the_side_of_the_initial_belief():
    w = World()
    w.belief(0, {0: 0.6, 1: 0.2, 2: -0.4, 3: -0.5})  # social influence turns the agent
    w.post(1, 0, "a", {"carbon_tax": 0.7})  # persona's side, belief's side
    w.post(3, 0, "b", {"carbon_tax": -0.5})  # belief's side (-0.4), not the persona's
    w.post(3, 0, "c", {"carbon_tax": 0.6})  # persona's side, not the belief's
    f = w.measure()
    assert f.persona_consistency == pytest.approx(2 / 3)
    assert f.sign_agreement == pytest.approx(2 / 3)
    by_round = f.by_round.set_index("round")
    assert by_round.loc[1, "persona_consistency"] == 1.0
    assert by_round.loc[3, "persona_consistency"] == 0.5


def test_an_agent_that_joined_this_round_is_held_to_the_belief_it_joined_with():
    w = World()
    w.belief(5, {2: -0.7})  # joined in round 2: no row for round 1
    w.post(2, 5, "a", {"carbon_tax": -0.6})
    f = w.measure()
    assert f.stance_pairs == 1
    assert (f.stance_agreement, f.persona_consistency) == (1.0, 1.0)


def test_self_reported_share_and_per_agent_rows():
    w = World()
    w.belief(0, {0: 0.5})
    w.belief(1, {0: -0.5})
    w.post(1, 0, "a", {"carbon_tax": 0.5})
    w.post(1, 1, "b", {"carbon_tax": 0.5}, method="lexicon")
    f = w.measure()
    assert f.self_reported == 0.5
    agents = f.by_agent.set_index("agent")
    assert agents.loc[0, "stance_agreement"] == 1.0
    assert agents.loc[1, "stance_agreement"] == 0.0


def test_nothing_to_compare_is_nan_not_an_error():
    w = World()
    w.turn(1, 0, outcome="like")
    f = w.measure()
    assert f.posts == 0 and f.stance_pairs == 0
    assert math.isnan(f.stance_agreement) and math.isnan(f.repeat_rate)
    assert f.lines()[0][1].count("—") == 4


# ------------------------------------------------------------------ a trajectory file


def _insert(con: duckdb.DuckDBPyConnection, table: str, df: pd.DataFrame) -> None:
    if len(df):
        con.register("rows", df)
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM rows")
        con.unregister("rows")


def test_a_trajectory_file_gives_the_frames_answer(tmp_path):
    w = World()
    w.belief(0, {0: 0.6, 1: 0.5})
    w.belief(1, {0: -0.3, 1: -0.3})
    w.post(1, 0, "The carbon tax is a good idea.", {"carbon_tax": 0.8})
    w.post(2, 0, "the carbon tax is a good idea", {"carbon_tax": 0.8})
    w.post(2, 1, "As an AI, I stay neutral.", {"carbon_tax": 0.0}, method="lexicon")
    w.post(2, 1, "Rule text", source="rule", method="data")
    w.turn(2, 2, reason="deadline")
    w.calls.append({"round": 2, "agent": 3, "platform": "twitter", "outcome": "round_stopped",
                    "fallback_reason": "deadline", "error": ""})
    frames = w.frames()
    db = tmp_path / "t.duckdb"
    con = duckdb.connect(str(db))
    con.execute(schema(["twitter", "reddit"]))
    for table, name in (("llm_calls", "calls"), ("actions", "actions"), ("posts", "posts"),
                        ("post_stances", "stances"), ("beliefs", "beliefs")):
        _insert(con, table, frames[name])
    con.close()
    con = duckdb.connect(str(db), read_only=True)
    try:
        from_file = fidelity(con)
    finally:
        con.close()
    assert from_file is not None
    assert from_file.summary() == w.measure().summary()
    assert (from_file.turns, from_file.posts, from_file.repeat_rate, from_file.refusals) == \
        (4, 3, 1 / 3, 1)
    assert from_file.fallback_reasons == {"deadline": 0.25}


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory) -> Path:
    """The LLM quick start, small, against the loopback server the run starts."""
    data = llm_dict("loopback", size=80, rounds=3, fraction=0.5)
    return run_config(make_config(data, tmp_path_factory.mktemp("llm"))).dir.root


@pytest.mark.slow
def test_the_llm_quick_start_has_its_measures_in_range(llm_run):
    run = Run(llm_run)
    f = run.fidelity()
    assert f is not None and f.turns > 0 and f.posts > 0 and f.stance_pairs > 0
    assert f.agents == run.llm_calls["agent"].dropna().nunique()
    for name, value in f.summary().items():
        if name not in ("agents", "turns", "posts", "stance_pairs", "refusals"):
            assert 0.0 <= value <= (2.0 if name == "stance_gap" else 1.0), name
    # the loopback server writes fluent, varied text and never refuses
    assert f.refusals == 0 and f.degenerate_rate == 0.0
    assert list(f.by_round["round"]) == list(range(1, run.last_round + 1))
    assert f.by_round["turns"].sum() == f.turns and f.by_round["posts"].sum() == f.posts
    assert f.flagged["post_id"].isin(run.posts["post_id"]).all()
    # the notebook's frames and the trajectory file's SQL give the same numbers
    con = duckdb.connect(str(llm_run / "trajectory.duckdb"), read_only=True)
    try:
        from_file = fidelity(con)
    finally:
        con.close()
    assert from_file is not None and from_file.summary() == f.summary()
    both = Runs([run, run], labels=["a", "b"]).fidelity()
    assert list(both["run"]) == ["a", "b"] and both["turns"].tolist() == [f.turns] * 2


@pytest.mark.slow
def test_the_summary_and_the_report_show_the_measures(llm_run):
    console = Console(width=200, record=True)
    console.print(summarize(llm_run))
    text = console.export_text()
    assert "LLM fidelity" in text and "stance agrees with belief" in text
    assert "LLM fallbacks" in text
    page = render_report(Run(llm_run))
    assert '<section id="fidelity">' in page and 'href="#fidelity"' in page


@pytest.mark.slow
def test_a_rule_run_shows_nothing_new(tmp_path, quickstart_dict):
    quickstart_dict.update(rounds=2, population={"size": 60})
    root = run_config(make_config(quickstart_dict, tmp_path)).dir.root
    run = Run(root)
    assert run.fidelity() is None
    console = Console(width=200, record=True)
    console.print(summarize(root))
    assert "fidelity" not in console.export_text()
    assert "fidelity" not in render_report(run)
    assert Runs([run]).fidelity().empty
