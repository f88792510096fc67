"""A plug-in's part that misbehaves (raises, calls sys.exit, returns what the engine cannot
use, writes what it was only given to read) stops the run with exit 2 and a message that
names the part and the round, before anything of that round is logged; the rounds before
stay, and the run resumes once the part is fixed. Shoal's own parts are not checked this
way (the conformance kit and the suite hold them to it).

The parts (tests/misbehaving_plugin.py) are registered on import in a process of their
own, as an installed plug-in's are; every case runs there once, in-process executor."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

RULE = {"beliefs": {"update": {"rule": "misbehaving_rule"}}}
FEED = {"platforms": {"twitter": {"recommender": {"kind": "misbehaving_feed"}}, "reddit": {}}}
POLICY = {"policy": {"kind": "misbehaving_policy"}}
NUDGE = {"interventions": [{"kind": "misbehaving_intervention", "round": 2}]}
PLUGIN = "tests.misbehaving_plugin"

# id: (part, mode, config changes, what the message must say)
CASES = {
    "rule_raise": ("rule", "raise", RULE, f"round 2: the belief rule 'misbehaving_rule' (from "
                   f"{PLUGIN}) raised RuntimeError: boom. Nothing of round 2 was kept"),
    "rule_exit": ("rule", "exit", RULE, f"round 2: the belief rule 'misbehaving_rule' (from "
                  f"{PLUGIN}) raised SystemExit"),
    "rule_range": ("rule", "range", RULE, "round 2: the belief rule 'misbehaving_rule' made 1 "
                   "positions outside [-1, 1] (first: agent 0, topic 'carbon_tax': 3.0)"),
    "rule_confidence": ("rule", "confidence", RULE, "made 1 confidences outside [0, 1] "
                        "(first: agent 1"),
    **{f"feed_{mode}": ("feed", mode, FEED, "round 2: the recommender 'misbehaving_feed' of "
                        "platforms.twitter " + said) for mode, said in [
        ("missing", "returned feeds that name post"),
        ("other_platform", "returned feeds that show post"),
        ("twice", "returned feeds that show a post twice in one feed"),
        ("floats", "returned feeds that are not an integer array (got float64)"),
        ("write_position", f"(from {PLUGIN}) raised ValueError: assignment destination is "
                           "read-only")]},
    **{f"policy_{mode}": ("policy", mode, POLICY, "round 2: the policy 'misbehaving_policy' "
                          "decided " + said) for mode, said in [
        ("stranger", "for agent -1000, who is not among the agents it was asked about"),
        ("slot", "slot 1; an agent has slots 0..0 on this platform"),
        ("stance", "a stance outside [-1, 1]: 42.0"),
        ("code", "action code 99, which is no action"),
        ("none", "with a NoneType, not an ActionBatch")]},
    **{f"intervention_{mode}": ("intervention", mode, NUDGE, "round 2: the intervention "
                                "interventions.0 (kind 'misbehaving_intervention') " + said)
       for mode, said in [
        ("list", "returned list, not a dict"),
        ("nan", "returned an effect JSON cannot hold: Out of range float values"),
        ("range", "left 1 positions outside [-1, 1] (first: agent 0")]},
}
WELL = {"intervention_numpy": ("intervention", "numpy", NUDGE, "")}
MARKET = {"base": str(ROOT / "configs" / "market.yaml"), "rounds": 3, "interventions": [],
          "executor": {"kind": "local"},
          "set": {"population.size": 100, "platforms.market.markets.0.maker":
                  {"kind": "misbehaving_maker", "b": 300}}}
MAKERS = {f"maker_{mode}": ("maker", mode, MARKET, "the market maker 'misbehaving_maker' of "
                            "market 'carbon_tax_passes' " + said) for mode, said in [
    ("nan", "traded nan shares for"),
    ("prices", "priced its outcomes at [")]}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("misbehaving")
    cases = [[cid, part, mode, changes] for cid, (part, mode, changes, _) in
             {**CASES, **WELL, **MAKERS}.items()]
    # (imported, not run as __main__: the parts' module is named as a plug-in's would be)
    script = f"import sys, {PLUGIN} as plugin; plugin.main(sys.argv[1], sys.argv[2])"
    done = subprocess.run([sys.executable, "-c", script, json.dumps(cases), str(folder)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES))
def test_a_misbehaving_part_stops_the_run_naming_itself(case, results):
    """Exit 2 with the part, the round and the problem named; round 1 kept, round 2 not;
    the part fixed, `shoal resume` runs the last rounds."""
    *_, said = CASES[case]
    got = results[case]
    assert got["code"] == 2 and said in got["said"], got
    assert "internal error" not in got["said"]
    assert got["rounds"] == 1
    assert got["resume_code"] == 0 and got["rounds_resumed"] == 3, got


@pytest.mark.parametrize("case", list(MAKERS))
def test_a_market_maker_whose_trades_the_books_cannot_hold(case, results):
    """NaN shares, prices that do not sum to 1: the trade's round stops (exit 2), named;
    the maker fixed, the run resumes to its end."""
    *_, said = MAKERS[case]
    got = results[case]
    assert got["code"] == 2 and said in got["said"], got
    assert got["resume_code"] == 0 and got["rounds_resumed"] == 3, got


def test_an_interventions_numpy_numbers_are_logged_as_numbers(results):
    got = results["intervention_numpy"]
    assert got["code"] == 0, got
    assert got["effects"] == ['{"calls": 3, "weight": 0.5}']


def test_a_simulation_whose_round_stopped_part_way_steps_no_further(results):
    """In a notebook: after the part's error, the world in memory is that of no round, so
    a further step is refused with the way on (resume), not run on half a round."""
    got = results["notebook"]
    assert got["first"].startswith("PluginError: round 2: the belief rule"), got
    assert got["second"].startswith("InputError: notebook-"), got
    assert "round 2 stopped part-way" in got["second"] and "Simulation.resume(" in got["second"]
    assert got["resumed_round"] == 3


def test_a_platform_is_refused_when_registered_not_when_run():
    """A name SQL and YAML cannot carry, engagements the platform does not offer, and a
    name another module registered are errors of the registration, naming the module."""
    from shoal.config.base import Strict
    from shoal.core.errors import InputError
    from shoal.core.posts import PostKind
    from shoal.core.registry import PluginError, load_plugins
    from shoal.core.vocabulary import ActionType as A
    from shoal.platforms.spec import PlatformSpec, register, spec

    base = {"name": "board", "code": 7, "label": "Board", "feed_kinds": (PostKind.POST,),
            "actions": (A.POST, A.LIKE, A.DO_NOTHING), "engagements": (A.LIKE,),
            "action_help": ("post", "like", "do_nothing")}
    with pytest.raises(InputError, match="'my-board': a platform's name is a lowercase"):
        PlatformSpec(**{**base, "name": "my-board"})
    with pytest.raises(InputError, match=r"engagements \['upvote'\] are not among its"):
        PlatformSpec(**{**base, "engagements": (A.UPVOTE,)})
    load_plugins()
    twitter = spec("twitter")
    clash = PlatformSpec(**{**twitter.__dict__, "label": "X"})
    with pytest.raises(PluginError, match=r"by shoal\.platforms\.twitter and by "
                                          r"tests\.test_misbehaving_parts"):
        register(clash, Strict)


def test_a_part_whose_config_model_cannot_check_a_config_is_refused():
    """Without a config model a part could not be named in a config; one that takes
    unknown fields would run a misspelt parameter on its default; an intervention's model
    must have what every entry has (its round): each is refused when registered."""
    from typing import Literal

    from pydantic import BaseModel

    from shoal.config.base import Strict
    from shoal.core.registry import BELIEF_RULES, INTERVENTIONS, PluginError

    class Loose(BaseModel):
        rule: Literal["loose_rule"]

    class NotAnEntry(Strict):
        kind: Literal["not_an_entry"]

    def nothing(*args):
        return {}

    with pytest.raises(PluginError, match="needs a config model"):
        BELIEF_RULES.register("no_config_rule", None, nothing)
    with pytest.raises(PluginError, match="must refuse unknown fields: derive it from "
                                          r"shoal\.config\.base\.Strict"):
        BELIEF_RULES.register("loose_rule", Loose, nothing)
    with pytest.raises(PluginError, match=r"must derive from shoal\.config\.interventions\."
                                          "InterventionSpec"):
        INTERVENTIONS.register("not_an_entry", NotAnEntry, nothing)
    assert "loose_rule" not in BELIEF_RULES and "not_an_entry" not in INTERVENTIONS


def test_a_platform_code_in_use_is_refused_when_registered():
    """Codes key every stored row of a platform: a second platform with a code in use is
    refused as it registers (whether or not a config enables it), naming both."""
    from shoal.config.base import Strict
    from shoal.core.posts import PostKind
    from shoal.core.registry import PluginError, load_plugins
    from shoal.core.vocabulary import ActionType as A
    from shoal.platforms.spec import PlatformSpec, register, spec

    load_plugins()
    taken = spec("twitter").code
    board = PlatformSpec(name="clashing_board", code=taken, label="Board",
                         feed_kinds=(PostKind.POST,), actions=(A.POST, A.DO_NOTHING),
                         engagements=(), action_help=("post", "do_nothing"))
    with pytest.raises(PluginError, match=rf"code {taken} is platform 'twitter''s \(from "
                                          r"shoal\.platforms\.twitter\)"):
        register(board, Strict)
