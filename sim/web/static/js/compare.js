// #/compare?runs=a,b — where runs diverge (measure, first round, max abs difference), and
// their belief means and polarization per topic overlaid, one line per run.

import { get, qs } from "./api.js";
import { ChartSet, color } from "./charts.js";
import { clear, fmtNum, h, runRoute, section, table } from "./dom.js";
import { safeId } from "./run.js";

// Each run's values on the union of all rounds (null where a run has no such round).
export function align(seriesByRun, pick) {
  const all = new Set();
  for (const s of Object.values(seriesByRun)) for (const r of s.rounds || []) all.add(r);
  const x = [...all].sort((a, b) => a - b);
  const at = new Map(x.map((r, i) => [r, i]));
  const lines = {};
  for (const [run, s] of Object.entries(seriesByRun)) {
    const vals = new Array(x.length).fill(null);
    const src = pick(s) || [];
    (s.rounds || []).forEach((r, i) => {
      vals[at.get(r)] = src[i] ?? null;
    });
    lines[run] = vals;
  }
  return { x, lines };
}

export async function renderCompare(root, params, query, ctx) {
  const ids = (query.get("runs") || "").split(",").map((s) => s.trim()).filter(Boolean);
  if (ids.length < 2) {
    clear(root, h("h1", null, "Compare runs"),
      h("p", null, "Pick two or more runs on the ", h("a", { href: "#/" }, "runs page"),
        " (tick them, then Compare)."));
    return;
  }
  const data = await get("/compare" + qs({ runs: ids.join(",") }));
  if (!ctx.alive()) return;
  const charts = new ChartSet();
  ctx.onCleanup(() => charts.destroy());
  const runs = data.runs || ids;
  const series = data.series || {};
  const label = (r) => (r === data.base ? `${r} (base)` : r);
  const marks = [];
  const seenMarks = new Set();
  for (const s of Object.values(series)) {
    for (const m of s.marks || []) {
      const k = `${m.round}|${m.kind}|${m.label}`;
      if (!seenMarks.has(k)) {
        seenMarks.add(k);
        marks.push(m);
      }
    }
  }
  const topics = [...new Set(Object.values(series).flatMap((s) => Object.keys(s.beliefs || {})))];
  const grid = h("div.grid#compare-charts");

  clear(root,
    h("div.crumbs", null, h("a", { href: "#/" }, "Runs"), " › compare"),
    h("h1", null, "Compare runs"),
    h("ul.runs-compared", null, runs.map((r, i) => h("li", null,
      h("span.swatch", { style: { background: color(i) } }), " ",
      h("a", { href: runRoute(r) }, r), r === data.base ? h("span.muted", null, " (base)") : null))),
    section("Divergence", h("p.small.muted", null, "Per run against the base: the first round ",
      "where a measure differs, and its largest absolute difference."),
    table([
      { label: "run", cell: (d) => h("a", { href: runRoute(d.run) }, d.run) },
      { label: "measure", cell: (d) => d.measure },
      { label: "first round", num: true, cell: (d) => d.first_round ?? "never" },
      { label: "max abs", num: true, cell: (d) => fmtNum(d.max_abs, 4) },
    ], data.divergence || [], { empty: "No divergence: the runs agree on every measure.",
      rowAttrs: () => ({ class: "divergence-row" }) })),
    section("Belief means and polarization", grid));

  for (const topic of topics) {
    for (const [what, pick, y] of [
      ["mean", (s) => ((s.beliefs || {})[topic] || {}).mean, [-1, 1]],
      ["polarization", (s) => (s.polarization || {})[topic], "from0"],
    ]) {
      const { x, lines } = align(series, pick);
      charts.show(`chart-compare-${what}-${safeId(topic)}`, grid, {
        title: `${what === "mean" ? "Belief mean" : "Polarization"}: ${topic}`, x, y, marks,
        series: runs.map((r, i) => ({ label: label(r), values: lines[r] || [], color: color(i),
          width: r === data.base ? 2.2 : 1.6 })),
      });
    }
  }
}
