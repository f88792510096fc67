"""The layer rule of docs/architecture.md, enforced on the source: every import (inside
functions too) goes from a package to one it may use, and no two modules import each
other, directly or round a loop. Reading a run loads neither the engine nor Ray nor httpx.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

# The repository's folders and the package names they install as (pyproject.toml).
PACKAGES = {"sim": "shoal", "agents": "shoal.agents", "memory": "shoal.memory",
            "beliefs": "shoal.beliefs"}
# Each layer and the layers it may import (its own is always allowed). Lowest first.
BELOW = {
    "shoal.core": set(),
    "shoal.config": {"shoal.core"},
    "shoal.store": {"shoal.core"},
    "shoal.platforms": {"shoal.core", "shoal.config"},
    "shoal.llm": {"shoal.core", "shoal.config"},
    "shoal.beliefs": {"shoal.core", "shoal.config"},
    "shoal.memory": {"shoal.core", "shoal.config", "shoal.platforms", "shoal.llm"},
    "shoal.agents": {"shoal.core", "shoal.config", "shoal.platforms", "shoal.llm",
                     "shoal.beliefs", "shoal.memory"},
    "shoal.analysis": {"shoal.core", "shoal.store"},
}
BELOW["shoal.world"] = {"shoal.store", "shoal.agents", *BELOW["shoal.agents"]}
BELOW["shoal.market"] = {"shoal.world", *BELOW["shoal.world"]}  # loaded by its platform spec
BELOW["shoal.engine"] = {"shoal.world", *BELOW["shoal.world"]}
BELOW["shoal.runs"] = {"shoal.engine", "shoal.analysis", *BELOW["shoal.engine"]}
BELOW["shoal.analyst"] = {"shoal.runs", *BELOW["shoal.runs"]}
BELOW["shoal.validation"] = {"shoal.runs", *BELOW["shoal.runs"]}  # cases run scenarios
# the web app and MCP server: the analyst's SQL guard, the runs, the readers
BELOW["shoal.web"] = {"shoal.analyst", *BELOW["shoal.analyst"]}
BELOW["shoal.cli"] = {"shoal.analyst", "shoal.validation", "shoal.web", *BELOW["shoal.analyst"]}
BELOW["shoal.__main__"] = {"shoal.cli"}  # `python -m shoal`: the command line, nothing else
BELOW["shoal.testing"] = {"shoal.runs", *BELOW["shoal.runs"]}  # the conformance kit: runs parts
FACADE = "shoal"  # sim/__init__.py: lazy exports of the notebook API only


def module_name(path: Path) -> str:
    """The name a source file is imported by (sim/core/keys.py: shoal.core.keys)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = (*PACKAGES[parts[0]].split("."), *parts[1:])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports, anywhere in the file (`from pkg import mod`
    counts as importing the module `pkg.mod`)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


# A feature gathered in one package whose modules sit in the layers their parts belong to.
FEATURES = {"shoal.surveys": {"config": "shoal.config", "responses": "shoal.engine",
                              "asking": "shoal.runs", "scores": "shoal.analysis"}}


def layer(module: str) -> str:
    """The layer a module belongs to: its sub-package of `shoal` (shoal.store, shoal.agents,
    ...), a feature package's module's own layer, or the facade `shoal` itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return "shoal"
    package = f"shoal.{parts[1]}"
    if package in FEATURES:  # (the package itself, a docstring, belongs to the lowest)
        return FEATURES[package].get(parts[2], "shoal.core") if len(parts) > 2 else "shoal.core"
    return package


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports(path, known) for name, path in found.items()}


def test_code_imports_only_the_shoal_namespace():
    """No import of the repository's folder names (`sim`, `agents`, `memory`, `beliefs`):
    installed, they exist only as `shoal...`, and `agents` is another package's name."""
    roots = set(PACKAGES)
    bad = []
    for folder in (*PACKAGES, "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module
                         and not node.level else [])
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                        if n.split(".")[0] in roots]
    assert not bad, "imports of folder names instead of shoal...:\n" + "\n".join(bad)


def test_every_module_is_in_a_layer():
    unplaced = sorted({layer(m) for m in modules()} - set(BELOW) - {FACADE})
    assert not unplaced, f"modules outside every layer of docs/architecture.md: {unplaced}"


def test_imports_only_go_down():
    bad = []
    for module, targets in sorted(graph().items()):
        here = layer(module)
        if here == FACADE:
            continue
        for target in sorted(targets):
            there = layer(target)
            if there != here and there not in BELOW[here]:
                bad.append(f"{module} -> {target}")
    assert not bad, "imports against the layer rule:\n" + "\n".join(bad)


def test_no_import_cycles():
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """A guard on the guard: an import in a function body is found."""
    path = ROOT / "sim" / "analysis" / "runs.py"
    assert "shoal.store.lineage" in imports(path, set(modules()))
    src = "def f():\n    from shoal.engine import driver\n"
    fake = ROOT / "sim" / "analysis" / "_probe_.py"
    try:
        fake.write_text(src)
        assert "shoal.engine.driver" in imports(fake, set(modules()))
    finally:
        fake.unlink()


READ_A_RUN = """
import sys
from shoal import open_run
run = open_run(sys.argv[1])
assert len(run.beliefs) > 0
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "httpx")
               or m.startswith(("shoal.engine", "shoal.runs", "shoal.world", "shoal.agents")))
print(",".join(heavy))
"""


def test_reading_a_run_loads_no_engine_ray_or_http(tmp_path):
    from tests.golden import CASES, run_case

    out = tmp_path / "runs"
    out.mkdir()
    run_case(CASES[0].__class__("q", "configs/quickstart.yaml",
                                ("population.size=100", "rounds=2")), out)
    (run,) = out.iterdir()
    result = subprocess.run([sys.executable, "-c", READ_A_RUN, str(run)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"reading a run imported: {result.stdout}"
