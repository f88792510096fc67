"""End to end: the example configs of configs/models/ run with `shoal run` and their
trajectories (the DuckDB `beliefs` table) show each rule's known regime, as stated in the
comment at the top of each file. The model-level tests next to this one check the rules
against the literature; these check that the engine wires them up as configured.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from shoal.cli.main import main
from tests.conftest import CONFIGS
from tests.validation.harness import clusters

MODELS = CONFIGS / "models"


def beliefs(out: Path) -> pd.DataFrame:
    """The beliefs table of the single run under `out`."""
    (run,) = list(out.iterdir())
    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        return con.sql("SELECT round, agent, position FROM beliefs ORDER BY round, agent").df()
    finally:
        con.close()


def positions(df: pd.DataFrame, round_: int) -> np.ndarray:
    """Positions of every agent at the end of a round (0: initial)."""
    return df.loc[df["round"] == round_, "position"].to_numpy()


def test_every_rule_has_a_model_config() -> None:
    """One config per registered rule."""
    from shoal.core.registry import BELIEF_RULES

    assert {p.stem for p in MODELS.glob("*.yaml")} == set(BELIEF_RULES.names())


@pytest.mark.slow
def test_deffuant_config_splits_into_two_clusters_via_the_console_script(tmp_path) -> None:
    """`shoal run configs/models/deffuant.yaml` (d = 0.2 on [0, 1]): by the last round,
    ⌊1/(2d)⌋ = 2 major clusters (≥ 5 % of agents each, gaps > 0.02), one on each side."""
    result = subprocess.run([sys.executable, "-m", "shoal.cli", "run",
                             str(MODELS / "deffuant.yaml"), "--out", str(tmp_path), "--quiet"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    df = beliefs(tmp_path)
    last = positions(df, int(df["round"].max()))
    assert len(clusters(last, gap=0.02, min_share=0.05)) == 2
    major = last[np.abs(last) > 0.2]
    assert (major > 0).mean() == pytest.approx(0.5, abs=0.15)


def run(tmp_path: Path, name: str, *extra: str) -> pd.DataFrame:
    """Run configs/models/<name>.yaml through the CLI in-process; its beliefs table."""
    assert main(["run", str(MODELS / f"{name}.yaml"), "--out", str(tmp_path), "--quiet",
                 *extra]) == 0
    return beliefs(tmp_path)


def test_hegselmann_krause_config_polarises(tmp_path) -> None:
    """ε = 0.15 on [0, 1]: frozen into 2–3 clusters by round 20 (nothing moves after)."""
    df = run(tmp_path, "hegselmann_krause", "--rounds", "20")
    last, before = positions(df, 20), positions(df, 19)
    assert 2 <= len(clusters(last, gap=1e-6)) <= 3
    np.testing.assert_allclose(last, before, atol=1e-12)


def test_degroot_config_reaches_consensus(tmp_path) -> None:
    """Averaging over followees on a connected graph: standard deviation < 0.01 by round
    10 (it starts ≈ 0.58)."""
    df = run(tmp_path, "degroot", "--rounds", "10")
    assert positions(df, 0).std() > 0.5
    assert positions(df, 10).std() < 0.01


def test_friedkin_johnsen_config_keeps_disagreement(tmp_path) -> None:
    """Anchored to initial opinions: the spread settles well above zero (sd > 0.2) and
    has stopped changing (consecutive rounds equal to 1e-6)."""
    df = run(tmp_path, "friedkin_johnsen", "--rounds", "25")
    last = positions(df, 25)
    assert last.std() > 0.2
    np.testing.assert_allclose(last, positions(df, 24), atol=1e-6)


def test_voter_config_coarsens(tmp_path) -> None:
    """Opinions are copied, never blended: every final position is an initial one, and
    the number of distinct positions falls by more than 80 % in 30 rounds."""
    df = run(tmp_path, "voter", "--rounds", "30")
    first, last = positions(df, 0), positions(df, 30)
    assert set(last) <= set(first)
    assert len(np.unique(last)) < 0.2 * len(np.unique(first))
