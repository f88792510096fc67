"""Contexts built in the shards (`executor.contexts: shards`): the same tables as contexts
built in the driver, on Ray, across a resume; the driver's CPU time per round; a bad
value named by its field."""

from __future__ import annotations

import pytest
import yaml

from shoal.config import parse_config
from shoal.core.errors import ConfigError
from shoal.runs.simulation import Simulation
from tests.conftest import CONFIGS
from tests.helpers import make_config, query, tables_differ


def _data(url: str, contexts: str, rounds: int = 3) -> dict:
    """A small LLM run on Ray with 2 shards: a tight budget (lines are trimmed), an event
    in round 2 (event lines, pinned posts), both platforms (agents with two turns)."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=rounds, population={"size": 40, "groups": [{"name": "press",
                                                                    "fraction": 0.2}]},
                activity={"level": 1.0, "hourly": "flat"},
                executor={"kind": "ray", "shards": 2, "contexts": contexts})
    data["interventions"][0]["round"] = 2
    data["llm"]["providers"][0].update(base_urls=[url], max_retries=1, timeout_s=10)
    data["llm"]["agents"]["fraction"] = 0.5
    # (the budget holds the whole request: ~800 tokens of tool definitions, then a context
    # of ~700 tokens)
    data["memory"]["context"]["budget_tokens"] = 1550
    return data


@pytest.fixture(scope="module")
def driver_run(module_server, tmp_path_factory, ray_session):
    """The reference: contexts built in the driver, on Ray."""
    tmp = tmp_path_factory.mktemp("driver")
    with Simulation.create(make_config(_data(module_server.url, "driver"), tmp)) as sim:
        sim.run()
    return sim.dir


@pytest.mark.slow
def test_shard_contexts_give_the_driver_tables_on_ray(driver_run, module_server, tmp_path,
                                                      ray_session):
    """Every trajectory table (context and llm_calls included, prefix reuse too) is the
    same whether the driver or the shards assemble the contexts."""
    with Simulation.create(make_config(_data(module_server.url, "shards"), tmp_path)) as sim:
        assert sim.driver().in_shards and sim.driver().executor.kind == "ray"
        sim.run()
    assert tables_differ(driver_run.db, sim.dir.db) == []
    # the comparison covers what the shards build: contexts with trimmed lines, events,
    # prompts whose reuse was measured
    trimmed = query(sim.dir.db, "SELECT count(*) FROM context WHERE trimmed <> '[]'")[0][0]
    events = query(sim.dir.db, "SELECT count(*) FROM context WHERE section = 'events' "
                               "AND lines > 0")[0][0]
    reuse = query(sim.dir.db, "SELECT count(*) FROM rounds WHERE prefix_reuse > 0")[0][0]
    assert trimmed > 0 and events > 0 and reuse >= 2


@pytest.mark.slow
def test_shard_contexts_resume_with_the_same_prefix_reuse(driver_run, module_server, tmp_path,
                                                          ray_session):
    """Stopped after round 1 and resumed (new shards, told each agent's previous prompt by
    the driver), the run still has the reference's tables."""
    cfg = make_config(_data(module_server.url, "shards"), tmp_path)
    with Simulation.create(cfg) as sim:
        sim.run(1)
    with Simulation.resume(sim.dir.root) as again:
        again.run()
    assert tables_differ(driver_run.db, again.dir.db) == []


@pytest.mark.slow
def test_driver_cpu_time_is_in_rounds(driver_run):
    """Each round has the driver's CPU time and, with LLM turns, its share per turn."""
    rows = query(driver_run.db, "SELECT r.round, r.driver_cpu_ms, r.driver_cpu_ms_per_llm_turn,"
                 " (SELECT count(*) FROM llm_calls c WHERE c.round = r.round AND c.call = 1 "
                 "AND c.retries = 0) FROM rounds r ORDER BY r.round")
    assert len(rows) == 3
    for _, cpu, per_turn, turns in rows:
        assert turns > 0 and cpu > 0
        assert per_turn == pytest.approx(cpu / turns)


def test_bad_contexts_value_names_the_field(tmp_path):
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data["executor"] = {"contexts": "workers"}
    with pytest.raises(ConfigError, match=r"executor\.contexts.*'driver', 'shards' or 'auto'"):
        parse_config(data)
