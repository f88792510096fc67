// #/ — the runs of the served folder as a lineage tree, filtered, with compare.

import { get, info, qs } from "./api.js";
import { badge, clear, debounce, fmtCost, fmtDate, fmtInt, h, mutating, route, runRoute,
  setQuery, STATUSES } from "./dom.js";

export async function renderRuns(root, params, query, ctx) {
  const state = { q: query.get("q") || "", status: query.get("status") || "", ticked: new Set() };

  const qBox = h("input#runs-q", { type: "search", placeholder: "filter by name or id",
    value: state.q });
  const statusSel = h("select#runs-status", null,
    h("option", { value: "" }, "any status"),
    STATUSES.map((s) => h("option", { value: s, selected: s === state.status }, s)));
  const compareBtn = h("button#compare", { type: "button", disabled: true }, "Compare");
  const count = h("span.muted");
  const holder = h("div#runs-table.card");

  clear(root,
    h("div.page-head", null,
      h("h1", null, "Runs", info.folder ? h("span.sub", null, ` in ${info.folder}`) : null),
      h("div.actions", null, mutating(h("a.button#start-link", { href: "#/start" }, "Start a run")))),
    h("div.toolbar", null, qBox, statusSel, compareBtn,
      h("span.muted.hint", null, "tick two or more runs to compare them"), count),
    holder);

  let rows = [];

  function refreshCompare() {
    compareBtn.disabled = state.ticked.size < 2;
    compareBtn.textContent = state.ticked.size >= 2 ? `Compare ${state.ticked.size} runs`
      : "Compare";
  }

  compareBtn.addEventListener("click", () => {
    const ids = rows.map((r) => r.run_id).filter((id) => state.ticked.has(id));
    location.hash = route("/compare", { runs: ids.join(",") });
  });

  function draw() {
    count.textContent = `${rows.length} run${rows.length === 1 ? "" : "s"}`;
    if (!rows.length) {
      clear(holder, h("p.muted", null, state.q || state.status ? "No run matches."
        : "No runs in this folder yet."));
      return;
    }
    const body = h("tbody", null, rows.map((r) => {
      const tick = h("input", { type: "checkbox", checked: state.ticked.has(r.run_id),
        "aria-label": `select ${r.run_id} for comparing`,
        on: { change: (ev) => {
          if (ev.target.checked) state.ticked.add(r.run_id);
          else state.ticked.delete(r.run_id);
          refreshCompare();
        } } });
      const depth = Number(r.depth || 0);
      const name = h("div.tree", { style: { paddingLeft: `${depth * 22}px` } },
        depth ? h("span.edge", { title: `forked from ${r.parent_run_id}` }, "└ ") : null,
        h("a.run-link", { href: runRoute(r.run_id) }, r.name || r.run_id),
        r.name && r.name !== r.run_id ? h("div.muted.small.id", null, r.run_id) : null,
        r.fork_round !== null && r.fork_round !== undefined
          ? h("div.small.forked", null, `forked at round ${r.fork_round}`
            + (depth ? "" : ` of ${r.parent_run_id}`)) : null);
      const done = Number(r.rounds_done || 0);
      const total = Number(r.rounds || 0);
      const pct = total ? Math.min(100, (100 * done) / total) : 0;
      return h("tr.run-row", { dataset: { run: r.run_id, depth: String(depth) } },
        h("td.tick", null, tick),
        h("td", null, name),
        h("td", null, badge(r.status),
          r.problem ? h("div.small.bad", null, r.problem) : null),
        h("td.num", null, `${fmtInt(done)} / ${fmtInt(total)}`,
          h("div.progress", null, h("span", { style: { width: `${pct}%` } }))),
        h("td.num", null, fmtInt(r.agents)),
        h("td.num", null, r.llm_calls ? fmtInt(r.llm_calls) : "–"),
        h("td.num", null, r.llm_calls || r.cost_usd ? fmtCost(r.cost_usd) : "–"),
        h("td.small", null, fmtDate(r.created_at)));
    }));
    clear(holder, h("table.runs", null,
      h("thead", null, h("tr", null, h("th", null, ""), h("th", null, "run"),
        h("th", null, "status"), h("th.num", null, "rounds"), h("th.num", null, "agents"),
        h("th.num", null, "LLM calls"), h("th.num", null, "LLM cost"),
        h("th", null, "created"))),
      body));
  }

  async function load() {
    const data = await get("/runs" + qs({ q: state.q, status: state.status }));
    if (!ctx.alive()) return;
    rows = data.runs || [];
    const ids = new Set(rows.map((r) => r.run_id));
    for (const id of [...state.ticked]) if (!ids.has(id)) state.ticked.delete(id);
    draw();
    refreshCompare();
  }

  const reload = debounce(() => {
    setQuery({ q: state.q, status: state.status });
    load().catch(() => {});
  }, 250);
  qBox.addEventListener("input", () => {
    state.q = qBox.value.trim();
    reload();
  });
  statusSel.addEventListener("change", () => {
    state.status = statusSel.value;
    reload();
  });

  await load();
  // while something runs, keep the table current
  ctx.every(3000, () => {
    if (rows.some((r) => r.status === "running") && !document.hidden) load().catch(() => {});
  });
}
