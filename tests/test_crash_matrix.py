"""Every crash point × every layer: a run killed (SIGKILL) at each point of
`sim/core/faults.py` and resumed has the tables of the uninterrupted run — every table of
the file, found in the file itself — and a fork of the resumed run equals the same fork
of the uninterrupted one. The layers: the rule and LLM quick starts, the market, graph
memory, a survey panel, a fork with an experiment arm's intervention, and a run that was
asked things (an analysis and an interview batch) while it stood interrupted, whose
answers the resume keeps as they were.

The configs run small (a few rounds, a few hundred agents at most); the kills happen in
`shoal` processes as a user's would, the resumes and forks in this one."""

from __future__ import annotations

import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from shoal import open_run
from shoal.cli.main import main
from shoal.core.faults import POINTS
from tests.conftest import CONFIGS, ROOT
from tests.golden import run_digests
from tests.helpers import declared, query, run_cli, tables_differ
from tests.test_surveys import SURVEY

pytestmark = pytest.mark.slow  # dozens of killed and resumed runs: the complete suite's

ROUNDS = 4
KILLED_AT = 2  # the round a fault fires in (`creating`: round 0, while the run is made)
FORK_AT = 3  # after the killed round: the fork starts from state the resume rebuilt


@dataclass(frozen=True)
class Layer:
    """A config (a file, or a mapping written to one) and the `--set`s that make it small;
    `fork` runs the uninterrupted and the resumed run's forks with an intervention file."""

    config: str | dict
    sets: tuple[str, ...] = ()
    fork_intervene: dict | None = None

    def path(self, folder: Path) -> Path:
        if isinstance(self.config, str):
            return ROOT / self.config
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        return path


def _quickstart(**extra) -> dict:
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    return {**data, **extra}


LAYERS = {
    "rule": Layer("configs/quickstart.yaml", ("population.size=150",)),
    "llm": Layer("configs/llm_quickstart.yaml", ("population.size=40",)),
    "market": Layer("configs/market.yaml", ("population.size=150", "interventions.0.round=2")),
    "graph": Layer("examples/bike_lanes/config.yaml"),
    "surveys": Layer(_quickstart(rounds=ROUNDS, population={"size": 200}, surveys=[
        {**SURVEY, "waves": [0, 2, 4], "sample": {"size": 60}}])),
    "arm": Layer("configs/quickstart.yaml", ("population.size=150",), fork_intervene={
        "interventions": [{"kind": "event", "round": FORK_AT + 1, "platforms": ["twitter"],
                           "text": "Breaking: the carbon levy doubles next year.",
                           "stance": {"carbon_tax": -0.6}}]}),
}


def _args(layer: Layer, folder: Path, out: Path) -> list[str]:
    args = ["run", str(layer.path(folder)), "--out", str(out), "--rounds", str(ROUNDS),
            "--quiet"]
    for item in layer.sets:
        args += ["--set", item]
    return args


def _fork(run: Path, layer: Layer, out: Path) -> Path:
    """Fork `run` at FORK_AT (with the layer's intervention, if any) and run it out."""
    args = ["fork", str(run), "--round", str(FORK_AT), "--out", str(out), "--quiet",
            "--name", "matrix-fork"]
    if layer.fork_intervene is not None:
        plan = out.parent / f"{out.name}-intervene.yaml"
        plan.write_text(yaml.safe_dump(layer.fork_intervene))
        args += ["--intervene", str(plan)]
    assert main(args) == 0
    (fork,) = [p for p in out.iterdir() if p.name.startswith("matrix-fork")]
    return fork


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Per layer, made on first use: the uninterrupted run and its fork."""
    made: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in made:
            layer, folder = LAYERS[name], tmp_path_factory.mktemp(f"ref-{name}")
            assert main(_args(layer, folder, folder / "runs")) == 0
            (run,) = (folder / "runs").iterdir()
            made[name] = run, _fork(run, layer, folder / "forks")
        return made[name]
    return get


def _kill(layer: Layer, folder: Path, point: str) -> Path:
    """`shoal run` killed at `point`; the output folder."""
    out = folder / "runs"
    round_ = 0 if point == "creating" else KILLED_AT
    killed = run_cli(_args(layer, folder, out), env={"SHOAL_FAULT": f"{point}:{round_}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return out


def _resumed(layer: Layer, folder: Path, point: str) -> Path:
    """The killed run resumed to its end (killed while being made: nothing to resume, no
    run listed; running it again gives the run)."""
    out = _kill(layer, folder, point)
    if point == "creating":
        assert [p for p in out.iterdir() if not p.name.startswith(".")] == []
        assert main(_args(layer, folder, out)) == 0
    visible = [p for p in out.iterdir() if not p.name.startswith(".")]
    (run,) = visible
    if point != "creating":
        assert main(["resume", str(run), "--quiet"]) == 0
    return run


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("name", list(LAYERS))
def test_a_kill_at_any_point_resumes_to_the_uninterrupted_tables(name, point, reference,
                                                                 tmp_path):
    ref_run, ref_fork = reference(name)
    layer = LAYERS[name]
    run = _resumed(layer, tmp_path, point)
    db = run / "trajectory.duckdb"
    assert tables_differ(ref_run / "trajectory.duckdb", db) == []
    written = [t for t, spec in declared(db).items() if spec.cut]
    assert "beliefs" in written  # the file's tables were compared, not an empty list
    fork = _fork(run, layer, tmp_path / "forks")
    assert tables_differ(ref_fork / "trajectory.duckdb", fork / "trajectory.duckdb") == []


@pytest.mark.parametrize("point", [p for p in POINTS if p != "creating"])
def test_what_was_asked_of_an_interrupted_run_survives_its_resume(point, reference,
                                                                  tmp_path):
    """An analysis and an interview batch made while the run stood interrupted are
    neither cut nor repeated by the resume; every other table ends as the uninterrupted
    run's."""
    ref_run, _ = reference("rule")
    layer = LAYERS["rule"]
    (run,) = _kill(layer, tmp_path, point).iterdir()
    asked = [["analyse", str(run), "--base-url", "loopback", "--model", "m"],
             ["interview", str(run), "--agents", "0-9", "--round", "0",
              "--base-url", "loopback", "--model", "m", "What moved you?"]]
    for args in asked:
        assert main(args) in (0, 4), args  # (4: an analysis with an unfinished section)
    db = run / "trajectory.duckdb"
    kept = {t: d for t, d in run_digests(db).items() if declared(db)[t].lineage == "none"}
    assert "interviews" in kept and "analysis_runs" in kept
    assert main(["resume", str(run), "--quiet"]) == 0
    after = run_digests(db)
    assert {t: after[t] for t in kept} == kept
    assert tables_differ(ref_run / "trajectory.duckdb", db) == []


# ------------------------------------------------------------------ asked of a run


@pytest.fixture(scope="module")
def asked_base(tmp_path_factory) -> Path:
    """A finished LLM run with a survey whose LLM respondents have not answered yet (two
    waves), to copy: each test asks its copies."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=2, interventions=[], population={**data["population"], "size": 60},
                surveys=[{**SURVEY, "waves": [1, 2], "sample": {}}])
    folder = tmp_path_factory.mktemp("asked")
    args = _args(Layer(data), folder, folder / "runs")
    args[args.index("--rounds") + 1] = "2"
    assert main(args) == 0
    (run,) = (folder / "runs").iterdir()
    return run


def _copies(base: Path, folder: Path) -> tuple[Path, Path]:
    return tuple(Path(shutil.copytree(base, folder / name / base.name))
                 for name in ("whole", "killed"))


def _asked(run: Path) -> dict[str, tuple[int, str]]:
    """Row count and digest of every table asked things write (volatile columns left out)."""
    db = run / "trajectory.duckdb"
    digests = run_digests(db)
    return {t: (query(db, f"SELECT count(*) FROM {t}")[0][0], digests[t])
            for t, spec in declared(db).items()
            if spec.lineage == "none" or spec.name == "survey_responses"}


@pytest.mark.parametrize("command, fault", [
    (["analyse", "{run}", "--base-url", "loopback", "--model", "m", "--parallel", "1"],
     "analysing:1"),
    (["interview", "{run}", "--agents", "0-29", "--base-url", "loopback", "--model", "m",
      "How do you see it now?"], "asking:0"),
    (["survey", "{run}"], "surveying:1"),
], ids=["analyse", "interview", "survey"])
def test_a_killed_command_leaves_nothing_shown_as_finished_and_reruns_to_the_same_rows(
        command, fault, asked_base, tmp_path):
    """Killed part way, `shoal analyse`, `shoal interview --agents` and `shoal survey`
    leave either nothing or what readers show as unfinished; the same command again
    completes the work without repeating any of it: every table they write ends with the
    rows (count and content) of the command that was never interrupted."""
    whole, killed = _copies(asked_base, tmp_path)
    assert main([a.replace("{run}", str(whole)) for a in command]) == 0
    stopped = run_cli([a.replace("{run}", str(killed)) for a in command],
                      env={"SHOAL_FAULT": fault})
    assert stopped.returncode == -signal.SIGKILL, stopped.stderr
    shown = open_run(killed)
    if command[0] == "analyse":
        assert shown.analyses["status"].tolist() == ["interrupted"]
    elif command[0] == "interview":
        assert shown.interviews.empty  # the batch is kept whole, or not at all
    else:
        answered = shown.survey_responses.query("source == 'llm'")
        assert answered["wave"].unique().tolist() == [0]  # one wave whole, none half
    assert main([a.replace("{run}", str(killed)) for a in command]) == 0
    assert _asked(killed) == _asked(whole)
    assert tables_differ(whole / "trajectory.duckdb", killed / "trajectory.duckdb",
                         asked=True) == []
