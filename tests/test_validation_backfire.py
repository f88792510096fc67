"""The `backfire` validation case (Bail et al. 2018) at quick size, and its measure."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from shoal.validation.cases import backfire
from shoal.validation.runner import validate

REPLICATES = 2


@pytest.fixture(scope="module")
def result(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("backfire")
    # two replicates, not the quick size's three: 12 runs, not 18 (the suite's time); the
    # signs and finite intervals the tests check need no more
    done = validate(["backfire"], out, quick=True, replicates=REPLICATES)
    (r,) = done.results
    return out, r


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_quick_run_has_finite_checks_and_a_plot(result):
    out, r = result
    assert r.error is None
    assert len(r.checks) == 2
    for c in r.checks:
        assert math.isfinite(c.simulated)
        assert all(math.isfinite(v) for v in c.interval)
        assert c.tolerance
    assert r.plots == ["backfire.png"]
    assert (out / "backfire-rule" / "backfire.png").stat().st_size > 0
    assert len(r.seeds) == REPLICATES
    # one note per rule setting, besides the experiment and exposure lines
    assert sum("towards own side" in n for n in r.notes) == len(backfire.SETTINGS)
    assert any("read at least one bot post" in n for n in r.notes)


def shift_note(r, prefix: str) -> dict[str, float]:
    """A setting's mean shifts per party, read back from its note."""
    (note,) = [n for n in r.notes if n.startswith(backfire.LABELS[prefix] + ":")]
    return {p: float(v) for p, v in re.findall(r"(rep|dem) ([+-]\d+\.\d+) SD", note)}


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_checks_read_the_social_judgment_arms_and_they_backfire(result):
    """The checks are the social_judgment setting's: the bot post lies beyond the latitude
    of rejection of most partisans, so both parties move away from it (positive shifts);
    the checks' values are those the setting's note reports."""
    _, r = result
    rep, dem = r.checks
    assert rep.simulated > 0 and dem.simulated > 0
    judged = shift_note(r, backfire.CHECKED)
    assert judged["rep"] == pytest.approx(rep.simulated, abs=6e-4)
    assert judged["dem"] == pytest.approx(dem.simulated, abs=6e-4)


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_default_rule_assimilates_to_the_bot(result):
    """The default rule only pulls towards what is read: both parties move (a little)
    towards the bot's side, far from the published backfire (a note, not a check)."""
    _, r = result
    default = shift_note(r, "")
    assert default["rep"] < 0.01 and default["dem"] < 0
    assert abs(default["rep"]) < backfire.REP_RANGE[0]


def test_the_checked_setting_is_one_documented_setting_for_both_cases():
    from shoal.validation.cases import group_polarization

    assert backfire.JUDGMENT == group_polarization.JUDGMENT
    arms = backfire.scenario(10, 2, 0)["experiment"]["arms"]
    assert arms[f"{backfire.CHECKED}bot"]["overrides"] == {"beliefs.update": backfire.JUDGMENT}
    assert "overrides" not in arms["control"]  # the default rule's arms stay as they were


def test_shift_is_signed_towards_own_side_in_party_sd():
    parties = np.array(["rep"] * 4 + ["dem"] * 4)
    control = np.array([[0.3, 0.5, 0.7, 0.5, -0.3, -0.5, -0.7, -0.5]] * 3)
    sd = {p: control[0, parties == p].std(ddof=1) for p in backfire.PARTIES}
    treated = control.copy()
    treated[-1, parties == "rep"] += 0.5 * sd["rep"]  # more conservative: backfire
    treated[-1, parties == "dem"] += 0.25 * sd["dem"]  # more conservative: towards the bot
    s = backfire.shifts(treated, control, parties)
    assert s["rep"][0] == 0 and s["dem"][0] == 0
    assert s["rep"][-1] == pytest.approx(0.5)
    assert s["dem"][-1] == pytest.approx(-0.25)


def test_panel_is_partisan_and_the_bots_post_the_other_side():
    n = 40
    panel = backfire.population(n, seed=3)
    assert len(panel) == n + 2
    party = {r["user_id"]: r["group"] for r in panel}
    for r in panel[:n]:
        own = sum(party[f] == r["group"] for f in r["following"][:-1])
        assert (own, len(r["following"])) == (8, 11)
        assert r["following"][-1] == backfire.bot_id(n, r["group"])
    for r in panel[n:]:
        assert (r["group"], r["activity"]) == ("bot", 0.0)
    posts = backfire.bot_posts(n)
    assert len(posts) == backfire.BOT_ROUNDS
    for entry in posts:
        assert entry["round"] > backfire.PRE_ROUNDS
        for item in entry["items"]:
            p = next(q for q in backfire.PARTIES if backfire.bot_id(n, q) == item["author"])
            assert item["stance"][backfire.TOPIC] == -backfire.SIDE[p] * backfire.BOT_STANCE
