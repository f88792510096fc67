// #/run/{id}/network?round=R — the follow graph (cytoscape: colour = stance on a diverging
// scale, size = reach; the sampling rule and totals) and the knowledge graph as of round R
// (entities, relations labelled with their predicate; click a relation for its fact and
// provenance).

import { get, qs, runPath } from "./api.js";
import { clear, debounce, fmtInt, fmtSigned, h, kvTable, runRoute, section, setQuery,
  stanceColor } from "./dom.js";
import { forceLayout } from "./layout.js";
import { crumbs, loadRun } from "./run.js";

let cyLoading = null;

// cytoscape.js is loaded on the first page that needs it (a plain script: window.cytoscape).
export function loadCytoscape() {
  if (window.cytoscape) return Promise.resolve(window.cytoscape);
  if (!cyLoading) {
    cyLoading = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = "static/vendor/cytoscape.min.js";
      s.onload = () => resolve(window.cytoscape);
      s.onerror = () => {
        cyLoading = null;
        reject(new Error("could not load static/vendor/cytoscape.min.js"));
      };
      document.head.append(s);
    });
  }
  return cyLoading;
}

const TYPE_COLORS = ["#2271b1", "#00a32a", "#dba617", "#8c5fbf", "#d63638", "#1e8cbe",
  "#b26200", "#72777c"];

export async function renderNetwork(root, [runId], query, ctx) {
  const run = await loadRun(root, runId, ctx);
  if (!run || !ctx.alive()) return;
  const last = Number(run.rounds_done || 0);
  const state = {
    round: query.has("round") ? Number(query.get("round")) : last,
    topic: query.get("topic") || (run.topics || [])[0] || "",
    maxNodes: Number(query.get("max_nodes") || 2000),
    withdrawn: query.get("withdrawn") === "1",
    platform: query.get("platform") || (run.platforms || [])[0] || "",
  };
  const cys = [];
  ctx.onCleanup(() => cys.forEach((c) => c.destroy()));

  const roundIn = h("input#net-round", { type: "number", min: 0, max: last, step: 1,
    value: state.round });
  const roundSlider = h("input#net-round-slider", { type: "range", min: 0, max: last, step: 1,
    value: state.round });
  const topicSel = h("select#net-topic", null, (run.topics || []).map((t) =>
    h("option", { value: t, selected: t === state.topic }, t)));
  // (follows are per platform: the API's `platform` parameter, its first by default)
  const platformSel = h("select#net-platform", null, (run.platforms || []).map((p) =>
    h("option", { value: p, selected: p === state.platform }, p)));
  const maxIn = h("input#net-max-nodes", { type: "number", min: 10, max: 20000, step: 10,
    value: state.maxNodes });
  const followInfo = h("div#follow-info.small");
  const followBox = h("div#follow-graph.graph");
  const nodeInfo = h("div#node-info.small.muted", null, "Click a node for its agent.");
  const withdrawnBox = h("input#show-withdrawn", { type: "checkbox", checked: state.withdrawn });
  const kgInfo = h("div#knowledge-info.small");
  const kgBox = h("div#knowledge-graph.graph");
  const relInfo = h("div#relation-detail.small.muted", null,
    "Click a relation for its fact and provenance.");

  clear(root,
    crumbs(run, "network"),
    h("h1", null, `Network of ${run.name || run.run_id}`),
    h("div.toolbar", null,
      h("label", null, "Round ", roundSlider), roundIn,
      h("label", null, "Stance on ", topicSel),
      (run.platforms || []).length > 1 ? h("label", null, "Follows on ", platformSel) : null,
      h("label", null, "at most ", maxIn, " nodes")),
    section("Follow graph", followInfo,
      h("div.legend", null, h("span", null, "stance: "), h("span.scale"),
        h("span.small.muted", null, " −1 (against) … 0 … +1 (for); size: reach")),
      h("div.graph-wrap", null, followBox, nodeInfo)),
    section("Knowledge graph", run.graph
      ? [h("div.toolbar", null, h("label", null, withdrawnBox, " show withdrawn relations")),
        kgInfo, h("div.graph-wrap", null, kgBox, relInfo)]
      : h("p.muted", null, "This run keeps no knowledge graph (memory.graph is off).")));

  const cytoscape = await loadCytoscape();
  if (!ctx.alive()) return;
  let followCy = null;
  let kgCy = null;

  function nodeStance(n) {
    const s = n.stance;
    if (s && typeof s === "object") return s[state.topic];
    return s;
  }

  async function loadFollow() {
    const round = state.round;
    clear(followInfo, h("span.muted", null, "loading…"));
    const g = await get(`${runPath(runId)}/network` + qs({ round, max_nodes: state.maxNodes,
      topic: state.topic, platform: state.platform }));
    if (!ctx.alive() || round !== state.round) return;
    const nodes = g.nodes || [];
    const ids = new Set(nodes.map((n) => String(n.id)));
    const edges = (g.edges || []).filter(([a, b]) => ids.has(String(a)) && ids.has(String(b)));
    const maxReach = Math.max(1, ...nodes.map((n) => Number(n.reach) || 0));
    clear(followInfo,
      h("p", null, g.rule || ""),
      h("p.muted", null, `round ${g.round}${g.platform ? ` on ${g.platform}` : ""}: showing `
        + `${fmtInt(nodes.length)} of `
        + `${fmtInt(g.total_nodes)} agents and ${fmtInt(edges.length)} of `
        + `${fmtInt(g.total_edges)} follows${g.sampled ? " (sampled)" : ""}.`));
    const pos = forceLayout(nodes.map((n) => String(n.id)), edges);
    const elements = [
      ...nodes.map((n) => ({ data: { id: String(n.id), label: n.username || String(n.id),
        color: stanceColor(nodeStance(n)),
        size: 5 + 25 * Math.sqrt((Number(n.reach) || 0) / maxReach), raw: n },
      position: { ...pos[String(n.id)] } })),
      ...edges.map(([a, b], i) => ({ data: { id: `e${i}`, source: String(a),
        target: String(b) } })),
    ];
    if (followCy) followCy.destroy();
    const big = nodes.length > 900;
    followCy = cytoscape({
      container: followBox,
      elements,
      minZoom: 0.02,
      maxZoom: 6,
      hideEdgesOnViewport: big,
      textureOnViewport: big,
      style: [
        { selector: "node", style: { "background-color": "data(color)", width: "data(size)",
          height: "data(size)", "border-width": 0.5, "border-color": "#50575e" } },
        { selector: "node:selected", style: { "border-width": 3, "border-color": "#1d2327",
          label: "data(label)", "font-size": 11 } },
        { selector: "edge", style: { width: 0.5, "line-color": "#c3c8cd", opacity: 0.6,
          "curve-style": "haystack" } },
      ],
      // positions from forceLayout (cose is far too slow at a thousand nodes)
      layout: { name: "preset", fit: true, padding: 16 },
    });
    followBox.dataset.nodes = String(nodes.length);
    cys.push(followCy);
    followCy.on("tap", "node", (ev) => {
      const n = ev.target.data("raw");
      clear(nodeInfo, kvTable([
        ["agent", h("a", { href: runRoute(runId, `/agent/${encodeURIComponent(n.id)}`,
          { round: state.round }) }, `${n.id}${n.username ? " @" + n.username : ""}`)],
        ["group", n.group ?? "–"],
        [`stance (${state.topic})`, fmtSigned(nodeStance(n))],
        ["reach", fmtInt(n.reach)],
        ["follows / followers shown", `${ev.target.outgoers("edge").length} / `
          + `${ev.target.incomers("edge").length}`],
      ]));
      nodeInfo.classList.remove("muted");
    });
  }

  async function loadKnowledge() {
    if (!run.graph) return;
    const round = state.round;
    const kg = await get(`${runPath(runId)}/knowledge` + qs({ round,
      withdrawn: state.withdrawn ? 1 : 0 }));
    if (!ctx.alive() || round !== state.round) return;
    const entities = kg.entities || [];
    const ids = new Set(entities.map((e) => String(e.entity_id)));
    const rels = (kg.relations || []).filter((r) =>
      ids.has(String(r.subject)) && ids.has(String(r.object)));
    const types = [...new Set(entities.map((e) => e.type || "?"))];
    const byId = new Map(entities.map((e) => [String(e.entity_id), e]));
    const maxDeg = Math.max(1, ...entities.map((e) => Number(e.degree) || 0));
    clear(kgInfo, h("p.muted", null, `round ${kg.round}: ${fmtInt(entities.length)} entities, `
      + `${fmtInt(rels.length)} relations`
      + (state.withdrawn ? ` (${rels.filter((r) => r.withdrawn).length} withdrawn)` : "")),
    h("div.legend", null, types.map((t, i) => h("span.chip", { style: {
      borderColor: TYPE_COLORS[i % TYPE_COLORS.length] } }, t))));
    if (kgCy) kgCy.destroy();
    kgCy = null;
    kgBox.hidden = !entities.length;
    relInfo.hidden = !entities.length;
    if (!entities.length) {
      kgInfo.append(h("p.muted", null, `No entity in the graph memory as of round ${kg.round}.`));
      return;
    }
    const kgPos = entities.length <= 150 ? null : forceLayout(
      entities.map((e) => String(e.entity_id)),
      rels.map((r) => [String(r.subject), String(r.object)]));
    kgCy = cytoscape({
      container: kgBox,
      elements: [
        ...entities.map((e) => ({ data: { id: String(e.entity_id), label: e.name,
          color: TYPE_COLORS[types.indexOf(e.type || "?") % TYPE_COLORS.length],
          size: 14 + 26 * Math.sqrt((Number(e.degree) || 0) / maxDeg), raw: e } })),
        ...rels.map((r) => ({ data: { id: `r${r.relation_id}`, source: String(r.subject),
          target: String(r.object), label: r.predicate, raw: r },
        classes: r.withdrawn ? "withdrawn" : "" })),
      ],
      style: [
        { selector: "node", style: { "background-color": "data(color)", width: "data(size)",
          height: "data(size)", label: "data(label)", "font-size": 10, color: "#1d2327",
          "text-valign": "bottom", "text-margin-y": 2, "min-zoomed-font-size": 8 } },
        { selector: "edge", style: { width: 1.4, "line-color": "#8c959f",
          "target-arrow-color": "#8c959f", "target-arrow-shape": "triangle",
          "curve-style": "bezier", label: "data(label)", "font-size": 9, color: "#50575e",
          "text-rotation": "autorotate", "text-background-color": "#fff",
          "text-background-opacity": 0.8, "text-background-padding": 1,
          "min-zoomed-font-size": 8 } },
        { selector: "edge.withdrawn", style: { "line-style": "dashed", "line-color": "#d63638",
          "target-arrow-color": "#d63638", opacity: 0.7 } },
        { selector: "edge:selected", style: { width: 3, "line-color": "#2271b1",
          "target-arrow-color": "#2271b1" } },
      ],
      layout: entities.length <= 150
        ? { name: "cose", animate: false, randomize: true, numIter: 800,
          nodeRepulsion: () => 9000, idealEdgeLength: () => 90 }
        : { name: "preset", fit: true, padding: 16, positions: (node) => kgPos[node.id()] },
    });
    cys.push(kgCy);
    kgCy.on("tap", "edge", (ev) => {
      const r = ev.target.data("raw");
      const name = (id) => (byId.get(String(id)) || {}).name || String(id);
      clear(relInfo, h("p.fact", null, r.fact || "–"), kvTable([
        ["relation", `${name(r.subject)} — ${r.predicate} → ${name(r.object)}`],
        ["source", `${r.source_type ?? "–"} ${r.source_id ?? ""}`],
        ["episode", r.episode_id ?? "–"],
        ["valid from round", r.valid_from ?? "–"],
        ["withdrawn", r.withdrawn ? "yes" : "no"],
        ...(r.withdrawn ? [
          ["withdrawn at round", r.invalid_at ?? "–"],
          ["withdrawn by", r.invalidated_by ?? "–"],
          ["why", r.reason || "–"],
        ] : []),
        ["relation id", r.relation_id],
      ]));
      relInfo.classList.remove("muted");
    });
    kgCy.on("tap", "node", (ev) => {
      const e = ev.target.data("raw");
      clear(relInfo, h("p.fact", null, e.name), kvTable([["type", e.type], ["summary", e.summary],
        ["degree", e.degree], ["entity id", e.entity_id]]));
      relInfo.classList.remove("muted");
    });
  }

  const reload = debounce(() => {
    setQuery({ round: state.round, topic: state.topic, platform: state.platform,
      max_nodes: state.maxNodes === 2000 ? null : state.maxNodes });
    loadFollow().catch(() => {});
    loadKnowledge().catch(() => {});
  }, 300);
  const setRound = (v) => {
    const r = Math.max(0, Math.min(last, Math.round(Number(v) || 0)));
    state.round = r;
    roundIn.value = String(r);
    roundSlider.value = String(r);
    reload();
  };
  roundIn.addEventListener("change", () => setRound(roundIn.value));
  roundSlider.addEventListener("input", () => setRound(roundSlider.value));
  platformSel.addEventListener("change", () => {
    state.platform = platformSel.value;
    reload();
  });
  topicSel.addEventListener("change", () => {
    state.topic = topicSel.value;
    reload();
  });
  maxIn.addEventListener("change", () => {
    state.maxNodes = Math.max(10, Number(maxIn.value) || 2000);
    reload();
  });
  withdrawnBox.addEventListener("change", () => {
    state.withdrawn = withdrawnBox.checked;
    setQuery({ withdrawn: state.withdrawn ? 1 : null });
    loadKnowledge().catch(() => {});
  });

  await Promise.all([loadFollow(), loadKnowledge()]);
}
