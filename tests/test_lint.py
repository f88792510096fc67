"""The code base stays ruff-clean (the house style), checked as part of the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_ruff_clean():
    """`ruff check` finds nothing in the project's Python files."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    result = subprocess.run([ruff, "check", "sim", "agents", "beliefs", "memory", "tests",
                             "bench"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
