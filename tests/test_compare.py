"""`shoal compare`: identical runs never differ; a changed fork differs from exactly the
first round its change reaches the beliefs; the tables and the PNG are written."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import duckdb
import pandas as pd
import pytest
import yaml

from shoal.analysis.compare import (
    ACTIVITY,
    ENGAGEMENT,
    compare_runs,
    first_difference,
    max_mean_gap,
    per_round_means,
)
from shoal.cli.main import main
from tests.conftest import CONFIGS
from tests.helpers import fork_and_run, make_config, run_config

K = 3
ROUNDS = 7



@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> SimpleNamespace:
    """A root run, a second run of the same config, a no-change fork at K, a fork at K
    whose beliefs are shifted at K+1, and a fork at K with a higher post rate."""
    out = tmp_path_factory.mktemp("cmp")
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=ROUNDS, population={"size": 250, "groups": [
        {"name": "activists", "fraction": 0.1}]})
    root = run_config(make_config(data, out)).dir.root
    rerun = run_config(make_config(data, out)).dir.root
    shock = out / "shock.yaml"
    shock.write_text(yaml.safe_dump([{"kind": "beliefs", "round": K + 1,
                                      "topic": "carbon_tax", "shift": 0.2}]))
    return SimpleNamespace(
        root=root, rerun=rerun, same=fork_and_run(root, K),
        shocked=fork_and_run(root, K, intervene=shock),
        posting=fork_and_run(root, K, sets=["policy.post_rate=0.5"]))


def _first_difference_from_files(parent: Path, fork: Path) -> int | None:
    """Independently: the first round after K whose sorted positions differ between the
    parent's file and the fork's own file (rounds <= K are the parent's own rows)."""
    def positions(run: Path, r: int) -> list[float]:
        con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
        try:
            return [p for (p,) in con.execute(
                "SELECT position FROM beliefs WHERE round = ? ORDER BY agent, topic",
                [r]).fetchall()]
        finally:
            con.close()
    for r in range(K + 1, ROUNDS + 1):
        if positions(parent, r) != positions(fork, r):
            return r
    return None


def test_identical_runs_never_differ(runs):
    """A rerun of the same config and a no-change fork: no belief ever differs, the mean
    gap is 0, activity and engagement per round are equal."""
    cmp = compare_runs([runs.root, runs.rerun, runs.same])
    assert cmp.last_round == ROUNDS and cmp.topics == ["carbon_tax", "nuclear_power"]
    ref = cmp.reference
    for run in cmp.runs[1:]:
        assert first_difference(ref.beliefs, run.beliefs, cmp.last_round) is None
        for topic in cmp.topics:
            assert max_mean_gap(cmp, run, topic) == (0.0, None)
        pd.testing.assert_series_equal(per_round_means(cmp, run), per_round_means(cmp, ref))
    assert per_round_means(cmp, ref)[ACTIVITY] > 0
    assert per_round_means(cmp, ref)[list(ENGAGEMENT)].gt(0).sum() >= 5


def test_changed_forks_differ_from_the_exact_round(runs):
    """A belief shift at K+1 shows at K+1 on its topic; a higher post rate first reaches
    beliefs when its posts are seen, the round a direct reading of the files says."""
    cmp = compare_runs([runs.root, runs.shocked, runs.posting])
    ref, shocked, posting = cmp.runs
    assert first_difference(ref.beliefs, shocked.beliefs, ROUNDS) == K + 1
    gap, where = max_mean_gap(cmp, shocked, "carbon_tax")
    assert gap > 0.1 and where >= K + 1
    expected = _first_difference_from_files(runs.root, runs.posting)
    assert expected is not None
    assert first_difference(ref.beliefs, posting.beliefs, ROUNDS) == expected
    means = per_round_means(cmp, posting)
    assert means["posts"] > per_round_means(cmp, ref)["posts"]
    assert shocked.fork_rounds == [K] and posting.fork_rounds == [K]


def test_shoal_compare_prints_tables_and_writes_a_png(runs, tmp_path, capsys):
    png = tmp_path / "cmp.png"
    assert main(["compare", str(runs.root), str(runs.same), str(runs.shocked),
                 "--out", str(png)]) == 0
    text = capsys.readouterr().out
    row = {run.name: next(ln for ln in text.splitlines() if run.name in ln)
           for run in (runs.same, runs.shocked)}
    assert row[runs.same.name].split()[0] == "B" and f"A @ {K}" in row[runs.same.name]
    assert row[runs.same.name].rstrip().endswith("never")
    assert row[runs.shocked.name].rstrip().endswith(f"from round {K + 1}")
    assert f"beliefs at round {ROUNDS}" in text
    for metric in (ACTIVITY, *ENGAGEMENT):
        assert metric in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_shoal_compare_one_topic_and_errors(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default PNG goes next to the runs, not here
    assert main(["compare", str(runs.root), str(runs.posting), "--topic",
                 "nuclear_power"]) == 0
    captured = capsys.readouterr()
    assert "nuclear_power" in captured.out and "carbon_tax" not in captured.out
    png = Path(captured.err.split("plot → ")[1].split()[0])
    assert png.parent == runs.root.parent and png.stat().st_size > 0
    assert not (tmp_path / "compare.png").exists()
    root, same, missing = str(runs.root), str(runs.same), str(tmp_path / "missing")
    for args, message in (([root, same, "--topic", "nope"], "not a topic of these runs"),
                          ([root, missing], "no such run directory"),
                          ([root], "at least two runs")):
        assert main(["compare", *args]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.slow
def test_compare_writes_next_to_the_runs_and_never_replaces_a_plot_silently(
        runs, tmp_path, capsys, monkeypatch):
    """issue 26 item 18: without --out the plot goes next to the first run (its output
    folder), not into the current folder; a plot already there is kept and the new one
    numbered; --out naming an existing file replaces it and says so; --out must be a .png
    in an existing folder (exit 2, checked before anything is printed)."""
    import shutil

    folder = tmp_path / "runs"
    a, b = (Path(shutil.copytree(r, folder / r.name)) for r in (runs.root, runs.posting))
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["compare", str(a), str(b)]) == 0
    first = (folder / "compare.png").read_bytes()
    assert main(["compare", str(b), str(a)]) == 0
    assert (folder / "compare.png").read_bytes() == first
    assert (folder / "compare-2.png").stat().st_size > 0
    assert list(here.iterdir()) == []
    err = " ".join(capsys.readouterr().err.split())
    assert f"plot → {folder / 'compare.png'}" in err
    assert f"plot → {folder / 'compare-2.png'}" in err and "replaced" not in err

    assert main(["compare", str(a), str(b), "--out", str(folder / "compare.png")]) == 0
    assert "(replaced the file there, as --out asked)" in capsys.readouterr().err
    for out, message in (("plot.txt", "--out plot.txt: the plot is a PNG"),
                         ("no/such/p.png", "--out no/such/p.png: no such folder")):
        assert main(["compare", str(a), str(b), "--out", out]) == 2
        assert message in capsys.readouterr().err


def test_a_topic_one_run_lacks_has_no_gap(runs, tmp_path, capsys):
    """Runs on different topics: a topic one of them lacks shows no gap ('—'), not 0.000,
    which would read as 'identical'."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=2, population={"size": 60}, topics=["carbon_tax"],
                initial_stances={"default": {"dist": "uniform"}, "confidence": 0.5})
    other = run_config(make_config(data, tmp_path)).dir.root
    cmp = compare_runs([runs.root, other])
    assert pd.isna(max_mean_gap(cmp, cmp.runs[1], "nuclear_power")[0])
    capsys.readouterr()
    assert main(["compare", str(runs.root), str(other), "--out", str(tmp_path / "c.png")]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["nuclear_power"])
    assert lines[at + 1].split() == ["B", "—", "—", "—", "—", "—", "—"]  # (no gap, no round)
