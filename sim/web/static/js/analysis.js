// #/run/{id}/analysis — the run's analyses; ask a new one (polling its job while it
// runs); one analysis's sections with each claim's verdict and its evidence.

import { get, post, runPath, showError } from "./api.js";
import { clear, fmtDate, fmtInt, h, jsonTable, mutating, section, setQuery, table,
  verdictBadge } from "./dom.js";
import { crumbs, loadRun } from "./run.js";

function jobRunning(job) {
  return !!job && (job.running === undefined ? job.returncode === null || job.returncode === undefined
    : job.running);
}

export async function renderAnalysis(root, [runId], query, ctx) {
  const run = await loadRun(root, runId, ctx);
  if (!run || !ctx.alive()) return;
  const base = `${runPath(runId)}/analyses`;
  let selected = query.get("id") || null;

  const listHolder = h("div#analyses");
  const jobHolder = h("div#analysis-job.small");
  const detail = h("div#analysis-detail");
  const detailCard = h("section.card", { hidden: true }, detail);
  const question = h("textarea#analysis-question", { rows: 2,
    placeholder: "e.g. Why did opinion on the carbon tax polarize after round 10?" });
  const startBtn = h("button#analysis-start.primary", { type: "button" }, "Start the analysis");

  let polling = null;
  let myJob = null; // the id of the job this page started

  // The end of the job this page started: a failure is shown with the job's last lines.
  async function reportEnd() {
    if (myJob === null) return;
    const id = myJob;
    myJob = null;
    const job = ((await get("/jobs")).jobs || []).find((j) => j.id === id);
    if (job && job.returncode) {
      showError(`the analysis (job ${id}) failed with exit code ${job.returncode}`);
      clear(jobHolder, h("p.bad", null, `the analysis failed (exit ${job.returncode}):`),
        job.log_tail ? h("pre.log.bad", null, job.log_tail) : null);
    }
  }

  function drawList(data) {
    const rows = data.analyses || [];
    clear(listHolder, table([
      { label: "question", cls: "text", cell: (a) => h("a", { href: "#", on: { click: (ev) => {
        ev.preventDefault();
        select(a.analysis_id);
      } } }, a.question || a.analysis_id) },
      { label: "status", cell: (a) => verdictBadge(a.status) },
      { label: "created", cell: (a) => fmtDate(a.created_at) },
      { label: "claims", num: true, cell: (a) => fmtInt(a.claims) },
      { label: "unverified", num: true, cell: (a) => (a.unverified ? h("span.bad", null,
        fmtInt(a.unverified)) : fmtInt(a.unverified)) },
    ], rows, { empty: "No analysis of this run yet.", rowAttrs: (a) => ({
      class: "analysis-row" + (a.analysis_id === selected ? " selected" : ""),
      dataset: { analysis: a.analysis_id } }) }));
    const job = data.job;
    if (jobRunning(job)) {
      clear(jobHolder, h("p", null, h("span.spinner"), ` an analysis is running`
        + (job.pid ? ` (pid ${job.pid})` : "") + "…"),
      job.log_tail ? h("pre.log", null, job.log_tail) : null);
    } else if (job && job.returncode) {
      clear(jobHolder, h("p.bad", null, `the last analysis job failed (exit ${job.returncode})`),
        job.log_tail ? h("pre.log", null, job.log_tail) : null);
    } else {
      clear(jobHolder);
    }
    return jobRunning(job);
  }

  async function loadList() {
    const data = await get(base);
    if (!ctx.alive()) return false;
    const running = drawList(data);
    if (!selected && (data.analyses || []).length) {
      await select(data.analyses[0].analysis_id, false);
    }
    return running;
  }

  function poll() {
    if (polling) return;
    polling = ctx.every(2000, async () => {
      try {
        const running = await loadList();
        if (!running) {
          clearInterval(polling);
          polling = null;
          await reportEnd();
          if (selected) await select(selected, false);
        }
      } catch {
        /* shown */
      }
    });
  }

  async function select(id, remember = true) {
    selected = id;
    if (remember) setQuery({ id });
    for (const tr of listHolder.querySelectorAll("tr.analysis-row")) {
      tr.classList.toggle("selected", tr.dataset.analysis === id);
    }
    const a = await get(`${base}/${encodeURIComponent(id)}`);
    if (!ctx.alive() || selected !== id) return;
    const claim = (c) => h("li.claim", {
      class: "v-" + String(c.verdict || "unknown").replace(/[^\w-]/g, "") },
    h("div", null, verdictBadge(c.verdict), " ", c.sentence || c.claim),
    h("details.evidence", null, h("summary", null, "evidence"),
      c.detail ? h("p.small", null, c.detail) : null,
      h("div.small", null, h("strong", null, "citations"), jsonTable(c.citations)),
      h("div.small", null, h("strong", null, "evidence"), jsonTable(c.evidence))));
    const sectionEl = (s) => h("section.analysis-section", {
      dataset: { section: String(s.section_id) } },
    h("h3", null, s.title),
    // (the text is the claims' sentences: shown as such when there are claims)
    s.text && !(s.claims || []).length ? h("p.text", null, s.text) : null,
    (s.claims || []).length ? h("ol.claims", null, s.claims.map(claim)) : null);
    detailCard.hidden = false;
    clear(detail, h("h2", null, a.question || a.analysis_id),
      h("p.small.muted", null, `analysis ${a.analysis_id} · `, verdictBadge(a.status)),
      (a.sections || []).map(sectionEl));
  }

  startBtn.addEventListener("click", async () => {
    const q = question.value.trim();
    if (!q) {
      clear(jobHolder, h("p.bad", null, "Write a question first."));
      return;
    }
    const body = { question: q };
    startBtn.disabled = true;
    try {
      const res = await post(base, body);
      myJob = res.job ? res.job.id : null;
      selected = null;
      const running = await loadList();
      if (running || jobRunning(res.job)) poll();
      else await reportEnd();
    } catch {
      /* shown */
    } finally {
      startBtn.disabled = false;
    }
  });

  clear(root,
    crumbs(run, "analysis"),
    h("h1", null, `Analyses of ${run.name || run.run_id}`),
    mutating(section("Ask", question, h("p.small.muted", null, "Runs ",
      h("code", null, "shoal analyse"), " on this run (with the server's --base-url and ",
      "--model when it was given them)."),
    h("div.actions", null, startBtn))),
    section("Analyses", jobHolder, listHolder),
    detailCard);
  const asked = selected; // an analysis named in the address
  if (await loadList()) poll();
  if (asked) await select(asked, false);
}
