"""The quick start behaves like a public (docs/models.md, "calibrated defaults"): over its
30 simulated hours dispersion and bimodality persist and individual positions are stable,
as panel and trend studies of contested issues report; MiroShark's constants, still one
line away, collapse the same debate to consensus."""

from __future__ import annotations

import pytest

from shoal.runs.calibrate import simulate
from tests.conftest import CONFIGS

QUICKSTART = str(CONFIGS / "quickstart.yaml")


def _start_end(sets: list[str]) -> dict[str, tuple[float, float]]:
    s = simulate(QUICKSTART, sets, seed=42)
    wide = s.pivot_table(index="round", columns="metric", values="value")
    return {m: (wide.loc[0, m], wide.loc[30, m]) for m in wide.columns}


@pytest.fixture(scope="module")
def calibrated():
    return _start_end([])


@pytest.mark.parametrize("topic", ["carbon_tax", "nuclear_power"])
def test_the_quick_start_keeps_its_polarisation_and_its_people(calibrated, topic):
    sd0, sd30 = calibrated[f"sd.{topic}"]
    assert abs(sd30 / sd0 - 1) < 0.05  # dispersion persists (DiMaggio et al.; Baldassarri & Gelman)
    b0, b30 = calibrated[f"bimodality.{topic}"]
    assert abs(b30 - b0) < 0.05
    assert calibrated[f"retest.{topic}"][1] > 0.99  # stable individuals (Ansolabehere et al.)
    m0, m30 = calibrated[f"mean.{topic}"]
    assert abs(m30 - m0) < 0.05  # aggregate opinion moves slowly (Page & Shapiro)


def test_miroshark_constants_still_collapse_the_debate():
    old = _start_end(["beliefs.update.rate=0.08", "beliefs.update.anchor=0"])
    sd0, sd30 = old["sd.carbon_tax"]
    assert sd30 < 0.5 * sd0
