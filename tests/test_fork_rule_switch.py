"""Forks that switch the belief rule at a round k > 0 (docs/forks.md): every registered rule
into every other. The exposure history is what differs between rules (some read it,
others keep none): the fork must start from the state its rule needs, derived from the
checkpoint, so that the fork, resumed from its own checkpoints, gives the same tables as
the fork run straight through."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shoal.beliefs.rules import make_rule
from shoal.core.registry import BELIEF_RULES
from shoal.runs.fork import fork_run
from shoal.runs.simulation import Simulation
from shoal.store.run_dir import open_run_dir
from shoal.world.persistence import restore_world
from tests.helpers import fork_plan, make_config, run_config, tables_differ

K = 2
ROUNDS = 4

# Every registered rule with its defaults, and a rule that reads the exposure history only
# when asked (`skip_seen`), so that both directions of the switch are covered by rules
# other than social_influence too.
RULES: dict[str, dict] = {name: {"rule": name} for name in BELIEF_RULES.names()}
RULES["degroot_skip_seen"] = {"rule": "degroot", "skip_seen": True}
PAIRS = [(a, b) for a in RULES for b in RULES if a != b]
pytestmark = pytest.mark.slow  # forks, resumes and restores (kills and resumes: slow)


def _small() -> dict:
    """The quick start, 40 agents active around the clock, ROUNDS rounds."""
    from tests.conftest import CONFIGS

    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=ROUNDS, population={"size": 40}, activity={"hourly": "flat"})
    return data


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The finished base run of each rule (made when first asked for)."""
    data = _small()
    runs: dict[str, Path] = {}

    def get(rule: str) -> Path:
        if rule not in runs:
            cfg = make_config({**data, "beliefs": {"update": RULES[rule]}},
                              tmp_path_factory.mktemp(rule))
            runs[rule] = run_config(cfg).dir.root
        return runs[rule]
    return get


def _fork(parent: Path, rule: str, out: Path, rounds: int | None) -> Path:
    """Fork `parent` at K into `rule`, run `rounds` rounds (None: to the end), close it."""
    sets = [f"beliefs.update={yaml.safe_dump(RULES[rule], default_flow_style=True).strip()}"]
    with fork_run(parent, K, fork_plan(sets=sets), out=out) as sim:
        if rounds != 0:
            sim.run(rounds)
    return sim.dir.root


def _history(run: Path, round_: int):
    """The exposure history of a run directory at the end of a kept round."""
    return restore_world(open_run_dir(run).checkpoints, round_)[0].history


def _resume(run: Path, rounds: int | None) -> None:
    with Simulation.resume(run) as sim:
        sim.run(rounds)


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_fork_switching_rule(base, tmp_path, old, new):
    """Made without running (its own checkpoint of K holds the new rule's state), then
    resumed to the end: every checkpoint of the fork restores (the logged exposures agree
    with the counts), and the history at K is the parent's when both rules read one,
    none when the new rule reads none, else empty from K + 1 on."""
    parent = base(old)
    fork = _fork(parent, new, tmp_path, 0)
    _resume(fork, None)
    store = open_run_dir(fork).checkpoints
    assert store.available() == list(range(K, ROUNDS + 1))
    worlds = {r: restore_world(store, r)[0] for r in store.available()}
    at_k, kept = worlds[K].history, _history(parent, K)
    if not make_rule(worlds[K].cfg.beliefs.update).uses_novelty:
        assert all(w.history is None for w in worlds.values())
    elif kept is not None:  # carried over: the pairs the parent's agents had seen
        assert at_k.since == 0 and (at_k.keys == kept.keys).all()
    else:  # nothing was recorded: everything is new to the fork's rule
        assert at_k.since == K + 1 and len(at_k) == 0


# One switch of each kind (the history dropped, started, carried over; none either side):
# stopped and resumed twice, the tables equal those of the fork run straight through.
KINDS = [("social_influence", "bounded_confidence"), ("bounded_confidence", "social_influence"),
         ("social_influence", "degroot_skip_seen"), ("voter", "deffuant")]


@pytest.mark.parametrize(("old", "new"), KINDS, ids=[f"{a}->{b}" for a, b in KINDS])
def test_fork_switching_rule_resumes_exactly(base, tmp_path, old, new):
    """A fork stopped right after it was made and again after round K + 1, resumed each
    time, gives the same tables as the fork run to the end at once."""
    parent = base(old)
    straight = _fork(parent, new, tmp_path / "straight", None)
    stopped = _fork(parent, new, tmp_path / "stopped", 0)
    _resume(stopped, 1)
    _resume(stopped, None)
    assert tables_differ(straight / "trajectory.duckdb", stopped / "trajectory.duckdb") == []


def test_parent_history_is_not_empty(base):
    """The switch is not vacuous: at K the base run's agents have seen posts."""
    assert len(_history(base("social_influence"), K)) > 0


def test_fork_of_a_fork_switching_back(base, tmp_path):
    """social_influence -> bounded_confidence at K -> social_influence at K + 1: the
    history the last fork's rule reads starts at K + 2 (the exposures its grandparent
    logged up to K belong to no history of it), and it resumes exactly."""
    middle = _fork(base("social_influence"), "bounded_confidence", tmp_path / "middle", None)
    sets = ["beliefs.update=social_influence"]
    ends = []
    for name, first in (("straight", None), ("stopped", 0)):
        with fork_run(middle, K + 1, fork_plan(sets=sets), out=tmp_path / name) as sim:
            if first != 0:
                sim.run()
        ends.append(sim.dir.root)
    _resume(ends[1], None)
    assert tables_differ(ends[0] / "trajectory.duckdb", ends[1] / "trajectory.duckdb") == []
    history = _history(ends[0], ROUNDS)
    assert history.since == K + 2 and len(history) > 0
    assert (history.last_round >= K + 2).all()


@pytest.mark.parametrize(("old", "new"), [("social_influence", "bounded_confidence"),
                                          ("bounded_confidence", "social_influence")])
def test_set_intervention_switching_rule_resumes_exactly(tmp_path, old, new):
    """The same switch made mid-run by a `set` intervention at round K + 1: a run stopped
    after that round and resumed gives the same tables as one run straight through."""
    data = {**_small(), "rounds": ROUNDS + 1, "beliefs": {"update": RULES[old]},
            "interventions": [{"kind": "set", "round": K + 1,
                               "values": {"beliefs.update": RULES[new]}}]}
    straight = run_config(make_config(data, tmp_path / "straight")).dir.root
    with Simulation.create(make_config(data, tmp_path / "stopped")) as sim:
        sim.run(K + 1)
    _resume(sim.dir.root, None)
    assert tables_differ(straight / "trajectory.duckdb",
                         sim.dir.root / "trajectory.duckdb") == []
    history = _history(straight, ROUNDS + 1)
    assert (history is None) == (new == "bounded_confidence")
    assert history is None or history.since == K + 1
