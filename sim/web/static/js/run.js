// #/run/{id} — one run: header and controls, the time charts of GET series (redrawn on
// each `round` event of the run's event stream), the fired interventions and the top
// posts of a chosen round.

import { ApiError, eventsUrl, get, openHtml, post, qs, runPath, showError } from "./api.js";
import { anyValue, beliefSpec, ChartSet, linesOf } from "./charts.js";
import { badge, clear, debounce, fmtInt, h, mutating, runRoute, section, setQuery,
  stanceText } from "./dom.js";

export const safeId = (s) => String(s).replace(/[^\w-]/g, "_");

// The marks of a run from its details (for pages that do not fetch its series).
export function marksOfRun(run) {
  const marks = (run.interventions || []).map((iv) => ({
    round: iv.round, kind: "intervention",
    label: (iv.spec && (iv.spec.name || iv.spec.kind)) || iv.kind || "intervention",
  }));
  if (run.fork_round !== null && run.fork_round !== undefined && run.parent_run_id) {
    marks.push({ round: run.fork_round, kind: "fork", label: `fork @${run.fork_round}` });
  }
  return marks;
}

// "Runs › run" (and further steps) above a page about a run.
export function crumbs(run, ...more) {
  return h("div.crumbs", null, h("a", { href: "#/" }, "Runs"), " › ",
    h("a", { href: runRoute(run.run_id) }, run.name || run.run_id),
    more.map((m) => [" › ", m]));
}

// GET a run's details; while the run cannot be read (409: a process writes it without a
// live mirror) the page says so and asks again every 2 s. null once the page is left.
export async function loadRun(root, runId, ctx) {
  for (;;) {
    try {
      return await get(runPath(runId), { quiet: true });
    } catch (exc) {
      if (!(exc instanceof ApiError) || exc.status !== 409) {
        showError(`GET /api${runPath(runId)}: ${exc.message}`);
        throw exc;
      }
      clear(root, h("div.crumbs", null, h("a", { href: "#/" }, "Runs"), " › ", runId),
        h("h1", null, runId),
        h("p.notice#run-unreadable", null, exc.message,
          h("br"), h("span.muted", null, "This page loads as soon as the run can be read "
            + "(asking again every 2 seconds).")));
      await new Promise((r) => setTimeout(r, 2000));
      if (!ctx.alive()) return null;
    }
  }
}

export async function renderRun(root, [runId], query, ctx) {
  const charts = new ChartSet();
  ctx.onCleanup(() => charts.destroy());

  let run = await loadRun(root, runId, ctx);
  if (!run || !ctx.alive()) return;
  let series = null;
  const state = { round: query.has("round") ? Number(query.get("round")) : null,
    follow: !query.has("round"), platform: query.get("platform") || "", offset: 0 };

  // ---- header ---------------------------------------------------------------------------
  const title = h("h1#run-title");
  const statusEl = h("span#run-status");
  const roundsEl = h("span#run-rounds");
  const metaEl = h("div.meta");
  const note = h("span#run-note.muted");
  const stopBtn = mutating(h("button#stop", { type: "button" }, "Stop"));
  const resumeBtn = mutating(h("button#resume", { type: "button" }, "Resume"));
  const forkLink = mutating(h("a.button#fork-link", { href: "#" }, "Fork…"));
  const actions = h("div.actions", null, stopBtn, resumeBtn, forkLink,
    h("a.button#analysis-link", { href: runRoute(runId, "/analysis") }, "Analysis"),
    h("a.button#network-link", { href: runRoute(runId, "/network") }, "Network"),
    h("a.button#report-link", { href: `api${runPath(runId)}/report`, target: "_blank",
      rel: "noopener", on: { click: (ev) => {
        ev.preventDefault();
        openHtml(`${runPath(runId)}/report`);
      } } }, "Report"));

  function drawHeader() {
    clear(title, run.name || run.run_id, " ", statusEl);
    clear(statusEl, badge(run.status), run.live ? h("span.badge.live", null, "live") : null);
    clear(roundsEl, `round ${fmtInt(run.rounds_done)} of ${fmtInt(run.rounds)}`);
    const lineage = (run.lineage || []).filter((l) => l.run_id !== run.run_id);
    clear(metaEl,
      h("code.small", null, run.run_id), " · ", roundsEl, " · ",
      `${fmtInt(run.agents)} agents`, " · ",
      `topics: ${(run.topics || []).join(", ") || "–"}`, " · ",
      `platforms: ${(run.platforms || []).join(", ") || "–"}`,
      run.parent_run_id ? [" · forked from ",
        h("a", { href: runRoute(run.parent_run_id) }, run.parent_run_id),
        ` at round ${run.fork_round}`] : null,
      lineage.length > 1 ? [" · lineage: ", lineage.map((l, i) => [i ? " → " : "",
        h("a", { href: runRoute(l.run_id) }, l.run_id), ` (to ${l.last_round})`])] : null,
      run.job ? ` · job: ${run.job.kind} (pid ${run.job.pid})` : null);
    const running = run.live || run.status === "running";
    stopBtn.hidden = !running;
    resumeBtn.hidden = running || !["stopped", "interrupted"].includes(run.status);
    forkLink.href = runRoute(runId, "/fork", { round: run.rounds_done });
    forkLink.hidden = false;
    if (document.body.classList.contains("read-only")) {
      stopBtn.hidden = resumeBtn.hidden = forkLink.hidden = true;
    }
  }

  stopBtn.addEventListener("click", async () => {
    stopBtn.disabled = true;
    try {
      const res = await post(`${runPath(runId)}/stop`);
      note.textContent = res.message || "stopping after the running round";
    } catch {
      /* shown in the banner */
    } finally {
      stopBtn.disabled = false;
    }
    refreshRun();
  });
  resumeBtn.addEventListener("click", async () => {
    resumeBtn.disabled = true;
    try {
      const res = await post(`${runPath(runId)}/resume`);
      note.textContent = `resumed${res.job && res.job.pid ? ` (pid ${res.job.pid})` : ""}`;
    } catch {
      /* shown in the banner */
    } finally {
      resumeBtn.disabled = false;
    }
    refreshRun();
  });

  // ---- charts -----------------------------------------------------------------------------
  const beliefGrid = h("div.grid#beliefs");
  const dynGrid = h("div.grid#dynamics");
  const actGrid = h("div.grid#activity");
  const priceGrid = h("div.grid#prices");
  const llmGrid = h("div.grid#llm");
  const pricesSec = section("Market prices", priceGrid);
  const llmSec = section("LLM calls, tokens and cost", llmGrid);
  pricesSec.hidden = true;
  llmSec.hidden = true;
  const ivHolder = h("div#interventions");
  const echoNote = h("span#echo-readers");

  function drawCharts() {
    const s = series;
    echoNote.textContent = `${s.echo_readers || "all readers"}.`;
    const x = s.rounds || [];
    const marks = s.marks || [];
    for (const topic of Object.keys(s.beliefs || {})) {
      charts.show(`chart-beliefs-${safeId(topic)}`, beliefGrid,
        beliefSpec(topic, x, s.beliefs[topic], marks));
    }
    const topics = [...new Set([...Object.keys(s.polarization || {}),
      ...Object.keys(s.echo || {})])];
    for (const topic of topics) {
      charts.show(`chart-dynamics-${safeId(topic)}`, dynGrid, {
        title: `Polarization and echo: ${topic}`, x, marks, y: [0, 1], yLabel: "echo share",
        y2: { label: "polarization" },
        series: [
          { label: "echo share", values: (s.echo || {})[topic] || [], color: "#2271b1" },
          { label: "polarization (Esteban–Ray)", values: (s.polarization || {})[topic] || [],
            color: "#d63638", scale: "y2" },
        ],
      });
    }
    const a = s.activity || {};
    charts.show("chart-activity", actGrid, {
      title: "Activity", x, marks,
      series: [
        { label: "actions", values: a.n_actions || [], color: "#2271b1" },
        { label: "rejected", values: a.n_rejected || [], color: "#d63638" },
        { label: "posts", values: a.n_posts || [], color: "#00a32a" },
        { label: "active agents", values: a.n_active || [], color: "#72777c", dash: [4, 3] },
      ],
    });
    charts.show("chart-actions", actGrid, { title: "Actions per kind", x, marks,
      series: linesOf(s.actions) });
    const rej = s.rejections || {};
    if (Object.keys(rej).length) {
      charts.show("chart-rejections", actGrid, { title: "Rejections per reason", x, marks,
        series: linesOf(rej) });
    }
    const prices = s.prices || {};
    const priced = Object.keys(prices).filter((k) => (prices[k] || []).some((v) => v !== null));
    if (priced.length) {
      pricesSec.hidden = false;
      charts.show("chart-prices", priceGrid, { title: "Prices", x, marks, y: [0, 1],
        series: linesOf(prices, { only: priced }) });
    }
    const llm = s.llm || {};
    if (anyValue(llm.calls) || anyValue(llm.failed) || anyValue(llm.cost_usd)) {
      llmSec.hidden = false;
      charts.show("chart-llm-calls", llmGrid, { title: "LLM calls", x, marks, series: [
        { label: "calls", values: llm.calls || [], color: "#2271b1" },
        { label: "failed", values: llm.failed || [], color: "#d63638" }] });
      charts.show("chart-llm-tokens", llmGrid, { title: "LLM tokens", x, marks, series: [
        { label: "prompt", values: llm.prompt_tokens || [], color: "#2271b1" },
        { label: "completion", values: llm.completion_tokens || [], color: "#00a32a" }] });
      charts.show("chart-llm-cost", llmGrid, { title: "LLM cost (USD)", x, marks, series: [
        { label: "cost", values: llm.cost_usd || [], color: "#8c5fbf" }] });
    }
  }

  function drawInterventions() {
    const ivs = run.interventions || [];
    clear(ivHolder, ivs.length ? h("table", null,
      h("thead", null, h("tr", null, h("th.num", null, "round"), h("th", null, "kind"),
        h("th", null, "spec"))),
      h("tbody", null, ivs.map((iv) => h("tr", null, h("td.num", null, iv.round),
        h("td", null, iv.kind), h("td", null, h("code.small", null, JSON.stringify(iv.spec)))))))
      : h("p.muted", null, "No intervention has fired."));
  }

  // ---- top posts -----------------------------------------------------------------------------
  const slider = h("input#post-round", { type: "range", min: 0, max: 0, step: 1, value: 0 });
  const roundLabel = h("output#post-round-label");
  const platformSel = h("select#post-platform", null, h("option", { value: "" }, "all platforms"),
    (run.platforms || []).map((p) => h("option", { value: p, selected: p === state.platform }, p)));
  const postsHolder = h("div#posts");
  const moreBtn = h("button#posts-more", { type: "button", hidden: true }, "More posts");
  let postsTotal = 0;

  function roundsRange() {
    const x = (series && series.rounds) || [];
    return x.length ? [x[0], x[x.length - 1]] : [0, Number(run.rounds_done || 0)];
  }

  function syncSlider() {
    const [lo, hi] = roundsRange();
    slider.min = String(lo);
    slider.max = String(hi);
    if (state.round === null || state.follow) state.round = hi;
    state.round = Math.max(lo, Math.min(hi, state.round));
    slider.value = String(state.round);
    roundLabel.textContent = `round ${state.round}` + (state.follow ? " (latest)" : "");
  }

  function postRow(p) {
    const agentHref = runRoute(runId, `/agent/${encodeURIComponent(p.author)}`,
      { round: state.round });
    return h("tr.post-row", { dataset: { author: String(p.author), post: String(p.post_id) },
      title: "open the author's page", on: { click: (ev) => {
        if (ev.target.closest("a")) return;
        location.hash = agentHref;
      } } },
    h("td", null, h("a.author", { href: agentHref }, p.username ? `@${p.username}` : `#${p.author}`),
      h("div.muted.small", null, `agent ${p.author}`)),
    h("td.small", null, p.platform, p.kind && p.kind !== "post" ? h("div.muted", null, p.kind) : null),
    h("td.small.nowrap", null, stanceText(p.stance)),
    h("td.num", null, `${fmtInt(p.likes)} / ${fmtInt(p.dislikes)}`),
    h("td.num", null, fmtInt(p.reach)),
    h("td.text", null, p.text));
  }

  async function loadPosts(append = false) {
    const round = state.round;
    const offset = append ? state.offset : 0;
    const data = await get(`${runPath(runId)}/posts` + qs({ round, limit: 20, offset,
      platform: state.platform }));
    if (!ctx.alive() || round !== state.round) return;
    postsTotal = data.total || 0;
    const rows = (data.posts || []).map(postRow);
    let body = postsHolder.querySelector("tbody");
    if (!append || !body) {
      if (!rows.length) {
        clear(postsHolder, h("p.muted", null, `No post in round ${round}.`));
      } else {
        body = h("tbody");
        clear(postsHolder, h("p.muted.small", null, `${fmtInt(postsTotal)} posts in round ${round}, by reach`),
          h("table.posts", null, h("thead", null, h("tr", null, h("th", null, "author"),
            h("th", null, "platform"), h("th", null, "stance"), h("th.num", null, "likes / dislikes"),
            h("th.num", null, "reach"), h("th", null, "text"))), body));
      }
    }
    if (body) body.append(...rows);
    state.offset = offset + (data.posts || []).length;
    moreBtn.hidden = state.offset >= postsTotal;
  }

  const postsSoon = debounce(() => loadPosts().catch(() => {}), 200);
  slider.addEventListener("input", () => {
    state.round = Number(slider.value);
    state.follow = state.round === roundsRange()[1] && run.status === "running";
    roundLabel.textContent = `round ${state.round}`;
    setQuery({ round: state.follow ? null : state.round });
    postsSoon();
  });
  platformSel.addEventListener("change", () => {
    state.platform = platformSel.value;
    setQuery({ platform: state.platform });
    loadPosts().catch(() => {});
  });
  moreBtn.addEventListener("click", () => loadPosts(true).catch(() => {}));

  // ---- page -------------------------------------------------------------------------------
  clear(root,
    crumbs(run),
    h("div.page-head", null, h("div", null, title, metaEl, note), actions),
    section("Beliefs", h("p.muted.small", null, "Per topic: the median (dark line), the mean ",
      "(red, dashed), q25–q75 (dark band) and q05–q95 (light band). Dashed verticals: ",
      "interventions (red) and the fork point (purple)."), beliefGrid),
    section("Polarization and echo chambers", h("p.muted.small", null,
      "Esteban–Ray polarization (5 bins) and the echo share: of the posts readers were ",
      "shown, the share whose author held the reader's side at the round before. Measured on ",
      echoNote), dynGrid),
    section("Activity", actGrid),
    pricesSec,
    llmSec,
    section("Interventions fired", ivHolder),
    section("Top posts", h("div.toolbar", null, h("label", null, "Round ", slider), roundLabel,
      platformSel), postsHolder, moreBtn),
    section("Configuration", h("details", null, h("summary", null, "the resolved configuration"),
      h("pre#config-yaml", null, run.config_yaml || ""))));
  drawHeader();
  drawInterventions();

  // ---- data and live updates -----------------------------------------------------------------
  let seen = { rounds_done: run.rounds_done, status: run.status };
  let busy = false;
  let again = false;

  async function refreshSeries() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        const s = await get(`${runPath(runId)}/series`);
        if (!ctx.alive()) return;
        series = s;
        drawCharts();
        const before = state.round;
        syncSlider();
        if (state.round !== before || !postsHolder.firstChild || state.follow) {
          await loadPosts().catch(() => {});
        }
      } while (again && ctx.alive());
    } finally {
      busy = false;
    }
  }

  async function refreshRun() {
    try {
      const r = await get(runPath(runId));
      if (!ctx.alive()) return;
      const changed = r.status !== run.status || r.rounds_done !== run.rounds_done;
      run = r;
      drawHeader();
      drawInterventions();
      if (changed) await refreshSeries();
    } catch {
      /* shown */
    }
  }

  await refreshSeries();

  let lastEvent = Date.now();
  const onEvent = (ev) => {
    lastEvent = Date.now();
    let data;
    try {
      data = JSON.parse(ev.data);
    } catch {
      return;
    }
    if (data.rounds_done === seen.rounds_done && data.status === seen.status) return;
    const statusChanged = data.status !== seen.status;
    seen = { rounds_done: data.rounds_done, status: data.status };
    run.rounds_done = data.rounds_done;
    if (data.status) run.status = data.status;
    drawHeader();
    refreshSeries().catch(() => {});
    if (statusChanged) refreshRun();
  };
  if (typeof EventSource !== "undefined") {
    const es = new EventSource(eventsUrl(runId));
    es.addEventListener("hello", onEvent);
    es.addEventListener("round", onEvent);
    ctx.onCleanup(() => es.close());
  } else {
    showError("this browser has no EventSource: the page updates every 5 seconds instead");
  }
  // a safety net when the stream is down: while running, look every 5 s
  ctx.every(5000, () => {
    if (document.hidden) return;
    if ((run.status === "running" || run.live) && Date.now() - lastEvent > 5000) refreshRun();
  });
}
