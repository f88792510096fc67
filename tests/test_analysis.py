"""The notebook API on real runs: frames, lineage through a fork, several runs in one
frame, reading a run while another process writes it, and the plots."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.figure import Figure

from shoal import open_run, open_runs
from shoal.analysis import plots
from shoal.analysis.runs import FRAMES, Run
from shoal.core.errors import InputError
from shoal.runs.fork import fork_run
from shoal.store.lineage import being_written
from shoal.store.run_dir import RunDir
from tests.conftest import CONFIGS, ROOT, write_config
from tests.helpers import fork_plan, make_config, run_config

K = 4
ROUNDS = 8
AGENTS = 200
ARMS = [  # injected at K + 1 by the fork: two posts per initial-vote arm
    {"platform": "reddit", "author": None, "text": f"Post {i}",
     "stance": {"carbon_tax": s}, **({"votes": v} if v else {})}
    for i, (s, v) in enumerate([(0.5, {"up": 1}), (-0.5, {"up": 1}), (0.4, None),
                                (-0.4, None), (0.6, {"down": 1}), (-0.6, {"down": 1})])
]


def small(**overrides) -> dict:
    """The quick start, with 200 agents and 8 rounds."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update({"rounds": ROUNDS, **overrides})
    data["population"] = {**data["population"], "size": AGENTS}
    return data


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> SimpleNamespace:
    """A root run and a fork at K that injects posts with seeded votes, in `<tmp>/runs`."""
    out = tmp_path_factory.mktemp("analysis") / "runs"
    root = run_config(make_config(small(), out)).dir.root
    intervene = out.parent / "arms.yaml"
    intervene.write_text(yaml.safe_dump([{"kind": "posts", "round": K + 1, "items": ARMS}]))
    fork = fork_run(root, K, fork_plan(intervene=intervene))
    try:
        fork.run()
    finally:
        fork.close()
    return SimpleNamespace(out=out, root=root, fork=fork.dir.root, fork_obj=fork)


def post_stats(run: Path) -> pd.DataFrame:
    """The store's post_stats view, straight from the file."""
    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        return con.sql("SELECT post_id, up, down, shares, replies FROM post_stats "
                       "ORDER BY post_id").df()
    finally:
        con.close()


def test_every_frame_of_a_finished_run(family):
    """Every frame reads, with plain-string enums; the ones a rule-based run fills are
    non-empty; llm_calls is empty but has the schema's columns."""
    run = open_run(family.root)
    assert run.run_id == family.root.name and run.status == "finished"
    assert run.last_round == ROUNDS and run.topics == ["carbon_tax", "nuclear_power"]
    assert run.config["population"]["size"] == AGENTS
    for name in FRAMES:
        df = getattr(run, name)
        assert not any(isinstance(t, pd.CategoricalDtype) for t in df.dtypes), name
    # every frame has rows but what this rule-based run without events does not write
    # (contexts, interventions, LLM calls)
    assert sum(len(getattr(run, name)) == 0 for name in FRAMES) <= 3
    assert len(run.beliefs) and len(run.posts)
    assert run.rounds["round"].tolist() == list(range(1, ROUNDS + 1))
    assert len(run.agents) == AGENTS
    assert len(run.beliefs) == AGENTS * 2 * (ROUNDS + 1)
    assert set(run.actions["status"]) >= {"ok"} and run.actions["platform"].dtype != "category"
    assert {"model", "prompt_tokens", "cost_usd"} <= set(run.llm_calls.columns)
    assert run.beliefs is run.beliefs  # cached
    assert run.refresh().beliefs.equals(run.beliefs)


def test_posts_carry_post_stats_and_stances(family):
    """The counts equal the store's post_stats view; one stance column per topic holds
    post_stances (NaN where a post does not address the topic)."""
    run = open_run(family.root)
    posts = run.posts
    mine = posts[["post_id", "up", "down", "shares", "replies"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, post_stats(family.root), check_dtype=False)
    stances = run.table("post_stances")
    for topic in run.topics:
        col = posts.set_index("post_id")[f"stance_{topic}"]
        rows = stances[stances["topic"] == topic].set_index("post_id")["stance"]
        assert col.dropna().sort_index().equals(rows.sort_index().rename(col.name))
    assert posts["up"].sum() > 0 and posts["shares"].sum() > 0


def test_a_fork_includes_its_parents_prefix(family):
    """The fork's frames: the parent's rounds 0..K and posts before the fork, then its own;
    its lineage and fork round; its injected posts by arm."""
    root, fork = open_run(family.root), open_run(family.fork_obj)  # a Simulation works
    assert fork.path == family.fork
    assert fork.lineage["run_id"].tolist() == [family.root.name, family.fork.name]
    assert fork.lineage["last_round"].tolist()[0] == K and fork.fork_rounds == [K]
    assert (fork.parent_run_id, fork.fork_round) == (family.root.name, K)
    assert fork.rounds["round"].tolist() == list(range(1, ROUNDS + 1))
    for name in FRAMES:
        mine, theirs = getattr(fork, name), getattr(root, name)
        if "round" not in mine.columns or name in ("rounds", "posts"):
            continue  # (rounds: timings; posts: ids follow the fork's own order)
        mine, theirs = (df[df["round"] <= K].reset_index(drop=True) for df in (mine, theirs))
        if len(theirs) or len(mine):  # (empty frames of either dtype are the same)
            pd.testing.assert_frame_equal(mine, theirs, obj=name)
    assert fork.beliefs["round"].max() == ROUNDS
    n_parent = int(fork.lineage["n_posts"].iloc[0])
    inherited = fork.posts[fork.posts["post_id"] < n_parent]
    assert inherited["text"].tolist() == root.posts["text"].iloc[:n_parent].tolist()
    treated = fork.treated_posts()
    assert len(treated) == len(ARMS) and min(treated) == n_parent
    assert fork.interventions["round"].tolist() == [K + 1]
    assert fork.interventions["effect"].iloc[0]["post_ids"] == treated
    herd = fork.herd_effect().set_index("arm")
    assert herd["n"].to_dict() == {"up": 2, "control": 2, "down": 2}
    assert herd.loc["up", "mean_score"] >= 1 and root.herd_effect().empty


def test_metrics_as_run_methods(family):
    """Each metric runs on a real run and has the documented shape."""
    run = open_run(family.fork)
    n_rows = (ROUNDS + 1) * 2
    assert len(run.belief_stats()) == len(run.polarization()) == n_rows
    pol = run.polarization()
    assert pol["bimodality"].between(0, 1).all() and (pol["esteban_ray"] >= 0).all()
    assert len(run.group_distance()) == n_rows
    by_group = run.group_distance("group_name")  # activists vs media
    assert set(by_group["group_a"]) == {"activists"} and set(by_group["group_b"]) == {"media"}
    echo = run.echo_chambers(rounds=[0, ROUNDS])
    assert echo["n_edges"].gt(0).all() and echo["correlation"].between(-1, 1).all()
    share = run.like_minded_share()
    assert share["round"].min() >= 2 and share["share"].between(0, 1).all()
    casc = run.cascades(min_size=2)
    assert len(casc) and (casc["size"] >= 2).all() and (casc["structural_virality"] >= 1).all()
    growth = run.cascade_growth(top=3)
    assert growth.groupby("root_id")["size"].is_monotonic_increasing.all()
    assert growth.groupby("root_id", sort=False)["size"].last().tolist() == \
        casc["size"].head(3).tolist()
    engagement = run.engagement()
    assert len(engagement) == AGENTS and engagement["engagement"].sum() > 0
    assert 0 < run.engagement_gini() < 1


def test_open_runs_has_a_run_column(family):
    """Frames concatenated with a run column first, metrics per run, runs by label; a
    folder opens all its runs, parents first."""
    runs = open_runs([family.root, family.fork], labels=["base", "fork"])
    assert len(runs) == 2 and runs.run_ids == [family.root.name, family.fork.name]
    beliefs = runs.beliefs
    assert beliefs.columns[0] == "run" and beliefs["run"].unique().tolist() == ["base", "fork"]
    assert beliefs.groupby("run").size().tolist() == [AGENTS * 2 * (ROUNDS + 1)] * 2
    assert runs["fork"].run_id == family.fork.name and runs[0].run_id == family.root.name
    pol = runs.polarization()
    assert pol.columns[0] == "run" and len(pol) == 2 * (ROUNDS + 1) * 2
    assert pol[pol["run"] == "fork"].drop(columns="run").reset_index(drop=True).equals(
        runs["fork"].polarization())
    gini = runs.engagement_gini()
    assert gini.index.tolist() == ["base", "fork"] and gini.between(0, 1).all()
    assert runs.herd_effect()["run"].unique().tolist() == ["fork"]
    assert set(runs.config) == {"base", "fork"} and runs.topics == runs[0].topics
    folder = open_runs(family.out)
    assert folder.labels == [family.root.name, family.fork.name]
    with pytest.raises(InputError, match="distinct labels"):
        open_runs([family.root, family.root])


def test_open_by_id_and_errors(family, monkeypatch, tmp_path):
    """A run id is looked up under ./runs; a missing run is an input error."""
    monkeypatch.chdir(family.out.parent)
    assert open_run(family.root.name).path == Path("runs") / family.root.name
    with pytest.raises(InputError, match="no such run directory"):
        open_run(tmp_path / "missing")
    with pytest.raises(InputError, match="unknown table"):
        open_run(family.root).table("nope")


def test_a_run_made_before_a_table_existed(family, tmp_path):
    """An older run's file without `llm_calls` gives an empty frame with the columns."""
    old = tmp_path / family.root.name
    shutil.copytree(family.root, old)
    con = duckdb.connect(str(old / "trajectory.duckdb"))
    con.execute("DROP TABLE llm_calls")
    con.close()
    run = open_run(old)
    assert run.llm_calls.empty
    assert run.llm_calls.columns.tolist() == open_run(family.root).llm_calls.columns.tolist()
    assert len(run.beliefs) == AGENTS * 2 * (ROUNDS + 1)


@pytest.mark.slow
def test_reading_a_run_while_it_is_written(tmp_path):
    """`shoal run` in another process with output.live_parquet: while it holds the DuckDB
    file, open_run reads a consistent snapshot (every frame cut at the same last round)
    from the live mirror; the writer is not blocked and finishes normally; the snapshot
    equals the finished run's first rounds."""
    rounds = 80  # ~5 s of writing after round 3; the reads take ~1.5 s
    cfg = write_config(tmp_path / "live.yaml",
                       small(rounds=rounds, output={"dir": str(tmp_path / "runs"),
                                                    "live_parquet": True}))
    proc = subprocess.Popen([sys.executable, "-m", "shoal.cli", "run", str(cfg), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        path = _wait_for_round(tmp_path / "runs", 3, proc)
        assert being_written(RunDir(path))
        run = open_run(path)
        last = run.last_round
        assert 3 <= last < rounds and run.status == "running"
        beliefs, actions, posts = run.beliefs, run.actions, run.posts
        assert beliefs["round"].max() == last == actions["round"].max()
        assert len(beliefs) == AGENTS * 2 * (last + 1)
        assert posts["round"].max() <= last and len(run.exposures) and len(run.agents)
        assert len(run.polarization()) == 2 * (last + 1)
        assert being_written(RunDir(path)), "the run ended before the reads: raise rounds"
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = open_run(path)
    assert done.meta["status"] == "finished" and done.last_round == rounds
    pd.testing.assert_frame_equal(done.beliefs[done.beliefs["round"] <= last], beliefs)
    assert run.refresh().last_round == rounds


def _wait_for_round(out: Path, round_: int, proc: subprocess.Popen) -> Path:
    """The run directory once its live mirror has `round_`'s rounds row."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
        hits = list(out.glob(f"*/live/rounds/round={round_:06d}.parquet"))
        if hits:
            return hits[0].parents[2]
        time.sleep(0.05)
    raise AssertionError(f"round {round_} never appeared under {out}")


def test_plots_return_figures_and_write_pngs(family, tmp_path):
    """Each plot is a Figure with the expected panels and saves a PNG."""
    run = open_run(family.fork)
    runs = open_runs([family.root, family.fork])
    figures = {
        "beliefs": (run.plot_beliefs(tmp_path / "beliefs.png"), 2 + 1),  # + colour bar
        "beliefs_runs": (plots.belief_distribution(runs.beliefs,
                                                   path=tmp_path / "beliefs_runs.png"),
                         4 + 1),
        "polarization": (run.plot_polarization(tmp_path / "polarization.png"), 4),
        "cascades": (run.plot_cascades(top=3, path=tmp_path / "cascades.png"), 1),
        "compare": (runs.plot_comparison(tmp_path / "compare.png"), 2),
    }
    for name, (fig, n_axes) in figures.items():
        assert isinstance(fig, Figure) and len(fig.axes) == n_axes, name
        png = (tmp_path / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n", name
    compare = figures["compare"][0]
    assert [ln.get_label() for ln in compare.axes[0].lines[:2]] == runs.labels
    assert any(np.allclose(line.get_xdata(), [K, K]) for line in compare.axes[0].lines[2:])
    assert plots.cascade_growth(run.cascade_growth(roots=[])).axes[0].get_legend() is None


def test_run_wraps_only_run_directories(tmp_path):
    """A folder that is not a run is an input error naming it."""
    (tmp_path / "x").mkdir()
    with pytest.raises(InputError, match="not a Shoal run directory"):
        Run(tmp_path / "x")
    with pytest.raises(InputError, match="no runs"):
        open_runs(tmp_path / "x")


def test_bad_arguments_of_the_notebook_metrics_are_named(tmp_path):
    """A metric's argument out of its domain is an InputError naming it, not a pandas or
    numpy error from deep inside: bins, an agents column, a platform, an as-of round, a
    run label or index."""
    from shoal import open_run, open_runs
    from shoal.cli.main import main
    from shoal.core.errors import InputError

    out = tmp_path / "runs"
    assert main(["run", str(ROOT / "configs" / "quickstart.yaml"), "--rounds", "2", "--set",
                 "population.size=50", "--out", str(out), "--quiet"]) == 0
    (path,) = out.iterdir()
    run = open_run(path)
    for call, said in ((lambda: run.polarization(bins=0), "bins=0"),
                       (lambda: run.group_distance("nope_col"), "groups='nope_col'"),
                       (lambda: run.echo_chambers(platform="myspace"), "platform='myspace'"),
                       (lambda: run.graph_relations(as_of=-5), "as_of=-5"),
                       (lambda: run.graph_entities(as_of=1.7), "as_of=1.7"),
                       (lambda: run.like_minded_share(by=("nope",)), "by=('nope',)"),
                       (lambda: run.cascades(kinds=["retweet"]), "kinds=['retweet']"),
                       (lambda: run.cascade_growth(top=-1), "top=-1"),
                       (lambda: run.herd_effect(confidence=95), "confidence=95"),
                       (lambda: run.echo_chambers(rounds=[99]), "rounds=[99]: 99 is not a "
                                                                "round of this run; it has "
                                                                "rounds 0..2"),
                       (lambda: run.echo_chambers(rounds=[-1]), "rounds=[-1]"),
                       (lambda: run.group_distance("gender"), "groups='gender': the column "
                                                               "has 3 values"),
                       (lambda: run.polarization(alpha="1.6"), "alpha='1.6'"),
                       (lambda: run.table("post_stats"), "run.posts has its counts")):
        with pytest.raises(InputError, match=re.escape(said)):
            call()
    runs = open_runs([path])
    with pytest.raises(KeyError, match="no run labelled 'zzz'; labels: "):
        runs["zzz"]
    with pytest.raises(IndexError, match="there are 1 runs"):
        runs[10]


def test_frames_without_rows_have_the_dtypes_of_frames_with_rows(family):
    """A frame or result with no rows has the columns and dtypes it has with rows: text
    columns the text dtype (DuckDB gives `object` for them when there are no rows), numbers
    numbers; so frames of several runs concatenate without turning text into `object`."""
    run = open_run(family.root)  # rule-based: no context, LLM calls, surveys or interviews
    text = pd.Series(["x"]).dtype
    assert run.llm_calls.empty and run.context.empty
    assert run.llm_calls["platform"].dtype == text and run.llm_calls["model"].dtype == text
    assert run.context["section"].dtype == text
    assert run.actions["platform"].dtype == text == run.beliefs["topic"].dtype
    fork = open_run(family.fork)  # its interventions have rows
    assert len(fork.interventions) and run.interventions.empty
    assert run.interventions["kind"].dtype == fork.interventions["kind"].dtype == text
    both = open_runs([family.root, family.fork])
    assert both.interventions["kind"].dtype == text
    assert run.table("profile_fixes")["fix"].dtype == text
    assert run.survey_responses["item"].dtype == text
    scales, scores, change = run.survey_scales(), run.survey_scores(), run.survey_change()
    assert scales.empty and scores.empty and change.empty
    assert scales["n"].dtype == np.int64 and scales["alpha"].dtype == float
    assert scales["survey"].dtype == text
    assert scores["score"].dtype == float and scores["agent"].dtype == np.int32
    assert change["mean_change"].dtype == float and change["n"].dtype == np.int64
    reuse = run.prefix_reuse()
    assert reuse.empty and reuse.dtypes.tolist() == [np.int64, float, float]
    assert run.market_scores()["brier"].dtype == float


def test_tables_made_on_demand_read_empty_before_they_exist(family):
    """`run.table` of a table created the first time it is written (interviews, analyses)
    is an empty frame with its columns in a run never asked; an unknown name lists the
    tables there are, those included."""
    run = open_run(family.root)
    interviews = run.table("interviews")
    assert interviews.empty and {"question", "answer", "agent"} <= set(interviews.columns)
    assert interviews["answer"].dtype == pd.Series(["x"]).dtype
    assert run.table("analysis_runs").empty
    with pytest.raises(InputError, match=r"unknown table 'beleifs'; tables: .*beliefs.*"
                                         r"interviews.*prices"):
        run.table("beleifs")


def test_one_name_where_several_may_be_given(family):
    """`by`, `kinds` and `rounds` take one value as well as several: a string is one
    name (not its letters), an int one round."""
    run = open_run(family.root)
    pd.testing.assert_frame_equal(run.like_minded_share(by="round"),
                                  run.like_minded_share(by=("round",)))
    reposts = run.cascades(kinds="repost")
    pd.testing.assert_frame_equal(reposts, run.cascades(kinds=["repost"]))
    assert reposts["size"].max() > 1  # (the letters of "repost" kept no post below a root)
    pd.testing.assert_frame_equal(run.cascade_growth(kinds="repost"),
                                  run.cascade_growth(kinds=["repost"]))
    pd.testing.assert_frame_equal(run.echo_chambers(rounds=ROUNDS),
                                  run.echo_chambers(rounds=[ROUNDS]))


def test_a_run_read_from_a_simulation_after_it_closed(tmp_path):
    """A `Run` opened on a simulation while it ran reads on after `close()`: one on disk
    from its file (and says `interrupted` when rounds are left), one held in memory is an
    InputError saying it is gone, not DuckDB's 'Connection already closed'."""
    from shoal.runs.simulation import Simulation

    data = small(rounds=3)
    data["population"]["size"] = 60
    sim = Simulation.from_dict(data, out=tmp_path / "runs")
    sim.run(2)
    run = open_run(sim)
    assert run.last_round == 2 and run.status == "running"
    sim.close()
    assert run.refresh().last_round == 2 and run.status == "interrupted"
    assert len(run.beliefs) == 60 * 2 * 3
    memory = Simulation.from_dict(data, out=None)
    memory.step()
    held = open_run(memory)
    assert held.last_round == 1
    memory.close()
    with pytest.raises(InputError, match="held in memory and is closed"):
        _ = held.refresh().beliefs


def test_the_repr_of_a_run_being_written_without_a_mirror(family, tmp_path):
    """A run whose file a writer holds, without a live mirror, shows in a notebook (its
    repr says what run.json knows and why its frames cannot be read) instead of raising."""
    copy = tmp_path / family.root.name
    shutil.copytree(family.root, copy)
    writer = duckdb.connect(str(copy / "trajectory.duckdb"))  # (as the run's writer holds it)
    try:
        run = open_run(copy)
        text = repr(run)
        assert text.startswith(f"<Run {family.root.name}: ") and "live_parquet" in text
        with pytest.raises(InputError, match="is being written"):
            _ = run.beliefs
    finally:
        writer.close()
