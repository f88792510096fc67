"""Checkpoints cost what a round changed, not what the run has accumulated.

Round memory, the cross-platform digest and notifications are windows that fill up over a
run; their checkpoint is a journal (shoal.core.state.KeyedJournal), so a late round's
checkpoint of them is no larger than an early one's, and replaying the journal rebuilds
them exactly. A small LLM run against the loopback server keeps digests and
notifications for its LLM agents.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from shoal.config import load_config
from shoal.core.state import KeyedJournal
from shoal.runs.simulation import Simulation
from shoal.world.persistence import WINDOWS, checkpoint, restore_world

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 25


@pytest.fixture(scope="module")
def llm_run():
    """25 rounds of 20 agents, 60% of them LLM-driven, checkpoints kept in memory."""
    cfg = load_config(ROOT / "configs" / "llm_quickstart.yaml",
                      [f"rounds={ROUNDS}", "population.size=20", "llm.agents.fraction=0.6"])
    sim = Simulation.create(cfg, out=None)
    try:
        sim.run()
    finally:
        sim.close()
    return sim


def _window_bytes(sim: Simulation, r: int) -> dict[str, int]:
    """Bytes of round r's checkpoint (log segment + state) for each window component."""
    log = sim.checkpoints.logs[r]
    state, _ = sim.checkpoints.read_state(r)
    return {name: (log[name].nbytes() if name in log else 0)
            + (state[name].nbytes() if name in state else 0) for name in WINDOWS}


def _whole(component) -> int:
    return len(json.dumps(component.get_state().meta))


def test_a_late_checkpoint_does_not_carry_the_accumulated_windows(llm_run):
    w = llm_run.world
    early, late = _window_bytes(llm_run, 10), _window_bytes(llm_run, ROUNDS)
    whole = {name: _whole(getattr(w, name)) for name in WINDOWS}
    # The windows did fill up (else the test could not tell the two schemes apart) ...
    assert whole["digest"] > 3 * early["digest"] > 0, (whole, early)
    # ... but the last round's checkpoint holds about what one round changed: far less than
    # the whole state, and not more than round 10's plus what a round adds.
    for name in WINDOWS:
        assert late[name] <= max(2 * early[name], 2_000), (name, early, late)
    assert sum(late.values()) < 0.5 * sum(whole.values()), (late, whole)


def test_replaying_the_journals_rebuilds_the_windows_exactly(llm_run):
    restored, _ = restore_world(llm_run.checkpoints, ROUNDS)
    for name in WINDOWS:
        live, again = getattr(llm_run.world, name), getattr(restored, name)
        assert again.journaling
        assert json.dumps(live.get_state().meta, sort_keys=True) == \
            json.dumps(again.get_state().meta, sort_keys=True), name
    # A restored journal starts where the log ends: its next segment is empty.
    log = checkpoint(restored).log
    assert all(not log[name].meta for name in WINDOWS), {n: log[n].meta for n in WINDOWS}


def test_a_window_restored_whole_stays_whole(llm_run):
    """A component restored from a whole state (a format-5 checkpoint) has no base in
    the log, so it is kept whole in every later state, and restores from that."""
    restored, _ = restore_world(llm_run.checkpoints, ROUNDS)
    state = restored.digest.get_state()
    restored.digest.set_state(state)
    cp = checkpoint(restored)
    assert "digest" not in cp.log and "digest" in cp.state
    assert cp.state["digest"].meta == state.meta


def test_the_keyed_journal_replays_any_sequence_of_changes():
    """Random sets, deletions, queue appends and pops, sorted id sets that gain and lose
    members: replaying the segments gives every intermediate mapping, value for value,
    and the queues and id sets are journaled as what changed, not whole."""
    rng = random.Random(5)
    journal, live, replayed = KeyedJournal(), {}, {}
    kinds = set()
    for _ in range(400):
        key = f"k{rng.randrange(6)}"
        op = rng.random()
        if op < 0.1:
            live.pop(key, None)
        elif op < 0.2:
            live[key] = {"text": str(rng.random())}
        elif op < 0.6:  # a bounded queue: append some, drop some from the head
            key = f"q{key}"
            q = list(live[key]) if isinstance(live.get(key), list) else []
            q += [[rng.randrange(5), "x"] for _ in range(rng.randrange(3))]
            live[key] = q[rng.randrange(3):][-6:]
        else:  # a sorted set of ids: add some anywhere, sometimes drop one
            key = f"s{key}"
            ids = set(live[key]) if isinstance(live.get(key), list) else set()
            ids |= {rng.randrange(200) for _ in range(rng.randrange(1, 3))}
            if ids and rng.random() < 0.2:
                ids.discard(min(ids))
            live[key] = sorted(ids) + ([] if ids else [0])
        segment = json.loads(json.dumps(journal.diff(live)))  # as read back from a file
        kinds |= {k for k in segment if segment[k]}
        KeyedJournal.apply(replayed, segment)
        assert replayed == live
    assert kinds == {"set", "del", "splice", "merge"}
