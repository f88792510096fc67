"""notebooks/analysis.ipynb executes top to bottom in a fresh kernel of this interpreter,
with no error, and shows its metrics and figures. The stored notebook has no outputs."""

from __future__ import annotations

import json
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "analysis.ipynb"
KERNEL = "shoal-test"


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
    """A kernelspec that starts this very interpreter (the venv's, with ipykernel from the
    `test` extra), found first through JUPYTER_PATH whatever else the machine has."""
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (shoal tests)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # no migration warning from jupyter_core
    return KERNEL


def outputs(nb: nbformat.NotebookNode) -> list[dict]:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def text_of(out: dict) -> str:
    return out.get("text", "") + out.get("data", {}).get("text/plain", "")


def test_the_stored_notebook_is_clean():
    """Outputs are produced by running it, never stored (they would go stale)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert not outputs(nb)
    assert all(c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
def test_the_notebook_runs_and_shows_metrics_and_plots(kernel):
    """Every cell runs (nbclient raises on the first error); the run, each metric and the
    four plots appear in the outputs."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name=kernel, timeout=300,
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outs = outputs(nb)
    assert not [o for o in outs if o["output_type"] == "error"]
    text = "\n".join(text_of(o) for o in outs)
    for expected in ("<Run quickstart-", "finished, rounds 0..30 of 30",  # open_run
                     "bimodality", "esteban_ray", "group_distance",  # polarization
                     "correlation", "structural_virality", "max_breadth",  # echo, cascades
                     "engagement Gini: 0.", "mean_score", "ci_low",  # inequality, herd
                     "while running: rounds 0..", "then finished: rounds 0..40"):  # live
        assert expected in text, expected
    assert all(arm in text for arm in ("up", "control", "down"))
    images = [o for o in outs if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # beliefs, polarization, cascades, comparison
