"""The `group_polarization` validation case (OASIS's 196 users) at quick size, its data
and its derivation."""

from __future__ import annotations

import csv
import math
import re

import pytest

from shoal.validation import data
from shoal.validation.cases import group_polarization as gp
from shoal.validation.runner import validate


@pytest.fixture(scope="module")
def result(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("group_polarization")
    done = validate(["group_polarization"], out, quick=True)
    (r,) = done.results
    return out, r


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_quick_run_has_finite_checks_and_a_plot(result):
    out, r = result
    assert r.error is None
    assert len(r.checks) == 2 * len(gp.LEANINGS)
    for c in r.checks:
        assert math.isfinite(c.simulated)
        assert all(math.isfinite(v) for v in c.interval)
    assert r.plots == ["group_polarization.png"]
    assert (out / "group_polarization-rule" / "group_polarization.png").stat().st_size > 0


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_social_judgment_setting_polarizes_both_groups(result):
    """The checks are the social_judgment setting's: its reinforcement moves both
    like-minded groups further towards their own pole, on both measures."""
    _, r = result
    for c in r.checks:
        assert c.simulated > 0
        assert gp.JUDGMENT_LABEL in c.note


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_default_rule_gives_no_shift(result):
    """The default rule's anchor holds positions: no group polarization (a note, not part
    of the verdict), and the shares read nothing more or less extreme."""
    _, r = result
    (note,) = [n for n in r.notes if n.startswith("default social_influence")]
    values = [float(v) for v in re.findall(r"(?:shift|less) ([+-]\d+\.\d+) \[", note)]
    assert len(values) == 2 * len(gp.LEANINGS)
    assert all(abs(v) < 0.01 for v in values)


def test_shipped_files_check_and_keep_the_graph():
    frames = {lean.name: gp.load(lean) for lean in gp.LEANINGS}
    a, b = frames["baoshou"], frames["progressive"]
    assert len(a) == len(b) == 196
    assert a["following"].tolist() == b["following"].tolist()
    assert set(a["leaning"]) == {-1, 0} and set(b["leaning"]) == {0, 1}
    assert (a["leaning"] != 0).sum() == (b["leaning"] != 0).sum() == 193
    for name in gp.DERIVED.values():
        assert data.FILES[name].source_sha256 and data.FILES[name].derived
        header = data.path(name).read_text().splitlines()[0]
        assert header == "agent,following,activity,leaning"


def test_derive_drops_identities_and_reads_the_leaning(tmp_path):
    src = tmp_path / "oasis.csv"
    with src.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "name", "username", "description", "user_char",
                    "following_agentid_list", "activity_level"])
        w.writerow([7, "Real Person", "realperson", "bio", "bio I am not a risk-taker.",
                    "[1, 2]", str(["active"] * 12 + ["inactive"] * 12)])
        w.writerow([8, "Other", "other", "", "", "[]", str(["active"] * 24)])
    out = tmp_path / "derived.csv"
    gp.derive(src, gp.LEANINGS[0], out)
    text = out.read_text()
    assert "Real Person" not in text and "realperson" not in text and "bio" not in text
    rows = list(csv.DictReader(out.open()))
    assert rows[0] == {"agent": "0", "following": "1 2", "activity": "0.5000", "leaning": "-1"}
    assert rows[1] == {"agent": "1", "following": "", "activity": "1.0000", "leaning": "0"}


def test_profiles_lean_to_the_files_side():
    df = gp.load(gp.LEANINGS[1])
    recs = gp.profiles(df, seed=0)
    lean = [r["stances"][gp.TOPIC] for r, s in zip(recs, df["leaning"], strict=True) if s]
    assert sum(x > 0 for x in lean) / len(lean) > 0.95
    assert all(r["user_id"] not in r["following"] for r in recs)


MIRROR = "/work/.mirror/camel-ai+oasis/repo"


@pytest.mark.parametrize("lean", gp.LEANINGS, ids=lambda lean: lean.name)
def test_derive_reproduces_the_shipped_file_from_the_source(tmp_path, lean):
    """From OASIS's own file (a local mirror of the repository, where there is one) the
    derivation gives the shipped bytes, and the source has the registered hash."""
    import hashlib
    import subprocess
    from pathlib import Path

    if not Path(MIRROR).is_dir():
        pytest.skip(f"no local mirror of camel-ai/oasis at {MIRROR}")
    body = subprocess.run(["git", "-C", MIRROR, "show",
                           f"{gp.OASIS_COMMIT}:{gp.SOURCE_DIR}{lean.source}"],
                          capture_output=True, check=True).stdout
    record = data.FILES[gp.DERIVED[lean.name]]
    assert hashlib.sha256(body).hexdigest() == record.source_sha256
    src = tmp_path / lean.source
    src.write_bytes(body)
    gp.derive(src, lean, tmp_path / "out.csv")
    assert data.sha256(tmp_path / "out.csv") == record.sha256
