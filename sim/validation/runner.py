"""Running validation cases: each (case, agents) pair is one Ray task (the cases run in
parallel, a case's own runs inside its task), and the results go to one folder as a
table, JSON and an HTML page with the plots."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from shoal.config.yaml_text import read_yaml
from shoal.core.errors import InputError
from shoal.runs.task_pool import Outcome, TaskPool
from shoal.validation.case import CASES, CaseContext, CaseResult, load_cases

LLM_SECTIONS = ("llm", "memory")  # what `--llm CONFIG` lays over each case's scenario
MAX_REPLICATES = 10_000  # per case (each a run, or several): more is a typo, not a plan
SMALLEST = {"name": "llm_overlay", "rounds": 1, "population": {"size": 2}, "topics": ["t"]}


@dataclass
class Validation:
    """A validation run's results and where they were written."""

    out: Path
    results: list[CaseResult]
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)


def select(names: list[str] | None) -> list[str]:
    """The cases to run: `names` (each checked), or every registered case."""
    known = load_cases()
    if not names:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown validation case {unknown[0]!r}; known: "
                         f"{', '.join(known) or 'none'}")
    return list(dict.fromkeys(names))


def llm_overlay(path: str | Path) -> dict[str, Any]:
    """The `llm` (and `memory`) sections of an LLM config file, checked as part of a
    config, to lay over each case's scenario (`shoal validate --llm CONFIG`)."""
    from shoal.config import Config, parse_config

    data, root = read_yaml(path, "LLM config")
    if not isinstance(data, dict) or "llm" not in data:
        raise InputError(f"{path}: needs an `llm:` section (the provider the LLM agents "
                         "use; see docs/llm.md)")
    overlay = {k: data[k] for k in LLM_SECTIONS if k in data}
    # a whole run config may be given (its other sections are not used), but a key that
    # is no config field (`memroy:`) is a mistake, not a section to skip in silence
    unknown = {k: data[k] for k in data if k not in Config.model_fields}
    # checked inside the smallest config, so problems name the file, the line and the
    # field path of the sections the user wrote
    parse_config({**SMALLEST, **overlay, **unknown}, root, source=str(path))
    return overlay


def run_case(name: str, module: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """One case under one context (a Ray task): its result as a dict; an error the case
    raised is its result's `error`, never an exception out of the pool. `module`: where
    the case was registered (imported here too: a case registered by a script or a
    notebook rather than a plug-in's entry point)."""
    context = CaseContext(**{**ctx, "out": Path(ctx["out"])})
    context.out.mkdir(parents=True, exist_ok=True)
    load_cases()
    if name not in CASES:
        importlib.import_module(module)
    case = CASES.get(name).impl()
    start = time.perf_counter()
    try:
        result = case.run(context)
    except InputError as exc:
        result = _failed(name, context, str(exc))
    except Exception as exc:  # a case's own defect: shown, the other cases go on
        result = _failed(name, context, f"{type(exc).__name__}: {exc}")
    result.seconds = time.perf_counter() - start
    return result.to_dict()


def _failed(name: str, ctx: CaseContext, error: str) -> CaseResult:
    impl = CASES.get(name).impl
    return CaseResult(case=name, title=impl.title, source=impl.source, agents=ctx.agents,
                      checks=[], seeds=[], size="", error=error)


def validate(names: list[str] | None, out: str | Path, quick: bool = False, seed: int = 0,
             replicates: int | None = None, llm: str | Path | None = None,
             parallel: int | None = None, address: str | None = None,
             on_case: Callable[[CaseResult, int, int], None] | None = None) -> Validation:
    """Run the cases (`names`, or all) with rule agents, and with LLM agents too when
    `llm` names an LLM config; write results.csv, results.json and index.html to `out`."""
    from shoal.validation.page import write_results

    if replicates is not None and replicates < 1:
        raise InputError(f"--replicates {replicates}: must be >= 1")
    if replicates is not None and replicates > MAX_REPLICATES:
        raise InputError(f"--replicates {replicates}: at most {MAX_REPLICATES:,} per case")
    if parallel is not None and parallel < 1:
        raise InputError(f"--parallel {parallel}: must be >= 1")
    if seed < 0:
        raise InputError(f"--seed {seed}: must be >= 0")
    if seed + (replicates or MAX_REPLICATES) > 2**63:  # (checked by each case: too late)
        raise InputError(f"--seed {seed}: the seeds from it (one per replicate) must lie "
                         "in 0..2^63-1")
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise InputError(f"--out {out}: is a file; give a folder for the results")
    chosen = select(names)
    overlay = llm_overlay(llm) if llm is not None else None
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create the folder: "
                         f"{exc.strerror or exc}") from None
    base = CaseContext(out=root, quick=quick, seed=seed, replicates=replicates, llm=overlay)
    contexts = {(n, a): replace(base, agents=a, out=root / f"{n}-{a}")
                for n in chosen for a in (("rule", "llm") if overlay else ("rule",))}
    results: dict[tuple[str, str], CaseResult] = {}
    start = time.perf_counter()

    def args(key: Any) -> tuple[Any, ...]:
        ctx = asdict(contexts[key])
        return key[0], CASES.get(key[0]).module, {**ctx, "out": str(ctx["out"])}

    def finished(key: Any, outcome: Outcome) -> None:
        result = (CaseResult.from_dict(outcome.value) if outcome.ok else
                  _failed(key[0], contexts[key], outcome.error or "the task failed"))
        results[key] = result
        if on_case is not None:
            on_case(result, len(results), len(contexts))

    with TaskPool(run_case, parallel, address) as pool:
        pool.run(lambda: [k for k in contexts if k not in results], args, finished)
    done = Validation(out=root, results=[results[k] for k in contexts],
                      seconds=time.perf_counter() - start)
    done.files = write_results(done.results, root, quick=quick)
    return done
