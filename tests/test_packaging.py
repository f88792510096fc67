"""Shoal installs as one package, `shoal`: its wheel holds nothing at the top level but
`shoal/`, every source folder is in it, and a package that owns the top-level name
`agents` (a widely used agents SDK does) installs beside it without either breaking."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

FOLDERS = {"sim": "shoal", "agents": "shoal.agents", "memory": "shoal.memory",
           "beliefs": "shoal.beliefs"}


def test_every_source_folder_is_a_listed_package():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    assert found == listed


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(ROOT)], check=True)
    (found,) = out.glob("shoal-*.whl")
    return found


def test_the_wheel_holds_only_shoal(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"shoal"}
    assert "shoal/agents/shard.py" in names and "shoal/memory/knowledge/model.py" in names
    assert "shoal/testing.py" in names and "shoal/runs/import_ledger.yaml" in names
    assert any(n.startswith("shoal/agents/data/") for n in names)
    # every language's templates (shoal.core.language reads them as package data)
    languages = {n.rsplit("/", 1)[1] for n in names if n.startswith("shoal/core/languages/")}
    assert languages == {p.name for p in (ROOT / "sim" / "core" / "languages").glob("*.yaml")}
    assert {"en.yaml", "zh.yaml", "ja.yaml", "es.yaml", "de.yaml", "fr.yaml"} <= languages


@pytest.mark.slow
def test_shoal_and_a_top_level_agents_package_import_side_by_side(wheel, tmp_path):
    """Both installed into one site folder (as into one venv): `import agents` is the other
    package's, `shoal.agents` is Shoal's, and a run works."""
    other = tmp_path / "other"
    (other / "agents").mkdir(parents=True)
    (other / "agents" / "__init__.py").write_text('WHO = "an agents SDK"\n')
    (other / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = '
        '"setuptools.build_meta"\n[project]\nname = "agents-sdk"\nversion = "1.0"\n'
        '[tool.setuptools]\npackages = ["agents"]\n')
    site = tmp_path / "site"
    for source in (str(other), str(wheel)):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-build-isolation", "--target", str(site), source], check=True)
    script = ("import agents, shoal.agents.shard\n"
              "from shoal.runs.simulation import Simulation\n"
              "assert agents.WHO == 'an agents SDK', agents.__file__\n"
              f"assert shoal.agents.shard.__file__.startswith({str(site)!r})\n"
              "from shoal.config import parse_config\n"
              "cfg = parse_config({'name': 'x', 'rounds': 2, 'population': {'size': 30},\n"
              "                    'topics': ['t'], 'output': {'dir': 'runs'}})\n"
              "with Simulation.create(cfg, out=None) as sim:\n"
              "    sim.run()\n"
              "print('both import')\n")
    # (not from the repository's root, where the source folders themselves would be found)
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, "
                             f"{str(site)!r}); exec({script!r})"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0 and "both import" in result.stdout, result.stderr[-2000:]
