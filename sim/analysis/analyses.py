"""Reading the analyst's reports of a run (the `analysis_*` tables, shoal.store.analysis):
as DataFrames, as Markdown, and as the report's HTML section where each sentence shows
its verdict and links to the rows it cites."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import duckdb
import pandas as pd

from shoal.core.errors import InputError
from shoal.core.files import write_text
from shoal.store.lineage import being_written
from shoal.store.run_dir import RunDir
from shoal.store.traces import ANALYSIS_TABLES, read_tables

_TAG = re.compile(r"\s*\[(?:post|posts|agent|step|steps)\s+[^\]]*\]", re.IGNORECASE)
Source = str | Path | duckdb.DuckDBPyConnection  # a trajectory file, or a connection to it
MARK = {"verified": "✓", "unresolved": "✗ unresolved", "unsupported": "✗ unsupported",
        "uncited": "? uncited", "interpretation": ""}


def analyses(db: Source) -> pd.DataFrame:
    """One row per analysis of the run, oldest first. An analysis stopped by Ctrl-C is
    marked interrupted; one marked running while no process holds the run's file was
    interrupted too (killed) and says so (`shoal analyse` with the same question
    continues either)."""
    df = _interrupted(db, read_tables(db, ["analysis_runs"])["analysis_runs"])
    return df.sort_values("created_at", kind="stable").reset_index(drop=True)


def _interrupted(db: Source, runs: pd.DataFrame) -> pd.DataFrame:
    """`analysis_runs` rows with `running` read as `interrupted` when no process holds
    the file (a process writing an analysis holds it for the whole analysis)."""
    if isinstance(db, str | Path) and not being_written(RunDir(Path(db).parent)):
        runs.loc[runs["status"] == "running", "status"] = "interrupted"
    return runs


def analysis_frames(db: Source, analysis_id: str | None = None) -> dict[str, pd.DataFrame]:
    """The tables of one analysis (default: the latest), steps with their full results
    (`result`, joined from `analysis_results`)."""
    runs = analyses(db)
    if runs.empty:
        raise InputError("the run has no analysis (run `shoal analyse` first)")
    if analysis_id is None:
        analysis_id = str(runs["analysis_id"].iloc[-1])
    elif analysis_id not in set(runs["analysis_id"]):
        raise InputError(f"no analysis {analysis_id!r}; analyses: "
                         f"{', '.join(runs['analysis_id'])}")
    return _frames(db, analysis_id)


def _frames(db: Source, analysis_id: str) -> dict[str, pd.DataFrame]:
    tables = read_tables(db, ANALYSIS_TABLES)
    tables["analysis_runs"] = _interrupted(db, tables["analysis_runs"])
    out = {name: df[df["analysis_id"] == analysis_id].reset_index(drop=True)
           for name, df in tables.items() if name != "analysis_results"}
    results = tables["analysis_results"].drop_duplicates("result_hash")
    steps = out["analysis_steps"].merge(results.rename(columns={"content": "result"}),
                                        on="result_hash", how="left")
    out["analysis_steps"] = steps.sort_values(["section_id", "attempt", "step"],
                                              kind="stable").reset_index(drop=True)
    return out


def latest(frames: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The latest attempt of each section (in plan order) and its claims."""
    sections = frames["analysis_sections"]
    if sections.empty:
        return sections, frames["analysis_claims"]
    sections = (sections.sort_values("attempt").groupby("section_id").tail(1)
                .sort_values("position").reset_index(drop=True))
    claims = frames["analysis_claims"].merge(sections[["section_id", "attempt"]],
                                             on=["section_id", "attempt"])
    return sections, claims.sort_values(["section_id", "claim"]).reset_index(drop=True)


def to_markdown(frames: dict[str, pd.DataFrame]) -> str:
    """The analysis as Markdown: each sentence with a footnote giving its verdict and
    citations; flagged sentences marked in the text."""
    info = frames["analysis_runs"].iloc[0]
    sections, claims = latest(frames)
    out = [f"# Analysis {info['analysis_id']}", ""]
    if isinstance(info["question"], str) and info["question"]:
        out += [f"**Question:** {info['question']}", ""]
    out += [f"Model: {info['provider']} ({info['model']}) · {int(info['claims'] or 0)} claims, "
            f"**{int(info['unverified'] or 0)} unverified** · status {info['status']}", ""]
    notes = []
    for sec in sections.itertuples():
        out += [f"## {sec.title}", ""]
        if sec.status != "done":
            out += [f"*This section did not finish ({sec.status}: {sec.error}).*", ""]
            continue
        mine = claims[claims["section_id"] == sec.section_id]
        for _, para in mine.groupby("paragraph", sort=True):
            words = []
            for c in para.itertuples():
                text = _TAG.sub("", c.sentence).strip()
                if c.verdict == "interpretation":
                    words.append(text)
                    continue
                notes.append(f"[^{len(notes) + 1}]: {c.verdict}"
                             f"{' — ' + c.detail if c.detail else ''}; cites "
                             f"{', '.join(json.loads(c.citations)) or 'nothing'}")
                flag = "" if c.verdict == "verified" else f"**[{c.verdict}]** "
                words.append(f"{flag}{text}[^{len(notes)}]")
            out += [" ".join(words), ""]
    return "\n".join(out + notes) + "\n"


def write_markdown(db: Source, analysis_id: str, path: str | Path) -> Path:
    """Write an analysis as Markdown to `path` (atomically)."""
    path = Path(path)
    write_text(path, to_markdown(analysis_frames(db, analysis_id)))
    return path


def analysis_html(frames: dict[str, pd.DataFrame]) -> str:
    """The report's Analysis section: header counts, the sections' sentences with their
    verdicts (hover: the detail), and footnotes listing the rows each sentence cites."""
    e = html.escape
    info = frames["analysis_runs"].iloc[0]
    sections, claims = latest(frames)
    unverified = int(info["unverified"] or 0)
    head = (f'<p class="analysis-head"><b>{int(info["claims"] or 0)} claims, '
            f'<span class="{"bad" if unverified else "ok"}">{unverified} unverified</span>'
            f'</b> · analysis <code>{e(str(info["analysis_id"]))}</code> by '
            f'{e(str(info["provider"]))} ({e(str(info["model"]))}) · status '
            f'{e(str(info["status"]))}</p>')
    if isinstance(info["question"], str) and info["question"]:
        head += f"<p><b>Question:</b> {e(info['question'])}</p>"
    body, notes = [], []
    for sec in sections.itertuples():
        body.append(f"<h3>{e(str(sec.title))}</h3>")
        if sec.status != "done":
            body.append(f'<p class="bad">This section did not finish ({e(str(sec.status))}: '
                        f"{e(str(sec.error))}).</p>")
            continue
        mine = claims[claims["section_id"] == sec.section_id]
        for _, para in mine.groupby("paragraph", sort=True):
            spans = []
            for c in para.itertuples():
                text = e(_TAG.sub("", c.sentence).strip())
                if c.verdict == "interpretation":
                    spans.append(f'<span class="claim interpretation">{text}</span>')
                    continue
                n = len(notes) + 1
                tip = e(f"{c.verdict}: {c.detail}" if c.detail else c.verdict)
                flag = ("" if c.verdict == "verified"
                        else f'<b class="flag">[{e(c.verdict)}]</b> ')
                spans.append(f'<span class="claim v-{e(c.verdict)}" title="{tip}" '
                             f'data-verdict="{e(c.verdict)}">{flag}{text}<sup>'
                             f'<a href="#ev-{n}">{n}</a></sup></span>')
                notes.append(_footnote(n, c))
            body.append("<p>" + " ".join(spans) + "</p>")
    foot = (f'<h3>Evidence</h3><ol class="evidence">{"".join(notes)}</ol>' if notes else "")
    return head + "\n".join(body) + foot


def _footnote(n: int, claim) -> str:
    e = html.escape
    parts = [f'<li id="ev-{n}"><span class="v-{e(claim.verdict)}">{e(MARK[claim.verdict])}'
             f"</span> {e(claim.detail or '')}"]
    for ev in json.loads(claim.evidence or "[]"):
        cols, rows = ev.get("columns"), ev.get("rows")
        label = e(str(ev.get("citation", "")))
        if isinstance(cols, list) and isinstance(rows, list):
            more = (f" (first {len(rows)} of {ev['rows_total']} rows)"
                    if ev.get("rows_total") else "")
            cells = "".join("<tr>" + "".join(f"<td>{e(_short(v))}</td>" for v in r) + "</tr>"
                            for r in rows)
            parts.append(f"<div><code>[{label}]</code>{more}<table class='ev'><tr>"
                         + "".join(f"<th>{e(str(c))}</th>" for c in cols)
                         + f"</tr>{cells}</table></div>")
        else:
            parts.append(f"<div><code>[{label}]</code> <code>"
                         f"{e(_short(json.dumps(ev, ensure_ascii=False), 600))}</code></div>")
    return "".join(parts) + "</li>"


def _short(value: object, limit: int = 160) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
