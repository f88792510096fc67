"""The example configs' trajectories match the committed golden digests, table by table,
on the in-process executor, also with the driver's agent-wise phases split over threads
(shoal.core.workers), and the configs whose shards do the most varied work (both
platforms, LLM agents, the fork, W) on the Ray executor too (tests/golden.py explains the
digests). The other belief-model configs differ from `model_social_influence` only in the
driver's update rule, which runs the same code whatever the executor; leaving their Ray
runs out keeps the suite within CI's time."""

from __future__ import annotations

import pytest

from tests.golden import CASES, load_golden, run_case

RAY_CASES = {"quickstart", "llm_quickstart", "workload_w", "herd_effect_up",
             "model_social_influence"}


# The quick tier (`-m "not slow"`) keeps the local legs of these: the rule and LLM quick
# starts, W, and two belief models; every Ray leg and the other local ones are `slow`.
QUICK_CASES = {"quickstart", "llm_quickstart", "workload_w", "model_degroot",
               "model_hegselmann_krause"}


# Legs: the in-process executor as configured (populations this small get one thread);
# the same with the driver's agent-wise phases split into ranges of 7 agents on 3
# threads; Ray with 2 shards and the same threads.
LEGS = {"local": ("local", False), "threads": ("local", True), "ray": ("ray", True)}


@pytest.mark.parametrize("leg", ["local", "threads", pytest.param("ray", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.name, marks=() if c.name in QUICK_CASES else pytest.mark.slow)
    for c in CASES])
def test_tables_match_the_golden_digests(case, leg, tmp_path, request):
    executor, threaded = LEGS[leg]
    if executor == "ray":
        if case.name not in RAY_CASES:
            pytest.skip("the update rule runs in the driver: the threads leg covers it")
        request.getfixturevalue("ray_session")
    want = load_golden()[case.name]
    got = run_case(case, tmp_path, executor, threaded)
    changed = sorted(t for t in want if got.get(t) != want[t])
    assert not changed, f"{case.name} ({leg}): tables changed: {changed}"
