// #/run/{id}/agent/{n}?round=R — one agent: profile, belief and trust trajectories, its
// posts and engagements, the exact context it got at round R (per platform), its memory,
// its interviews, and a box to interview it.

import { get, post, qs, runPath } from "./api.js";
import { ChartSet } from "./charts.js";
import { clear, debounce, fmtInt, h, kvTable, mutating, runRoute, section, setQuery,
  stanceText, table } from "./dom.js";
import { crumbs, loadRun, marksOfRun, safeId } from "./run.js";

const SHOW = 100; // rows of a long list shown before "show all"

function longTable(columns, rows, opts = {}) {
  const holder = h("div");
  const draw = (all) => {
    clear(holder, table(columns, all ? rows : rows.slice(0, SHOW), opts),
      !all && rows.length > SHOW ? h("button", { type: "button", on: { click: () => draw(true) } },
        `Show all ${fmtInt(rows.length)}`) : null);
  };
  draw(false);
  return holder;
}

export async function renderAgent(root, [runId, agentId], query, ctx) {
  const charts = new ChartSet();
  ctx.onCleanup(() => charts.destroy());
  const run = await loadRun(root, runId, ctx);
  if (!run || !ctx.alive()) return;
  const data = await get(`${runPath(runId)}/agents/${encodeURIComponent(agentId)}`);
  if (!ctx.alive()) return;
  const agentPath = `${runPath(runId)}/agents/${encodeURIComponent(agentId)}`;
  const last = Number(run.rounds_done || 0);
  const state = { round: Math.max(1, query.has("round") ? Number(query.get("round")) : last),
    tab: 0 };
  const a = data.agent || {};
  const marks = marksOfRun(run);

  const name = a.name || "";
  const heading = h("h1#agent-title", null, `Agent ${agentId}`,
    a.username ? ` @${a.username}` : "", name ? h("span.sub", null, ` ${name}`) : null);

  // ---- profile -----------------------------------------------------------------------------
  const profile = kvTable(Object.entries(a).map(([k, v]) => [k, v]));

  // ---- charts ------------------------------------------------------------------------------
  const beliefGrid = h("div.grid#agent-beliefs");
  const trustGrid = h("div#agent-trust");

  // ---- context ------------------------------------------------------------------------------
  // contexts are built for rounds 1.. (round 0 is the initial state)
  const roundIn = h("input#agent-round", { type: "number", min: 1, max: Math.max(1, last),
    step: 1, value: state.round });
  const roundSlider = h("input#agent-round-slider", { type: "range", min: 1,
    max: Math.max(1, last), step: 1, value: state.round });
  const tabs = h("div.tabs#context-tabs", { role: "tablist" });
  const ctxMeta = h("div.small.muted#context-meta");
  const ctxPre = h("pre#context", null, "");

  async function loadContext() {
    const round = state.round;
    const res = await get(`${agentPath}/context` + qs({ round }));
    if (!ctx.alive() || round !== state.round) return;
    const contexts = res.contexts || [];
    if (state.tab >= contexts.length) state.tab = 0;
    const drawTab = () => {
      for (const [i, b] of [...tabs.children].entries()) {
        b.classList.toggle("active", i === state.tab);
        b.setAttribute("aria-selected", String(i === state.tab));
      }
      const c = contexts[state.tab];
      if (!c) {
        clear(ctxMeta, `No context was kept for agent ${agentId} at round ${round} `
          + "(inactive that round, or contexts are not kept for it: memory.context.build_for).");
        ctxPre.textContent = "";
        return;
      }
      clear(ctxMeta, `${c.platform} · round ${res.round} · `,
        c.acted ? "acted" : "did not act", ` · ${fmtInt(c.tokens)} tokens`,
        c.budget ? ` of a budget of ${fmtInt(c.budget)}` : "",
        c.run_id && c.run_id !== runId ? ` · from run ${c.run_id}` : "");
      ctxPre.textContent = c.text || "";
    };
    ctxPre.dataset.round = String(round); // (loaded: for tests and scripts)
    clear(tabs, contexts.map((c, i) => h("button.tab", { type: "button", role: "tab",
      dataset: { platform: c.platform },
      on: { click: () => {
        state.tab = i;
        drawTab();
      } } }, c.platform)));
    drawTab();
  }

  const reloadContext = debounce(() => {
    setQuery({ round: state.round });
    loadContext().catch(() => {});
  }, 200);
  const setRound = (v) => {
    state.round = Math.max(1, Math.min(Math.max(1, last), Math.round(Number(v) || 1)));
    roundIn.value = String(state.round);
    roundSlider.value = String(state.round);
    reloadContext();
  };
  roundIn.addEventListener("change", () => setRound(roundIn.value));
  roundSlider.addEventListener("input", () => setRound(roundSlider.value));

  // ---- interview ------------------------------------------------------------------------------
  const question = h("textarea#interview-question", { rows: 2,
    placeholder: "Ask this agent a question (it answers in character, as of the round below)" });
  const askRound = h("input#interview-round", { type: "number", min: 0, max: last, step: 1,
    placeholder: "latest" });
  const askBtn = h("button#interview-ask", { type: "button" }, "Ask");
  const answer = h("div#interview-answer");
  const interviewsHolder = h("div#interviews");
  let interviews = [...(data.interviews || [])];

  function drawInterviews() {
    clear(interviewsHolder, table([
      { label: "round", num: true, cell: (r) => r.round },
      { label: "question", cls: "text", cell: (r) => r.question },
      { label: "answer", cls: "text", cell: (r) => r.answer },
      { label: "status", cell: (r) => r.status },
    ], interviews, { empty: "No interviews yet." }));
  }

  askBtn.addEventListener("click", async () => {
    const q = question.value.trim();
    if (!q) {
      clear(answer, h("span.bad", null, "Write a question first."));
      return;
    }
    const body = { question: q };
    if (askRound.value !== "") body.round = Number(askRound.value);
    askBtn.disabled = true;
    clear(answer, h("span.muted", null, "asking…"));
    try {
      const res = await post(`${agentPath}/interview`, body);
      clear(answer, h("p.answer", null, res.answer || "–"),
        res.error ? h("p.bad", null, res.error) : null,
        h("div.small.muted", null, `status ${res.status} · round ${res.round}`
          + (res.batch_id ? ` · batch ${res.batch_id}` : "")));
      interviews = [{ round: res.round, question: q, answer: res.answer, status: res.status },
        ...interviews];
      drawInterviews();
    } catch (exc) {
      clear(answer, h("span.bad", null, exc.message));
    } finally {
      askBtn.disabled = false;
    }
  });

  // ---- lists ----------------------------------------------------------------------------------
  const postHref = (r) => runRoute(runId, "", { round: r.round });
  const posts = longTable([
    { label: "round", num: true, cell: (p) => h("a", { href: postHref(p) }, p.round) },
    { label: "platform", cell: (p) => p.platform + (p.kind && p.kind !== "post" ? ` (${p.kind})` : "") },
    { label: "stance", cell: (p) => stanceText(p.stance) },
    { label: "likes / dislikes", num: true, cell: (p) => `${fmtInt(p.likes)} / ${fmtInt(p.dislikes)}` },
    { label: "reach", num: true, cell: (p) => fmtInt(p.reach) },
    { label: "text", cls: "text", cell: (p) => p.text },
  ], data.posts || [], { empty: "No posts.", rowAttrs: (p) => ({ class: "agent-post",
    dataset: { post: String(p.post_id) } }) });
  const agentLink = (id) => (id === null || id === undefined ? "–"
    : h("a", { href: runRoute(runId, `/agent/${encodeURIComponent(id)}`, { round: state.round }) },
      String(id)));
  const engaged = longTable([
    { label: "round", num: true, cell: (e) => e.round },
    { label: "action", cell: (e) => e.action },
    { label: "post", num: true, cell: (e) => e.target_post ?? "–" },
    { label: "agent", num: true, cell: (e) => agentLink(e.target_agent) },
    { label: "status", cell: (e) => e.status },
  ], data.engaged || [], { empty: "Nothing engaged with." });
  const memory = longTable([
    { label: "round", num: true, cell: (m) => m.round },
    { label: "kind", cell: (m) => m.kind },
    { label: "level", num: true, cell: (m) => m.level },
    { label: "text", cls: "text", cell: (m) => m.text },
  ], data.memory || [], { empty: "No memory." });

  clear(root,
    crumbs(run, `agent ${agentId}`),
    heading,
    h("div.two", null,
      section("Profile", profile),
      section("Trust", h("p.small.muted", null, "Mean trust this agent gives, and gets."),
        trustGrid)),
    section("Beliefs", h("p.small.muted", null, "Position (left axis, −1…+1) and confidence ",
      "(right axis, 0…1) per topic."), beliefGrid),
    section("Context", h("div.toolbar", null, h("label", null, "Round ", roundSlider), roundIn),
      h("p.small.muted", null, "The exact text the agent was given at that round."),
      tabs, ctxMeta, ctxPre),
    mutating(section("Interview", question, h("div.toolbar", null,
      h("label", null, "as of round ", askRound), askBtn), answer)),
    section("Interviews", interviewsHolder),
    section(`Posts (${fmtInt((data.posts || []).length)})`, posts),
    section(`Engaged with (${fmtInt((data.engaged || []).length)})`, engaged),
    section(`Memory (${fmtInt((data.memory || []).length)})`, memory));
  drawInterviews();

  for (const [topic, b] of Object.entries(data.beliefs || {})) {
    charts.show(`chart-agent-belief-${safeId(topic)}`, beliefGrid, {
      title: topic, x: b.rounds || [], y: [-1, 1], marks, sync: "agent",
      y2: { label: "confidence", range: [0, 1] },
      series: [
        { label: "position", values: b.position || [], color: "#2271b1", width: 2 },
        { label: "confidence", values: b.confidence || [], color: "#dba617", scale: "y2",
          dash: [5, 3] },
      ],
    });
  }
  const t = data.trust || {};
  charts.show("chart-agent-trust", trustGrid, {
    title: "Trust", x: t.rounds || [], marks, sync: "agent", height: 200,
    series: [
      { label: "given (mean)", values: t.given_mean || [], color: "#00a32a", spanGaps: true },
      { label: "received (mean)", values: t.received_mean || [], color: "#8c5fbf",
        spanGaps: true },
    ],
  });
  await loadContext();
}
