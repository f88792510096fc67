"""The prediction market (issue: markets): configs/market.yaml, smaller and shorter, runs;
prices stay in (0, 1) and sum to 1; cash and shares are conserved every round; the news
moves the price its way; a kill and resume gives identical tables; a fork without the news
is identical up to the fork and differs after; with the market → social direction off the
social tables are those of a run without markets; LLM traders trade over real HTTP and
impossible trades are rejected with their reason; bad market configs name their field."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from shoal import open_run
from shoal.cli.main import main
from shoal.core.errors import ConfigError
from tests.conftest import CONFIGS, write_config
from tests.helpers import (
    declared,
    fork_and_run,
    kill_then_resume,
    make_config,
    query,
    read_table,
    tables_differ,
)

ROUNDS, NEWS, FORK = 16, 8, 7


@pytest.fixture(scope="module")
def market_dict() -> dict:
    """configs/market.yaml with 400 agents, 16 rounds and the news at round 8."""
    data = yaml.safe_load((CONFIGS / "market.yaml").read_text())
    data.update(rounds=ROUNDS, population={"size": 400, "groups": [
        {"name": "activists", "fraction": 0.1}]})
    data["interventions"][0]["round"] = NEWS
    data["start_time"] = "2026-03-02T08:00:00"  # the news lands mid-afternoon
    return data


def _run(data: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = write_config(out / "c.yaml", data)
    assert main(["run", str(path), "--out", str(out / "runs"), "--quiet"]) == 0
    (run_dir,) = (out / "runs").iterdir()
    return run_dir


@pytest.fixture(scope="module")
def market_run(tmp_path_factory, market_dict) -> Path:
    return _run(market_dict, tmp_path_factory.mktemp("market"))


def _prices(run: Path, outcome: str = "yes") -> pd.Series:
    """The price path of an outcome, read through the run's lineage (a fork's rows up to
    its fork round are its parent's)."""
    prices = open_run(run).table("prices")
    return prices[prices.outcome == outcome].set_index("round")["price"].sort_index()


def test_prices_books_and_resolution(market_run):
    db = market_run / "trajectory.duckdb"
    bad = query(db, "SELECT round, market, sum(price), min(price), max(price) FROM prices "
                    "GROUP BY ALL HAVING abs(sum(price) - 1) > 1e-9 OR min(price) <= 0 "
                    "OR max(price) >= 1")
    assert bad == []
    assert query(db, "SELECT count(DISTINCT round) FROM prices")[0][0] == ROUNDS + 1
    books = query(db, "SELECT round, cash_imbalance, share_imbalance FROM market_books "
                      "ORDER BY round")
    assert len(books) == ROUNDS + 1
    assert all(abs(c) < 1e-6 and abs(s) < 1e-6 for _, c, s in books), books
    n_trades, volume = query(db, "SELECT count(*), sum(cash) FROM trades")[0]
    assert n_trades > 100 and volume > 0
    # The trades table and the actions table tell the same story.
    assert query(db, "SELECT count(*) FROM actions WHERE platform = 'market' AND "
                     "status = 'ok' AND action IN ('buy', 'sell')")[0][0] == n_trades
    # Resolved at the last round by the rule (mean position > 0), winners paid 1 a share.
    ((outcome, value, paid),) = query(db, "SELECT outcome, any_value(rule_value), "
                                          "sum(payout) FROM payouts WHERE agent >= 0 "
                                          "GROUP BY ALL")
    assert query(db, "SELECT payout FROM payouts WHERE agent = -1")[0][0] == pytest.approx(paid)
    mean = query(db, f"SELECT avg(position) FROM beliefs WHERE round = {ROUNDS}")[0][0]
    assert value == pytest.approx(mean) and outcome == ("yes" if mean > 0 else "no")
    held = query(db, f"SELECT sum(shares) FROM (SELECT arg_max(shares, round) shares "
                     f"FROM positions WHERE outcome = '{outcome}' GROUP BY agent)")[0][0]
    assert paid == pytest.approx(held)
    assert query(db, "SELECT count(*) FROM forecasts WHERE agent = -1")[0][0] == 2


def test_bridge_is_logged_both_ways(market_run):
    db = market_run / "trajectory.duckdb"
    kinds = dict(query(db, "SELECT kind, count(*) FROM market_bridge GROUP BY ALL"))
    assert kinds["sentiment"] >= ROUNDS - 1 and kinds["context"] >= ROUNDS - 1
    # Every news post of the market is a pinned event on each social platform.
    for ids, in query(db, "SELECT post_ids FROM market_bridge WHERE kind = 'news'"):
        kinds_of = query(db, f"SELECT DISTINCT kind FROM posts WHERE post_id IN "
                             f"({', '.join(map(str, ids))})")
        assert kinds_of == [("event",)]


@pytest.mark.slow
def test_kill_and_resume_gives_identical_tables(market_run, market_dict, tmp_path):
    path = write_config(tmp_path / "c.yaml", market_dict)
    run_dir = kill_then_resume(path, tmp_path / "runs", "mid_round:9")
    assert tables_differ(market_run / "trajectory.duckdb", run_dir / "trajectory.duckdb") == []


def test_fork_without_the_news(market_run, tmp_path, capsys):
    fork = fork_and_run(market_run, FORK, out=tmp_path, schedule=["drop breaking_news"])
    main_p, fork_p = _prices(market_run), _prices(fork)
    assert list(fork_p.index) == list(main_p.index), (main_p, fork_p)
    assert (main_p[:FORK + 1] == fork_p[:FORK + 1]).all()
    assert not main_p[FORK + 1:].equals(fork_p[FORK + 1:])
    # The news is for the tax: after it the price of "yes" is higher than without it.
    after = slice(NEWS, NEWS + 5)
    assert main_p[after].mean() > fork_p[after].mean()
    assert main(["compare", str(market_run), str(fork), "--out", str(tmp_path / "c.png")]) == 0
    shown = capsys.readouterr().out
    assert "price" in shown and "carbon_tax_passes" in shown


def test_market_to_social_off_leaves_the_social_tables_alone(market_dict, tmp_path):
    """The market draws from its own random streams and, with the market → social direction
    off, shows nothing to the social platforms: their tables are a no-market run's."""
    quiet = copy.deepcopy(market_dict)
    quiet["platforms"]["market"]["bridge"]["market_to_social"] = {"enabled": False}
    bare = copy.deepcopy(market_dict)
    del bare["platforms"]["market"]
    a, b = _run(quiet, tmp_path / "a"), _run(bare, tmp_path / "b")
    db_a, db_b = a / "trajectory.duckdb", b / "trajectory.duckdb"
    market = {s.name for s in declared(db_a).values() if s.owner == "market"}
    # besides the market's own tables: its rows of `actions`, the agents' `on_market`
    # column, and the rounds' action counts
    assert set(tables_differ(db_a, db_b)) - market == {"actions", "agents", "rounds"}
    acts = read_table(db_a, "actions")
    assert acts[acts.platform != "market"].reset_index(drop=True).equals(
        read_table(db_b, "actions"))
    assert query(db_a, "SELECT count(*) FROM trades")[0][0] > 0


@pytest.fixture(scope="module")
def llm_market(tmp_path_factory) -> tuple[Path, dict]:
    """Half of 120 agents LLM-driven against the loopback server, every agent a trader
    in a yes/no LMSR market and a three-outcome constant-product one."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=4, population={"size": 120})
    data["llm"]["agents"] = {"fraction": 0.5}
    data["platforms"]["market"] = {"members": {"fraction": 1.0}, "budget": 50, "markets": [
        {"id": "m1", "question": "Will the carbon tax pass?", "topic": "carbon_tax"},
        {"id": "m2", "question": "Which energy wins?", "topic": "nuclear_power",
         "outcomes": ["nuclear", "gas", "wind"], "maker": {"kind": "constant_product"}}]}
    return _run(data, tmp_path_factory.mktemp("llm_market")), data


def test_llm_traders_over_http(llm_market):
    """LLM traders get the market tool and the Markets section; their trades go through
    the books; a trade beyond their cash is rejected with its reason in `actions`."""
    db = llm_market[0] / "trajectory.duckdb"
    calls = dict(query(db, "SELECT outcome, count(*) FROM llm_calls WHERE platform = "
                           "'market' GROUP BY ALL"))
    assert calls.get("buy", 0) > 0 and calls.get("sell", 0) > 0
    llm_trades = query(db, "SELECT count(*), count(DISTINCT market) FROM trades "
                           "WHERE source = 1")[0]
    assert llm_trades[0] > 0 and llm_trades[1] == 2
    statuses = dict(query(db, "SELECT status, count(*) FROM actions WHERE platform = "
                              "'market' AND source = 'llm' GROUP BY ALL"))
    assert statuses.get("no_cash", 0) > 0 and statuses.get("no_shares", 0) > 0
    assert statuses.get("ok", 0) > 0
    sections = {s for s, in query(db, "SELECT DISTINCT section FROM context "
                                      "WHERE platform = 'market'")}
    assert {"markets", "market_digest"} <= sections
    social = {s for s, in query(db, "SELECT DISTINCT section FROM context "
                                    "WHERE platform = 'twitter'")}
    assert "markets" in social
    books = query(db, "SELECT max(abs(cash_imbalance)), max(abs(share_imbalance)) "
                      "FROM market_books")[0]
    assert max(books) < 1e-6


def test_a_context_section_may_set_one_field(llm_market, tmp_path):
    """`memory.context.sections` may give a section only its limit (the priority stays
    its own), and the traders' "what people said" section takes its own setting (it
    follows the prices' section, one priority lower, only when it has none)."""
    data = copy.deepcopy(llm_market[1])
    data["memory"].setdefault("context", {})["sections"] = {
        "market_digest": {"max_tokens": 40}, "markets": {"priority": 4}}
    db = _run(data, tmp_path) / "trajectory.duckdb"
    def longest(db: Path) -> dict[str, int]:
        return dict(query(db, "SELECT section, max(tokens) FROM context WHERE platform = "
                              "'market' GROUP BY ALL"))

    given, own = longest(db), longest(llm_market[0] / "trajectory.duckdb")
    assert own["market_digest"] > 40 >= given["market_digest"]
    assert given["markets"] > 40  # (its own limit, 300)


@pytest.mark.parametrize("case", ["rule", "llm"])
@pytest.mark.slow
def test_same_tables_on_ray(case, market_run, market_dict, llm_market, tmp_path, ray_session):
    """Invariant 1 with a market: the Ray executor (two shards) gives the local tables."""
    ref, data = (market_run, market_dict) if case == "rule" else llm_market
    ray_run = _run({**data, "executor": {"kind": "ray", "shards": 2}}, tmp_path)
    assert tables_differ(ref / "trajectory.duckdb", ray_run / "trajectory.duckdb") == []


MARKET = {"id": "m", "question": "Q?", "topic": "carbon_tax"}


@pytest.mark.parametrize("market, message", [
    ({**MARKET, "topic": "nope"}, "platforms.market.markets.0.topic: unknown topic 'nope'"),
    ({**MARKET, "outcomes": ["yes", "yes"]}, "duplicate outcomes ['yes']"),
    ({**MARKET, "initial_prices": [0.7, 0.7]}, "must be in (0, 1) and sum to 1"),
    ({**MARKET, "closes": 99}, "platforms.market.markets.0.closes: round 99 is past"),
    ({**MARKET, "resolution": {"outcome": "maybe"}},
     "resolution.outcome: unknown outcome 'maybe'"),
    ({**MARKET, "resolution": {}}, "give exactly one of `outcome` and `rule`"),
    ({**MARKET, "maker": {"kind": "lmsr", "b": -1}}, "maker.b: must be > 0.0, got -1"),
    ({**MARKET, "maker": "bookie"}, "bookie"),
])
def test_bad_market_configs_name_the_field(quickstart_dict, tmp_path, market, message):
    data = {**quickstart_dict, "platforms": {**quickstart_dict["platforms"],
                                             "market": {"markets": [market]}}}
    with pytest.raises(ConfigError) as err:
        make_config(data, tmp_path)
    assert message in str(err.value)


def test_notebook_scores_and_report(market_run, tmp_path):
    run = open_run(market_run)
    ((market, outcome),) = run.market_resolutions()[["market", "outcome"]].itertuples(
        index=False)
    closing = run.table("forecasts").query("agent == -1").set_index("outcome")["probability"]
    scores = run.market_scores().set_index("agent")
    want = sum((p - (o == outcome)) ** 2 for o, p in closing.items())
    assert scores.loc[-1, "brier"] == pytest.approx(want)
    assert scores.loc[-1, "log_score"] == pytest.approx(float(np.log(closing[outcome])))
    assert len(scores) == 1 + int(query(market_run / "trajectory.duckdb",
                                        "SELECT count(*) FROM agents WHERE on_market")[0][0])
    assert main(["report", str(market_run), "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert 'id="markets"' in html and market in html and "market Brier" in html


def test_a_fork_cannot_change_the_markets(market_run, tmp_path, capsys):
    code = main(["fork", str(market_run), "--round", str(FORK), "--out", str(tmp_path),
                 "--set", "platforms.market.markets.0.id=other"])
    assert code == 2
    err = capsys.readouterr().err
    assert "platforms.market.markets.0.id: cannot be changed in a fork" in err
    assert "platforms.market.{participation,max_actions_per_round,trading,bridge}" in err
    # The bridge can: a fork that switches market → social off runs.
    assert main(["fork", str(market_run), "--round", str(FORK), "--out", str(tmp_path),
                 "--set", "platforms.market.bridge.market_to_social.enabled=false",
                 "--quiet"]) == 0


def test_bare_yes_and_no_are_outcome_names(quickstart_dict, tmp_path):
    """YAML reads a bare yes/no as true/false; as outcomes and resolutions they are names."""
    market = {**MARKET, "outcomes": [True, False], "resolution": {
        "rule": {"topic": "carbon_tax", "if_true": False, "if_false": True}}}
    other = {**MARKET, "id": "n", "resolution": {"outcome": True}}
    cfg = make_config({**quickstart_dict, "platforms": {
        **quickstart_dict["platforms"], "market": {"markets": [market, other]}}}, tmp_path)
    first, second = cfg.platforms.market.markets
    assert first.outcome_names() == ["yes", "no"]
    assert (first.resolution.rule.if_true, first.resolution.rule.if_false) == ("no", "yes")
    assert second.resolution.outcome == "yes"


def test_inspect_an_agent_of_a_market_run(market_run, capsys):
    """issue 26 item 13: `shoal inspect` on a market run rebuilds the digest from every
    logged action, trades included; it shows what the driver built (the digest holds the
    social platforms' actions, not trades) instead of failing with KeyError: 'buy'."""
    traders = query(market_run / "trajectory.duckdb",
                    "SELECT DISTINCT agent FROM actions WHERE platform = 'market' AND "
                    "action IN ('buy', 'sell') AND status = 'ok' AND round < 3 ORDER BY 1")
    assert traders, "no trade before round 3 to rebuild"
    for agent in (2, traders[0][0]):
        assert main(["inspect", str(market_run), "--agent", str(agent), "--round", "3"]) == 0
        text = capsys.readouterr().out
        assert "=== SYSTEM ===" in text and "=== OBSERVATION ===" in text
        assert "you bought" not in text and "'buy'" not in text


def test_brier_and_log_scores_by_hand():
    """A yes/no market resolved yes. The market (agent −1) closed at 0.6/0.4: Brier
    0.4² + 0.4² = 0.32, log ln 0.6. Agent 1 said 0.7/0.3: 0.09 + 0.09 = 0.18, ln 0.7.
    Agent 2 gave yes no chance: Brier 1 + 1 = 2 (the worst), log ln 1e-12 (the floor
    docs/markets.md states), not −∞. An unresolved market is not scored."""
    from shoal.analysis.markets import scores

    forecasts = pd.DataFrame({
        "round": 5, "market": ["m"] * 6 + ["open"] * 2,
        "agent": [-1, -1, 1, 1, 2, 2, 1, 1],
        "outcome": ["yes", "no"] * 4,
        "probability": [0.6, 0.4, 0.7, 0.3, 0.0, 1.0, 0.5, 0.5]})
    payouts = pd.DataFrame({"round": [6, 6], "market": "m", "agent": [-1, 1],
                            "outcome": "yes", "payout": [10.0, 10.0],
                            "rule_value": np.nan})
    got = scores(forecasts, payouts).set_index("agent")
    assert list(got["market"]) == ["m"] * 3
    assert got["brier"].to_dict() == pytest.approx({-1: 0.32, 1: 0.18, 2: 2.0})
    assert got["log_score"].to_dict() == pytest.approx(
        {-1: np.log(0.6), 1: np.log(0.7), 2: np.log(1e-12)})
