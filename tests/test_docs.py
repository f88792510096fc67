"""Every `shoal` command in the docs runs as the docs show it, so they cannot drift from the
program.

The commands are the lines of the fenced ```bash / ```console blocks of README.md and
docs/*.md that invoke `shoal`: `$ shoal ...` in console blocks, `shoal ...` or
`.venv/bin/shoal ...` in bash blocks (joined over `\\` continuations; of `a && b && shoal
...` the `shoal` part). Each is a test case named by its page and line. They run through
`shoal.cli.main.main`, what the `shoal` script calls, in this process (the lines written
`.venv/bin/shoal ...` run this venv's script itself), in one working folder laid out like
the repository (copies of `configs/` and `examples/`), in page order, so a page whose
commands build on each other (`shoal init`, then `shoal run` of what it wrote) works as it
does for a reader. Commands on Ray join the session's one Ray instance.

- Size: a command that takes a config runs it smaller (`SMALL`: fewer agents, fewer rounds,
  fewer seeds or draws), never so small that the command changes meaning.
- Placeholders (`runs/<id>`, `RUN`, a run id of the page's example output, `runs/news-…`)
  resolve to runs that a recipe (`RECIPES`) makes first, once per module and shared: a
  recipe's command that is also a page's command runs once for both.
- Exit code: 0, or 2 where the page shows `error:` right after the command (`EXIT` for the
  others).
- `SKIP`: commands that need what the test cannot have (a cluster, a blocking server), with
  the reason. `XFAIL`: documented commands that fail, with the reason.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

SHOAL = Path(sys.executable).with_name("shoal")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"bash", "console", "sh", "shell"}
COPIED = ("configs", "examples")  # what the working folder has of the repository

# --- reduced size -----------------------------------------------------------------------

# config as the page writes it: (`--set` values, rounds or None to keep the config's).
# A page's own `--rounds N` is kept up to MAX_ROUNDS.
SMALL: dict[str, tuple[list[str], int | None]] = {
    "configs/quickstart.yaml": (["population.size=60"], 3),
    "configs/llm_quickstart.yaml": (["population.size=60"], 5),  # its news fires at round 4
    # the arms' 40 posts come at round 11, written by agents up to id 2932: 3,000 agents
    "configs/herd_effect.yaml": ([], 12),
    # forks at rounds 5 and 6, interventions at 8 and 10: all 12 rounds
    "configs/news.yaml": (["population.size=60"], None),
    "configs/news_without_levy.yaml": (["population.size=60"], None),
    # waves at rounds 0, 10 and 20; 5% LLM agents: 5 of 100
    "configs/survey.yaml": (["population.size=100", "surveys.0.sample.size=40"], 20),
    "configs/market.yaml": (["population.size=60"], 20),  # its news fires at round 20
    # the news fires at round 10, arms branch at 4: 2 replicates of 5 runs
    "configs/experiments/news.yaml": (["population.size=60", "experiment.replicates=2"], 11),
}
MAX_ROUNDS = 30
# commands that run a config, and whether they take --rounds
SIZED = {"run": True, "check": True, "estimate": True, "diagnose-memory": True, "sweep": True,
         "experiment": True, "calibrate": False}
# commands that run on Ray: they join the session's instance (tests/conftest.py)
RAY_COMMANDS = {"sweep", "calibrate", "experiment"}
# per command, flags lowered to at most this value
CAPS = {"sweep": {"--seeds": 2}, "calibrate": {"--trials": 4, "--seeds": 1}}

# --- runs the placeholders stand for -------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """Commands that make what a placeholder stands for ({NAME}: another recipe's value).
    The value is `value` (a template), else `capture`'s group 1 in the last command's
    output, else the run or experiment directory the last command printed."""

    steps: tuple[str, ...]
    value: str | None = None
    capture: str | None = None


RECIPES: dict[str, Recipe] = {
    "quick": Recipe(("shoal run configs/quickstart.yaml --rounds 12",)),
    "quick-fork": Recipe(("shoal fork {quick} --round 6 --set policy.post_rate=0.3",)),
    "quick-fork2": Recipe(("shoal fork {quick} --round 6 --seed 7",)),
    # forks.md: the run whose kept checkpoints are 0, 8, 12 and 13 (the page's own command)
    "quick-sparse": Recipe(("shoal run configs/quickstart.yaml --rounds 13 --set "
                            "checkpoints.every=4 --set checkpoints.keep_last=2",)),
    # a run that stopped after round 9: something for `shoal resume` to do
    "quick-stopped": Recipe(("shoal fork {quick} --round 9 --no-run",)),
    "news": Recipe(("shoal run configs/news.yaml",)),
    "nonews": Recipe(("shoal run configs/news_without_levy.yaml",)),
    "without": Recipe(("shoal fork {news} --round 5 --drop levy-news --name without",)),
    "herd": Recipe(("shoal run configs/herd_effect.yaml --out runs/herd_effect",)),
    "herd-up": Recipe(("shoal fork {herd} --round 10 --seed 1 --intervene "
                       "configs/herd_effect/up.yaml --name herd-up-s1",)),
    "herd-down": Recipe(("shoal fork {herd} --round 10 --seed 1 --intervene "
                         "configs/herd_effect/down.yaml --name herd-down-s1",)),
    "llm": Recipe(("shoal run configs/llm_quickstart.yaml",)),
    # analyst.md asks agents 0-199 at round 10 (and journalists, a group of the config)
    "llm10": Recipe(("shoal run configs/llm_quickstart.yaml --rounds 10 "
                     "--set population.size=200",)),
    "llm-analysed": Recipe(("shoal analyse {llm10} --base-url loopback --model m",),
                           value="{llm10}"),
    "llm-analysis": Recipe(("shoal analyse {llm10} --base-url loopback --model m",),
                           capture=r"analysis (an-[\w-]+): "),
    "survey": Recipe(("shoal run configs/survey.yaml",)),
    "experiment": Recipe(("shoal experiment configs/experiments/news.yaml",)),
    "levy": Recipe(("shoal init examples/carbon_levy.md", "shoal run carbon_levy/config.yaml")),
    # migrating.md: its sample MiroShark folder, imported and run as the page does first
    "miroshark-folder": Recipe((), value="examples/import/miroshark_sim"),
    "scenario": Recipe(("shoal import miroshark {miroshark-folder} --out scenarios/harbour",),
                       value="scenarios/harbour"),
    "scenario-run": Recipe(("{scenario}", "shoal run scenarios/harbour/config.yaml")),
    "scenario-fork": Recipe(("shoal fork {scenario-run} --round 12 --drop event-1",)),
}

# placeholder → recipe: on every page, then per page (which wins), then per command (a piece
# of its text; wins over both)
PLACEHOLDERS: dict[str, str] = {"runs/<id>": "quick", "runs/<run_id>": "quick",
                                "runs/<run>": "quick", "runs/<parent>": "quick",
                                "runs/<fork>": "quick-fork", "runs/<fork_id>": "quick-fork",
                                "<fork-dir>": "quick-fork", "RUN": "quick"}
PAGE_PLACEHOLDERS: dict[str, dict[str, str]] = {
    "docs/forks.md": {"runs/<id>": "quick-sparse", "runs/<parent>": "news",
                      "runs/<news run>": "news"},
    "docs/herd_effect.md": {"runs/herd_effect/<base run>": "herd"},
    "docs/graph.md": {"runs/<id>": "levy"},
    "docs/llm.md": {"runs/<run_id>": "llm"},
    "docs/surveys.md": {"runs/<run_id>": "survey"},
    "docs/analyst.md": {"RUN": "llm-analysed"},
    "docs/migrating.md": {"DIR": "miroshark-folder", "SCENARIO": "scenario",
                          "runs/<run>": "scenario-run", "runs/<fork>": "scenario-fork"},
}
COMMAND_PLACEHOLDERS: dict[tuple[str, str], dict[str, str]] = {
    ("docs/forks.md", "shoal resume runs/<id>"): {"runs/<id>": "quick-stopped"},
}
# run ids of a page's example output, by run name: the page's first distinct id of that
# name is the first recipe's run, its second the second's, ...
LITERAL_RUNS: dict[str, list[str]] = {"quickstart": ["quick", "quick-fork", "quick-fork2"],
                                      "herd": ["herd", "herd-up"],
                                      "news": ["news"], "news-experiment": ["experiment"]}
LITERAL_RUN = re.compile(r"runs/([a-z][\w-]*?)-\d{8}-\d{6}-[0-9a-f]+")
ANALYSIS_ID = re.compile(r"\ban-\d{8}-\d{6}-[0-9a-f]+\b")  # → recipe llm-analysis
ELLIPSIS_RUN = re.compile(r"runs/([\w-]+?)-…")  # `runs/news-…`: recipe `news`
# recipes a command needs that no placeholder names (the page makes them in prose)
NEEDS: dict[tuple[str, str], list[str]] = {
    ("docs/herd_effect.md", "herd-down-s1-*"): ["herd-up", "herd-down"],
}

# --- expectations -------------------------------------------------------------------------

# exit codes the page states in words, not with an `error:` line (a piece of the command)
EXIT: dict[tuple[str, str], int] = {
    ("docs/memory.md", "--plant-as post"): 5,  # "created and then merged away": fact lost
}
# commands not run, and why (keep short: each is a command nobody checks)
SKIP: dict[tuple[str, str], str] = {
    ("docs/cluster.md", "HEAD:6379"): "needs a Ray cluster of several machines",
    ("docs/report_and_sweep.md", "--address auto"):
        "joins a cluster that `ray start` started, which the test does not start",
    ("docs/llm.md", "shoal llm-serve"): "serves until stopped (tests/test_llm.py runs it)",
    ("docs/llm.md", "shoal llm-check http"):
        "probes a server of that kind (vLLM, OpenAI, ...), which the test does not have",
    ("docs/experiments.md", "shoal experiment news.yaml"):
        "the errors of four edits of the example, which the page describes but does not ship "
        "(tests/test_experiment.py makes the edits and checks them)",
    ("docs/plugins.md", "board.yaml"):
        "needs the example plug-in installed (tests/test_plugins.py builds it and checks this)",
    ("docs/graph.md", "[--agents"): "a synopsis (brackets mark optional flags), not a command",
    ("docs/validation.md", "--quick --out runs/validation"):
        "every case at --quick: tests/test_validation_*.py run each one already",
    ("README.md", "shoal serve runs"):
        "serves until stopped (tests/test_web_api.py and tests/test_web_browser.py run it)",
    ("docs/web.md", "shoal serve"):
        "serves until stopped (tests/test_web_api.py and tests/test_web_browser.py run it)",
    ("docs/analyst.md", "--script script.json"):
        "serves until stopped, with a script the page describes but does not ship "
        "(tests/test_analyst.py scripts the loopback server)",
    ("docs/analyst.md", "--model shoal-loopback"):
        "asks the scripted server of the line above, which the test does not start",
    ("docs/validation.md", "herd_effect --out"):
        "a case at full size (minutes); tests/test_validation_herd_effect.py runs it --quick",
}
# documented commands that fail: (page, piece of the command) → why (a bug to route)
XFAIL: dict[tuple[str, str], str] = {}


# --- the commands of the docs ---------------------------------------------------------------


@dataclass(frozen=True)
class DocCommand:
    """One `shoal` command of a page."""

    page: str  # path from the repository root
    line: int  # the line it starts on
    text: str  # from `shoal` (or `.venv/bin/shoal`) on, continuations joined, as written
    error: bool  # the page shows an `error:` line right after it

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def matches(self, key: tuple[str, str]) -> bool:
        return key[0] == self.page and key[1] in self.text


def _shoal_part(command: str) -> str | None:
    """The `shoal ...` segment of a shell line (`a && b && .venv/bin/shoal run X`)."""
    for part in command.split("&&"):
        words = part.split()
        if words and (words[0] == "shoal" or words[0].endswith("/shoal")):
            return part.strip()
    return None


def doc_commands() -> list[DocCommand]:
    """Every `shoal` command in the shell blocks of the pages, in page order."""
    found: list[DocCommand] = []
    for path in PAGES:
        page = path.relative_to(ROOT).as_posix()
        lines = path.read_text().splitlines()
        fence: str | None = None  # the open block's language
        i = 0
        while i < len(lines):
            stripped = lines[i].strip()
            i += 1
            if stripped.startswith("```"):
                fence = stripped[3:].strip() if fence is None else None
                continue
            if fence not in SHELL_FENCES:
                continue
            start = i
            if fence == "console":
                if not stripped.startswith("$ "):
                    continue  # output
                stripped = stripped[2:]
            while stripped.endswith("\\") and i < len(lines):
                stripped = stripped[:-1].rstrip() + " " + lines[i].strip()
                i += 1
            command = _shoal_part(stripped)
            if command is None:
                continue
            following = lines[i].strip() if i < len(lines) else ""
            found.append(DocCommand(page, start, command, following.startswith("error:")))
    return found


COMMANDS = doc_commands()


@dataclass(frozen=True)
class DocBlock:
    """One ```python block of a page."""

    page: str
    line: int  # the line of its first statement
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def matches(self, key: tuple[str, str]) -> bool:
        return key[0] == self.page and key[1] in self.text


def doc_blocks() -> list[DocBlock]:
    """Every ```python block of the pages, in page order."""
    found = []
    for path in PAGES:
        text = path.read_text()
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, m.start()) + 2
            found.append(DocBlock(path.relative_to(ROOT).as_posix(), line, m.group(1)))
    return found


BLOCKS = doc_blocks()


# --- the working folder ---------------------------------------------------------------------


@dataclass
class Ran:
    """A command as it ran and how it ended."""

    argv: list[str]
    rc: int
    output: str

    def tail(self, n: int = 3000) -> str:
        return self.output[-n:]


def _in_process(args: list[str], cwd: Path) -> tuple[int, str]:
    """`shoal ARGS` run by `shoal.cli.main.main` in `cwd`: its exit code (argparse's too)
    and everything it printed."""
    from shoal.cli.main import main

    printed = io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(printed), redirect_stderr(printed):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse refuses a flag before main's handling
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(here)
    return code, printed.getvalue()


RUN_DIR = re.compile(r"(?m)^(?:run|fork|experiment) \S+.* → (\S+)\s*$")


@dataclass
class Workspace:
    """A folder laid out like the repository, where the commands run; each distinct command
    runs once (a recipe's and a page's identical command share the run)."""

    root: Path
    ran: dict[str, Ran] = field(default_factory=dict)
    made: dict[str, str] = field(default_factory=dict)  # recipe → value

    ray: Callable[[], object] = lambda: None  # starts the session's Ray instance

    def shoal(self, argv: list[str]) -> Ran:
        """Run `argv` (once): in this process through `main`, as the `shoal` script does,
        or, written as `.venv/bin/shoal`, as that script itself."""
        key = shlex.join(argv)
        if key in self.ran:
            return self.ran[key]
        if argv[0] != "shoal":
            proc = subprocess.run([str(SHOAL), *argv[1:]], cwd=self.root,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=600)
            self.ran[key] = Ran(argv, proc.returncode, proc.stdout + proc.stderr)
        else:
            if argv[1] in RAY_COMMANDS:
                self.ray()  # joined, not started, by the command: one start for all
            self.ran[key] = Ran(argv, *_in_process(argv[1:], self.root))
        return self.ran[key]

    def recipe(self, name: str) -> str:
        """What recipe `name` stands for, made on first use."""
        if name not in self.made:
            spec = RECIPES[name]
            ran = None
            for step in spec.steps:
                if re.fullmatch(r"\{[\w-]+\}", step):  # a recipe as a step
                    self.recipe(step[1:-1])
                    continue
                ran = self.shoal(prepare(self._refs(step), self))
                if ran.rc != 0:
                    raise AssertionError(f"recipe {name}: `{shlex.join(ran.argv)}` exited "
                                         f"{ran.rc}:\n{ran.tail()}")
            if spec.value is not None:
                value = self._refs(spec.value)
            else:
                assert ran is not None, name
                match = re.search(spec.capture, ran.output) if spec.capture else \
                    RUN_DIR.search(ran.output)
                assert match, f"recipe {name}: nothing to capture in:\n{ran.tail()}"
                value = match.group(1)
            self.made[name] = value
        return self.made[name]

    def _refs(self, text: str) -> str:
        return re.sub(r"\{([\w-]+)\}", lambda m: self.recipe(m.group(1)), text)


def _placeholders(cmd: DocCommand | DocBlock) -> dict[str, str]:
    table = {**PLACEHOLDERS, **PAGE_PLACEHOLDERS.get(cmd.page, {})}
    for key, more in COMMAND_PLACEHOLDERS.items():
        if cmd.matches(key):
            table.update(more)
    return table


@cache
def _literal_ids(page: str) -> dict[str, str]:
    """A page's example run ids → recipes, in order of first appearance per run name."""
    seen: dict[str, list[str]] = {}
    for cmd in [*COMMANDS, *BLOCKS]:
        if cmd.page == page:
            for m in LITERAL_RUN.finditer(cmd.text):
                ids = seen.setdefault(m.group(1), [])
                if m.group(0) not in ids:
                    ids.append(m.group(0))
    return {run_id: LITERAL_RUNS[name][k] for name, ids in seen.items()
            for k, run_id in enumerate(ids) if name in LITERAL_RUNS}


def resolve(cmd: DocCommand, ws: Workspace) -> str:
    """The command's text with its placeholders replaced by what recipes made."""
    text = substitute(cmd, ws)
    assert not re.search(r"<[^>]*>|…", text), f"{cmd.id}: a placeholder left in `{text}`"
    return text


def substitute(cmd: DocCommand | DocBlock, ws: Workspace) -> str:
    """`cmd`'s text with the placeholders and example run ids it has replaced."""
    for name in next((v for k, v in NEEDS.items() if cmd.matches(k)), []):
        ws.recipe(name)
    text = cmd.text
    for run_id, name in _literal_ids(cmd.page).items():
        text = text.replace(run_id, ws.recipe(name))
    text = ANALYSIS_ID.sub(lambda m: ws.recipe("llm-analysis"), text)
    text = ELLIPSIS_RUN.sub(lambda m: ws.recipe(m.group(1)), text)
    for token, name in sorted(_placeholders(cmd).items(), key=lambda kv: -len(kv[0])):
        pattern = rf"\b{token}\b" if token.isalpha() else re.escape(token)
        if re.search(pattern, text):
            text = re.sub(pattern, lambda m, name=name: ws.recipe(name), text)
    return text


def prepare(text: str, ws: Workspace) -> list[str]:
    """The argv of a command's text: comments dropped, globs expanded in the working
    folder, and the reduced size applied."""
    argv: list[str] = []
    for word in shlex.split(text, comments=True):
        if word.startswith("runs/") and "*" in word:  # `runs/herd-up-s1-*`
            hits = sorted(str(p.relative_to(ws.root)) for p in ws.root.glob(word))
            argv += hits or [word]
        else:
            argv.append(word)
    return shrink(argv)


def shrink(argv: list[str]) -> list[str]:
    """`argv` at the reduced size: SMALL's values for its config, CAPS' for its flags."""
    command = argv[1] if len(argv) > 1 else ""
    argv = list(argv)
    for flag, most in CAPS.get(command, {}).items():
        if flag in argv:
            i = argv.index(flag) + 1
            argv[i] = str(min(int(argv[i]), most))
        else:
            argv += [flag, str(most)]
    config = next((a for a in argv[2:] if a in SMALL), None)
    if command not in SIZED or config is None:
        return argv
    sets, rounds = SMALL[config]
    for value in sets:  # unless the command sets that field itself
        if not any(a.startswith(value.split("=")[0] + "=") for a in argv):
            argv += ["--set", value]
    if rounds is not None and SIZED[command]:
        if "--rounds" in argv:
            i = argv.index("--rounds") + 1
            if int(argv[i]) > MAX_ROUNDS:
                argv[i] = str(rounds)
        else:
            argv += ["--rounds", str(rounds)]
    return argv


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, request) -> Workspace:
    """The working folder, with copies of the repository's configs/ and examples/ (a
    command writing there cannot touch the repository)."""
    root = tmp_path_factory.mktemp("docs")
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name)
    return Workspace(root, ray=lambda: request.getfixturevalue("ray_session"))


# --- the tests ------------------------------------------------------------------------------


def _case(cmd: DocCommand):
    marks = []
    skip = next((why for key, why in SKIP.items() if cmd.matches(key)), None)
    if skip:
        marks.append(pytest.mark.skip(reason=skip))
    xfail = next((why for key, why in XFAIL.items() if cmd.matches(key)), None)
    if xfail:
        marks.append(pytest.mark.xfail(reason=xfail, strict=False))
    return pytest.param(cmd, id=cmd.id, marks=marks)


def expected_exit(cmd: DocCommand) -> int:
    """The exit code the page shows: EXIT's, 2 for an `error:` line, else 0."""
    return next((rc for key, rc in EXIT.items() if cmd.matches(key)), 2 if cmd.error else 0)


@pytest.mark.parametrize("cmd", [_case(c) for c in COMMANDS])
@pytest.mark.slow
def test_documented_command(cmd: DocCommand, workspace: Workspace):
    """The command, resolved and reduced, exits with the code its page shows."""
    ran = workspace.shoal(prepare(resolve(cmd, workspace), workspace))
    want = expected_exit(cmd)
    assert ran.rc == want, (f"{cmd.id}: `{cmd.text}` ran as `{shlex.join(ran.argv)}` and "
                            f"exited {ran.rc}, the page shows {want}:\n{ran.tail()}")
    if want == 2:
        assert "error:" in ran.output, ran.tail()


# python blocks not run, and why
SKIP_BLOCKS: dict[tuple[str, str], str] = {
    ("docs/plugins.md", ""): "plug-in modules: tests/test_plugins.py builds the example "
                             "package and runs the page's minimal parts",
    ("docs/cluster.md", "ray_cluster"): "starts the tests' own cluster of several Ray "
                                        "processes (tests/test_cluster.py uses it)",
    ("docs/llm.md", "run.fidelity()"): "continues the prose: `run`, `a` and `b` are the "
                                       "reader's runs",
}
# a block's text as the reduced size needs it: (page, text) → the text at that size
BLOCK_EDITS: dict[tuple[str, str], str] = {
    # the workspace's experiment has SMALL's 2 replicates (0 and 1)
    ("docs/experiments.md", 'exp.run("no_news", 3)'): 'exp.run("no_news", 1)',
    # its sweep has CAPS' 2 seeds: a member of seed 3 is not there; the first one is
    ("docs/report_and_sweep.md", '"quickstart-p0-s3-20261202-124455-55207e"'):
        "sweep.runs.labels[0]",
}
# what a page's python blocks run as one script (the blocks in order, one namespace)
BLOCK_SCRIPT = """
import os, sys, traceback
os.environ.setdefault("MPLBACKEND", "Agg")
namespace = {"__name__": "__main__"}
for where, code in BLOCKS:
    try:
        exec(compile(code, where, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        sys.exit(f"the block at {where} failed")
"""


def _sized(page: str, text: str) -> str:
    """A block's text with BLOCK_EDITS applied."""
    for (on, was), now in BLOCK_EDITS.items():
        if on == page:
            text = text.replace(was, now)
    return text


def _run_named(text: str, ws: Workspace) -> str:
    """`text` with each example run id no recipe stands for (`runs/whatif-2026…`, made by
    the page's own commands) replaced by the newest run (or sweep, or experiment) of that
    name in the workspace."""
    def newest(m: re.Match) -> str:
        if (ws.root / m.group(0)).exists():  # (a run a recipe made, already put in)
            return m.group(0)
        named = re.compile(rf"{re.escape(m.group(1))}-\d{{8}}-\d{{6}}-[0-9a-f]+")
        made = sorted((f for kind in ("run.json", "sweep.json", "experiment.json")
                       for f in ws.root.glob(f"runs/**/{m.group(1)}-*/{kind}")
                       if named.fullmatch(f.parent.name)), key=lambda p: p.stat().st_mtime)
        return str(made[-1].parent.relative_to(ws.root)) if made else m.group(0)

    return LITERAL_RUN.sub(newest, text)


@pytest.mark.parametrize("page", sorted({b.page for b in BLOCKS}))
@pytest.mark.slow
def test_documented_python(page: str, workspace: Workspace):
    """A page's python blocks, pasted in order into one Python process in the working
    folder (after the page's commands, as a reader runs them), run without an error; their
    placeholders and example run ids stand for runs the recipes or the page's commands
    made."""
    blocks = [b for b in BLOCKS if b.page == page and
              not any(b.matches(k) for k in SKIP_BLOCKS)]
    if not blocks:
        pytest.skip("; ".join(why for k, why in SKIP_BLOCKS.items() if k[0] == page))
    code = [(b.id, _sized(page, _run_named(substitute(b, workspace), workspace)))
            for b in blocks]
    for where, text in code:
        left = [m for m in re.findall(r"runs/<[^>]*>", text)]
        assert not left, f"{where}: a placeholder no recipe stands for: {left}"
    done = subprocess.run([sys.executable, "-c", f"BLOCKS = {code!r}\n{BLOCK_SCRIPT}"],
                          cwd=workspace.root, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]


def test_the_pages_have_commands():
    """The parser finds the commands (a change of the docs' conventions shows here)."""
    pages = {c.page for c in COMMANDS}
    assert {"README.md", "docs/forks.md", "docs/herd_effect.md", "docs/surveys.md",
            "docs/memory.md"} <= pages
    assert sum(c.error for c in COMMANDS) >= 5
    assert all(c.text.startswith(("shoal ", ".venv/bin/shoal ")) for c in COMMANDS)


# the YAML of a page that shows a shipped file: (page, the block's first line, the file)
SHOWN_FILES = [
    ("docs/surveys.md", "surveys:", "configs/survey.yaml"),
    ("docs/forks.md", "interventions:", "configs/news.yaml"),
    ("docs/forks.md", "- kind: event", "configs/news_what_if.yaml"),
]


@pytest.mark.parametrize(("page", "first", "shipped"), SHOWN_FILES,
                         ids=[f"{p}:{f}" for p, _, f in SHOWN_FILES])
def test_a_yaml_example_is_the_shipped_file(page: str, first: str, shipped: str):
    """The page's YAML block is, line for line, part of the file the commands run."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / page).read_text(), re.S)
    block = next(b for b in blocks if b.startswith(first + "\n"))
    assert block in (ROOT / shipped).read_text()
