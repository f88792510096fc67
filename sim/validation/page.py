"""The results of `shoal validate`: results.csv (one row per check), results.json (every
case in full) and index.html, one self-contained page (no server, no network: the report's
CSS and content policy, plots embedded) with a section per case and, when LLM agents ran
too, their checks beside the rule agents'."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from pathlib import Path

import pandas as pd

from shoal.analysis.report import _e, _num, html_page, table_html
from shoal.core.files import write_text
from shoal.validation.case import CaseResult

VERDICT_STYLE = {"pass": "#1a7f37", "fail": "#cf222e", "error": "#9a6700"}


def results_frame(results: list[CaseResult]) -> pd.DataFrame:
    """One row per check: case, agents, measure, simulated, its interval, target,
    tolerance, passed, and the case's source, seeds and size (a case that failed to run:
    one row with its error)."""
    rows = []
    for r in results:
        common = {"case": r.case, "agents": r.agents, "verdict": r.verdict,
                  "source": r.source, "seeds": " ".join(map(str, r.seeds)), "size": r.size}
        if r.error:
            rows.append({**common, "measure": "", "error": r.error})
        for c in r.checks:
            low, high = c.interval or (None, None)
            rows.append({**common, "measure": c.measure, "simulated": c.simulated,
                         "interval_low": low, "interval_high": high, "target": c.target,
                         "tolerance": c.tolerance, "passed": c.passed, "note": c.note,
                         "error": ""})
    return pd.DataFrame(rows)


def write_results(results: list[CaseResult], out: Path, quick: bool = False) -> list[Path]:
    """Write results.csv, results.json and index.html into `out`; returns their paths."""
    csv, js, page = out / "results.csv", out / "results.json", out / "index.html"
    results_frame(results).to_csv(csv, index=False)
    write_text(js, json.dumps({"quick": quick, "cases": [r.to_dict() for r in results]},
                              indent=1, default=str))
    write_text(page, render_page(results, out, quick))
    return [csv, js, page]


def render_page(results: list[CaseResult], out: Path, quick: bool = False) -> str:
    """The HTML page of a validation run."""
    passed = sum(r.passed for r in results)
    head = (f"{passed} of {len(results)} case runs pass"
            + (" (reduced size: --quick)" if quick else ""))
    summary = table_html(
        ["case", "agents", "verdict", "checks passed", "seeds", "size", "seconds"],
        [[r.case, r.agents, r.verdict.upper(),
          f"{sum(c.passed for c in r.checks)} / {len(r.checks)}",
          " ".join(map(str, r.seeds)), r.size, _num(r.seconds, "{:.0f}")] for r in results],
        numeric=[6])
    by_case: dict[str, list[CaseResult]] = {}
    for r in results:
        by_case.setdefault(r.case, []).append(r)
    sections = "\n".join(_case_section(rs, out) for rs in by_case.values())
    return html_page("Shoal validation", f"""<h1>Shoal validation</h1>
<p class="muted">{_e(head)} · written {datetime.now():%Y-%m-%d %H:%M:%S}</p>
<section id="summary"><h2>Summary</h2>
{summary}
</section>
{sections}""")


def _case_section(results: list[CaseResult], out: Path) -> str:
    first = results[0]
    parts = [f'<section id="{_e(first.case)}">',
             f"<h2>{_e(first.title or first.case)}</h2>",
             f'<p class="muted">case <code>{_e(first.case)}</code> · source: '
             f"{_e(first.source)}</p>"]
    for r in results:
        colour = VERDICT_STYLE[r.verdict]
        parts.append(f'<h3>{_e(r.agents)} agents: <span style="color:{colour}">'
                     f"{_e(r.verdict.upper())}</span></h3>")
        parts.append(f'<p class="muted">seeds {_e(" ".join(map(str, r.seeds)) or "—")} · '
                     f"{_e(r.size)}</p>")
        if r.error:
            parts.append(f"<pre>{_e(r.error)}</pre>")
        if r.checks:
            parts.append(table_html(
                ["measure", "simulated", "95% interval", "target", "must hold", "verdict",
                 "note"],
                [[c.measure, _num(c.simulated, "{:.4g}"),
                  "—" if not c.interval else
                  f"{_num(c.interval[0], '{:.4g}')} – {_num(c.interval[1], '{:.4g}')}",
                  _num(c.target, "{:.4g}"), c.tolerance, "pass" if c.passed else "FAIL",
                  c.note] for c in r.checks],
                numeric=[1, 3], text=[0, 4, 6]))
        for note in r.notes:
            parts.append(f'<p class="muted">{_e(note)}</p>')
        for name in r.plots:
            parts.append(_img(out / f"{r.case}-{r.agents}" / name, name))
    parts.append("</section>")
    return "\n".join(parts)


def _img(path: Path, alt: str) -> str:
    if not path.is_file():
        return f'<p class="muted">(plot {_e(alt)} missing)</p>'
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'
