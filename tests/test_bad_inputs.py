"""Every user mistake in tests/data/bad_inputs.yaml, run end to end through `main`: exit 2,
a message naming the problem (field path with file:line, or the flag), no traceback,
nothing written, and an earlier run left byte for byte as it was."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from shoal.cli.main import main
from tests.conftest import CONFIGS, ROOT

CASES: list[dict[str, Any]] = [
    case for path in sorted((ROOT / "tests" / "data").glob("bad_inputs*.yaml"))
    for case in yaml.safe_load(path.read_text(encoding="utf-8"))]


def _parent_config() -> dict[str, Any]:
    """The quick-start config shrunk to 50 agents and 3 rounds, with two named
    interventions (one before and one after the rounds the fork cases fork at)."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=3, name="parent")
    data["population"]["size"] = 50
    data["activity"]["min_active"] = 5
    data["interventions"] = [
        {"kind": "beliefs", "round": 1, "name": "nudge", "topic": "carbon_tax", "shift": 0.1},
        {"kind": "event", "round": 3, "name": "news", "text": "Parliament passes the tax."},
    ]
    return data


def _digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` by relative path; folders (a fork directory,
    even an empty one) as "folder"."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "folder" for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> dict[str, Any]:
    """A finished 3-round run (local executor), made once; its output folder's digest."""
    root = tmp_path_factory.mktemp("parent")
    cfg = root / "parent.yaml"
    cfg.write_text(yaml.safe_dump(_parent_config(), sort_keys=False))
    runs = root / "runs"
    assert main(["run", str(cfg), "--out", str(runs), "--quiet", "--executor", "local"]) == 0
    (run,) = runs.iterdir()
    return {"run": run, "folder": runs, "digest": _digest(runs)}


def _write_inputs(case: dict[str, Any], here: Path) -> dict[str, str]:
    """Write the case's config and extra file into `here`; the placeholder values."""
    config, extra = here / "cfg.yaml", here / case.get("file_name", "extra.txt")
    if "config" in case:
        config.write_text(case["config"], encoding="utf-8")
    elif "config_parts" in case:
        config.write_text("".join(text * times for text, times in case["config_parts"]),
                          encoding="utf-8")
    if "file_bytes_hex" in case:
        extra.write_bytes(bytes.fromhex(case["file_bytes_hex"]))
    elif "file" in case:
        extra.write_text(case["file"], encoding="utf-8")
    elif "file_parts" in case:
        extra.write_text("".join(text * times for text, times in case["file_parts"]),
                         encoding="utf-8")
    depth = case.get("nested", 0)
    return {"config": str(config), "file": str(extra), "out": str(here / "out"),
            "dir": str(here), "nested": "[" * depth + "]" * depth}


def _damaged_copy(run: Path, here: Path, how: str, file: str = "trajectory.duckdb"
                  ) -> Path:
    """A copy of `run` under `here` whose `file` (its trajectory.duckdb unless told) is
    damaged `how` (truncated, flipped, zeros: `tests.test_lifecycle.damage`)."""
    from tests.test_lifecycle import damage

    copy = Path(shutil.copytree(run, here / "damaged" / run.name))
    damage(copy / file, how)
    return copy


def _listing(folder: Path) -> list[str]:
    """Everything under `folder` (files and folders), with sizes."""
    return sorted(f"{p.relative_to(folder)} {p.stat().st_size if p.is_file() else '/'}"
                  for p in folder.rglob("*"))


def _fill(arg: str, values: dict[str, str]) -> str:
    """An argument with its placeholders ({config}, {file}, {out}, {dir}, {parent},
    {nested}) replaced; other braces (`interventions={a: 1}`) stay."""
    for name, value in values.items():
        arg = arg.replace("{" + name + "}", value)
    return arg


def _run(argv: list[str], capsys) -> tuple[int, str]:
    """`main(argv)`'s exit code (argparse's too) and everything it printed."""
    capsys.readouterr()  # (nothing printed before, e.g. by the parent run, counts)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a flag before main's own handling
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_input(case, parent, tmp_path_factory, capsys, monkeypatch):
    """Exit 2, the expected message, no traceback, nothing written anywhere."""
    here = tmp_path_factory.mktemp("case")  # (a neutral name: no expected text in the path)
    monkeypatch.chdir(here)  # a default `runs/` would land here, and be seen
    monkeypatch.delenv("SHOAL_TEST_KEY_THAT_IS_NEVER_SET", raising=False)
    values = {**_write_inputs(case, here), "parent": str(parent["run"])}
    if "damage" in case:  # {damaged}: a copy of the parent with its trajectory damaged
        values["damaged"] = str(_damaged_copy(parent["run"], here, case["damage"],
                                              case.get("damaged_file", "trajectory.duckdb")))
    argv = [_fill(arg, values) for arg in case["argv"]]
    if "stdin" in case:  # (`--intervene -`)
        monkeypatch.setattr("sys.stdin", io.StringIO(_fill(case["stdin"], values)))
    before = _listing(here)

    code, output = _run(argv, capsys)

    flat = " ".join(output.split())  # long paths may wrap a line
    assert code == 2, output
    for text in case["expect"]:
        assert text in flat, f"expected {text!r} in:\n{output}"
    for text in case.get("forbid", []):
        assert text not in output and text not in flat, f"{text!r} must not be shown"
    assert "Traceback" not in output and "internal error" not in output, output
    assert _listing(here) == before, "something was written"
    out = here / "out"
    assert not out.exists() or not any(out.iterdir()), "a run directory was made"


def test_corpus_is_broad():
    """The corpus keeps its breadth: unique ids, each expecting something, and at least
    five cases for every command `shoal` has."""
    import argparse

    from shoal.cli.main import build_parser

    ids = [c["id"] for c in CASES]
    assert len(ids) >= 110 and len(set(ids)) == len(ids)
    assert all(c["expect"] for c in CASES)
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = {p.prog.split()[-1] for p in sub.choices.values()}  # (aliases: once)
    per = {c: sum(case["argv"][0] == c for case in CASES) for c in commands}
    assert {c: n for c, n in per.items() if n < 5} == {}


def test_parent_run_is_untouched(parent):
    """After every case (this test runs last in the module), the parent run's folder holds
    the same files with the same bytes: no fork directory, no truncation, no rewrite."""
    assert _digest(parent["folder"]) == parent["digest"]
