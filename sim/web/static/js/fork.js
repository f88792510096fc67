// #/run/{id}/fork?round=k — the fork plan editor: the round, `--set` fields, the pending
// interventions (drop / move), interventions to add (JSON), seed, name, run it; submitted
// as POST fork, then the new run's page.

import { get, info, post, qs, runPath } from "./api.js";
import { clear, debounce, h, runRoute, section, setQuery, table } from "./dom.js";
import { crumbs, loadRun } from "./run.js";

// The plan's parts from the form's text (exported for reuse): `sets` one per line (blank
// lines and # comments left out); `add` a JSON object or a list of them.
export function parseSets(text) {
  return text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
}

export function parseAdd(text) {
  const t = text.trim();
  if (!t) return [];
  let v;
  try {
    v = JSON.parse(t);
  } catch (exc) {
    throw new Error(`intervention (JSON): not valid JSON: ${exc.message}`);
  }
  const list = Array.isArray(v) ? v : [v];
  for (const [i, item] of list.entries()) {
    if (!item || typeof item !== "object" || Array.isArray(item)) {
      throw new Error(`intervention (JSON): entry ${i} is not a mapping like `
        + `{"kind": "event", "round": 5, "text": "..."}`);
    }
  }
  return list;
}

export async function renderFork(root, [runId], query, ctx) {
  const run = await loadRun(root, runId, ctx);
  if (!run || !ctx.alive()) return;
  const last = Number(run.rounds_done || 0);
  const start = query.has("round") ? Number(query.get("round")) : last;

  const roundIn = h("input#fork-round", { type: "number", min: 0, max: last, step: 1,
    value: start, required: true });
  const setsIn = h("textarea#fork-sets", { rows: 4, spellcheck: false,
    placeholder: "policy.post_rate=0.3\nbeliefs.update={rule: bounded_confidence}" });
  const addIn = h("textarea#fork-add", { rows: 5, spellcheck: false,
    placeholder: '{"kind": "event", "round": 8, "text": "BREAKING: the levy is delayed"}' });
  const seedIn = h("input#fork-seed", { type: "number", step: 1, placeholder: "the parent's" });
  const nameIn = h("input#fork-name", { type: "text", placeholder: run.name || "the parent's" });
  const runBox = h("input#fork-run", { type: "checkbox", checked: true });
  const submit = h("button#fork-submit.primary", { type: "submit" }, "Create the fork");
  const result = h("div#fork-result");
  const pendingHolder = h("div#fork-pending");
  let pending = [];

  async function loadSchedule() {
    const k = Number(roundIn.value);
    if (!Number.isInteger(k) || k < 0 || k > last) {
      clear(pendingHolder, h("p.bad", null, `The round must be a whole number in 0–${last}.`));
      return;
    }
    const res = await get(`${runPath(runId)}/schedule` + qs({ round: k }));
    if (!ctx.alive() || k !== Number(roundIn.value)) return;
    pending = res.pending || [];
    clear(pendingHolder, table([
      { label: "drop", cell: (p) => h("input.drop-iv", { type: "checkbox",
        dataset: { ref: p.ref }, "aria-label": `drop ${p.ref}` }) },
      { label: "intervention", cell: (p) => [h("code", null, p.name || `index ${p.index}`),
        p.line ? h("span.small.muted", null, ` line ${p.line}`) : null] },
      { label: "kind", cell: (p) => p.kind },
      { label: "round", num: true, cell: (p) => p.round },
      { label: "move to round", cell: (p) => h("input.move-iv", { type: "number", min: k + 1,
        step: 1, placeholder: String(p.round), dataset: { ref: p.ref, round: String(p.round) } }) },
    ], pending, { empty: `No intervention is scheduled after round ${k}.`,
      rowAttrs: (p) => ({ dataset: { ref: p.ref }, class: "pending-row" }) }));
  }

  const reloadSchedule = debounce(() => {
    setQuery({ round: roundIn.value });
    loadSchedule().catch(() => {});
  }, 250);
  roundIn.addEventListener("input", reloadSchedule);

  const form = h("form#fork-form", { on: { submit: async (ev) => {
    ev.preventDefault();
    clear(result);
    let add;
    try {
      add = parseAdd(addIn.value);
    } catch (exc) {
      clear(result, h("p.bad", null, exc.message));
      return;
    }
    const drop = [...pendingHolder.querySelectorAll("input.drop-iv:checked")]
      .map((el) => el.dataset.ref);
    const move = [];
    for (const el of pendingHolder.querySelectorAll("input.move-iv")) {
      if (el.value === "" || drop.includes(el.dataset.ref)) continue;
      if (Number(el.value) === Number(el.dataset.round)) continue;
      move.push({ ref: el.dataset.ref, round: Number(el.value) });
    }
    const body = {
      round: Number(roundIn.value),
      sets: parseSets(setsIn.value),
      seed: seedIn.value === "" ? null : Number(seedIn.value),
      drop,
      move,
      add,
      name: nameIn.value.trim() || null,
      run: runBox.checked,
    };
    submit.disabled = true;
    clear(result, h("span.muted", null, "creating the fork…"));
    try {
      const res = await post(`${runPath(runId)}/fork`, body);
      clear(result, h("p.ok", null, `fork ${res.run_id} created`));
      location.hash = runRoute(res.run_id);
    } catch (exc) {
      clear(result, h("p.bad#fork-error", null, exc.message));
    } finally {
      submit.disabled = false;
    }
  } } },
  h("div.form-grid", null,
    h("label", { for: "fork-round" }, "Fork from the end of round"),
    h("div", null, roundIn, h("span.small.muted", null, ` (0–${last}; the parent's rows up to `
      + "it are shared, its later rounds are simulated again)")),
    h("label", { for: "fork-sets" }, "--set fields"),
    h("div", null, setsIn, h("div.small.muted", null, "one field=value per line, as with ",
      h("code", null, "shoal fork --set"))),
    h("label", null, "Pending interventions"),
    h("div", null, pendingHolder),
    h("label", { for: "fork-add" }, "intervention (JSON)"),
    h("div", null, addIn, h("div.small.muted", null, "a JSON object, or a list of them, ",
      "each an intervention mapping as in the YAML config (added after the fork round)")),
    h("label", { for: "fork-seed" }, "seed"),
    h("div", null, seedIn),
    h("label", { for: "fork-name" }, "name"),
    h("div", null, nameIn),
    h("label", { for: "fork-run" }, "run it"),
    h("div", null, h("label", null, runBox, " start the fork's rounds now"))),
  h("div.actions", null, submit), result);

  clear(root,
    crumbs(run, "fork"),
    h("h1", null, `Fork ${run.name || run.run_id}`),
    info.read_only ? h("p.bad", null, "This server is read-only: forks cannot be made here.")
      : section(null, form),
    section("The parent's configuration", h("details", null, h("summary", null, "show"),
      h("pre", null, run.config_yaml || ""))));
  await loadSchedule();
}
