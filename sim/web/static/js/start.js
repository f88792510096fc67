// #/start — pick a config of the folder or paste YAML; Check (POST check: the message names
// the field path and line); Start (POST start), then the run's page once its id is known.

import { get, info, post } from "./api.js";
import { clear, h, runRoute, section } from "./dom.js";
import { parseSets } from "./fork.js";

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

export async function renderStart(root, params, query, ctx) {
  if (info.read_only) {
    clear(root, h("h1", null, "Start a run"),
      h("p.bad", null, "This server is read-only: runs cannot be started here."));
    return;
  }
  const data = await get("/configs");
  if (!ctx.alive()) return;
  const configs = data.configs || [];
  const wanted = query.get("path");

  const useFile = h("input#start-use-file", { type: "radio", name: "source", value: "file",
    checked: configs.length > 0 });
  const useYaml = h("input#start-use-yaml", { type: "radio", name: "source", value: "yaml",
    checked: configs.length === 0 });
  const pathSel = h("select#start-config", null, configs.map((c) =>
    h("option", { value: c.path, selected: c.path === wanted }, c.path)));
  const yamlIn = h("textarea#start-yaml", { rows: 14, spellcheck: false,
    placeholder: "name: my-run\nseed: 1\nrounds: 20\npopulation:\n  size: 300\n..." });
  const setsIn = h("textarea#start-sets", { rows: 3, spellcheck: false,
    placeholder: "rounds=40\npopulation.size=300" });
  const checkBtn = h("button#check", { type: "button" }, "Check");
  const startBtn = h("button#start.primary", { type: "button" }, "Start");
  const checkResult = h("div#check-result", { "aria-live": "polite" });
  const startResult = h("div#start-result", { "aria-live": "polite" });

  pathSel.addEventListener("change", () => {
    useFile.checked = true;
  });
  yamlIn.addEventListener("input", () => {
    if (yamlIn.value.trim()) useYaml.checked = true;
  });

  function source() {
    if (useYaml.checked) {
      if (!yamlIn.value.trim()) throw new Error("Paste a YAML config first.");
      return { yaml: yamlIn.value };
    }
    if (!pathSel.value) throw new Error("This folder has no config file: paste YAML.");
    return { path: pathSel.value };
  }

  checkBtn.addEventListener("click", async () => {
    let src;
    try {
      src = source();
    } catch (exc) {
      clear(checkResult, h("p.bad", null, exc.message));
      return;
    }
    checkBtn.disabled = true;
    clear(checkResult, h("span.muted", null, "checking…"));
    try {
      const res = await post("/check", { ...src, sets: parseSets(setsIn.value) },
        { quiet: true });
      if (res.ok) {
        clear(checkResult, h("p.ok", null, "The config is valid."),
          res.resolved_yaml ? h("details", null, h("summary", null, "resolved configuration"),
            h("pre", null, res.resolved_yaml)) : null);
      } else {
        clear(checkResult, h("pre.bad.check-error", null, res.error || "invalid"));
      }
    } catch (exc) {
      clear(checkResult, h("pre.bad.check-error", null, exc.message));
    } finally {
      checkBtn.disabled = false;
    }
  });

  startBtn.addEventListener("click", async () => {
    let src;
    try {
      src = source();
    } catch (exc) {
      clear(startResult, h("p.bad", null, exc.message));
      return;
    }
    startBtn.disabled = true;
    clear(startResult, h("span.muted", null, "starting…"));
    try {
      const res = await post("/start", { ...src, sets: parseSets(setsIn.value) });
      let runId = res.run_id || (res.job && res.job.run_id) || null;
      const jobId = res.job && res.job.id;
      // the run's id is known once its job has made the run directory
      const until = Date.now() + 60000;
      while (!runId && jobId !== undefined && jobId !== null && Date.now() < until) {
        await sleep(400);
        if (!ctx.alive()) return;
        const jobs = (await get("/jobs")).jobs || [];
        const job = jobs.find((j) => j.id === jobId);
        if (!job) break;
        if (job.run_id) runId = job.run_id;
        else if (!job.running) {
          clear(startResult, h("p.bad", null, `the run's job ended (exit ${job.returncode}) `
            + "before making its run"), job.log_tail ? h("pre.log", null, job.log_tail) : null);
          return;
        }
        clear(startResult, h("span.muted", null, `started (job ${jobId}), waiting for its run…`));
      }
      if (!runId) {
        clear(startResult, h("p.bad", null, "The run started but its id is not known yet: "
          + "see the runs page."));
        return;
      }
      if (ctx.alive()) location.hash = runRoute(runId);
    } catch (exc) {
      clear(startResult, h("pre.bad.check-error", null, exc.message));
    } finally {
      startBtn.disabled = false;
    }
  });

  clear(root,
    h("div.crumbs", null, h("a", { href: "#/" }, "Runs"), " › start"),
    h("h1", null, "Start a run"),
    section(null,
      h("div.form-grid", null,
        h("label", null, useFile, " a config file"),
        h("div", null, configs.length ? pathSel
          : h("span.muted", null, "no config file in this folder")),
        h("label", null, useYaml, " pasted YAML"),
        h("div", null, yamlIn),
        h("label", { for: "start-sets" }, "--set fields"),
        h("div", null, setsIn, h("div.small.muted", null, "one field=value per line, as with ",
          h("code", null, "shoal run --set"), ""))),
      h("div.actions", null, checkBtn, startBtn),
      checkResult, startResult));
}
