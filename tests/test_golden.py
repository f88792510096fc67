"""The example configs' trajectories match the committed golden digests, table by table,
on the in-process and on the Ray executor (tests/golden.py explains the digests)."""

from __future__ import annotations

import pytest

from tests.golden import CASES, load_golden, run_case


@pytest.mark.parametrize("executor", ["local", "ray"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tables_match_the_golden_digests(case, executor, tmp_path, request):
    if executor == "ray":
        request.getfixturevalue("ray_session")
    want = load_golden()[case.name]
    got = run_case(case, tmp_path, executor)
    changed = sorted(t for t in want if got.get(t) != want[t])
    assert not changed, f"{case.name} on {executor}: tables changed: {changed}"
