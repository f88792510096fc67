// The Shoal web app: one page, hash routes, nothing but the JSON API of `shoal serve`.
// Pages live in js/ (one module each); each renders into #app and registers its cleanups (event
// streams, timers, charts) on the route context, run when the route changes.

import { ApiError, clearErrors, info, loadInfo, setToken, showError, takeTokenFromHash,
  whenUnauthorized } from "./js/api.js";
import { clear, h } from "./js/dom.js";
import { renderAgent } from "./js/agent.js";
import { renderAnalysis } from "./js/analysis.js";
import { renderCompare } from "./js/compare.js";
import { renderFork } from "./js/fork.js";
import { renderNetwork } from "./js/network.js";
import { renderRun } from "./js/run.js";
import { renderRuns } from "./js/runs.js";
import { renderStart } from "./js/start.js";

const ROUTES = [
  [/^\/?$/, renderRuns, "runs"],
  [/^\/start$/, renderStart, "start"],
  [/^\/compare$/, renderCompare, "runs"],
  [/^\/run\/([^/]+)$/, renderRun, "runs"],
  [/^\/run\/([^/]+)\/network$/, renderNetwork, "runs"],
  [/^\/run\/([^/]+)\/agent\/([^/]+)$/, renderAgent, "runs"],
  [/^\/run\/([^/]+)\/fork$/, renderFork, "runs"],
  [/^\/run\/([^/]+)\/analysis$/, renderAnalysis, "runs"],
];

let current = null; // the context of the page shown

function parseHash() {
  let hash = location.hash.replace(/^#/, "") || "/";
  if (!hash.startsWith("/")) hash = "/" + hash;
  const q = hash.indexOf("?");
  const path = q >= 0 ? hash.slice(0, q) : hash;
  const query = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : "");
  return { path, query };
}

function newContext() {
  const cleanups = [];
  const ctx = {
    dead: false,
    alive: () => !ctx.dead,
    onCleanup: (fn) => cleanups.push(fn),
    // setInterval that stops with the page
    every: (ms, fn) => {
      const t = setInterval(fn, ms);
      cleanups.push(() => clearInterval(t));
      return t;
    },
    close: () => {
      ctx.dead = true;
      for (const fn of cleanups.splice(0).reverse()) {
        try {
          fn();
        } catch (exc) {
          console.error(exc);
        }
      }
    },
  };
  return ctx;
}

async function show() {
  takeTokenFromHash();
  if (current) current.close();
  clearErrors(); // (a new page: the last page's errors are not its own)
  const ctx = newContext();
  current = ctx;
  const { path, query } = parseHash();
  const root = document.getElementById("app");
  window.scrollTo(0, 0);
  let match = null;
  let render = null;
  let nav = "";
  for (const [re, fn, n] of ROUTES) {
    match = path.match(re);
    if (match) {
      render = fn;
      nav = n;
      break;
    }
  }
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.nav === nav);
  }
  if (!render) {
    clear(root, h("h1", null, "Not found"),
      h("p", null, "No page at ", h("code", null, path), ". ", h("a", { href: "#/" }, "All runs")));
    return;
  }
  const params = match.slice(1).map((s) => decodeURIComponent(s));
  root.dataset.page = nav;
  clear(root, h("p.muted", null, "Loading…"));
  try {
    if (!info.loaded) await boot();
    await render(root, params, query, ctx);
  } catch (exc) {
    if (ctx.dead) return;
    if (!(exc instanceof ApiError)) showError(`page error: ${exc.message || exc}`);
    if (root.textContent === "Loading…") {
      clear(root, h("p.muted", null, "This page could not be shown (see the error above)."));
    }
    if (!(exc instanceof ApiError)) console.error(exc);
  }
}

async function boot() {
  await loadInfo();
  document.body.classList.toggle("read-only", !!info.read_only);
  document.getElementById("token-box").hidden = true;
  const bits = [info.folder && `folder ${info.folder}`, info.version && `shoal ${info.version}`,
    info.read_only && "read-only"].filter(Boolean);
  clear(document.getElementById("server-info"), bits.join(" · "));
  if (info.read_only) {
    for (const el of document.querySelectorAll(".mutating")) el.hidden = true;
  }
}

function setup() {
  document.getElementById("banner-close").addEventListener("click", clearErrors);
  whenUnauthorized(() => {
    document.getElementById("token-box").hidden = false;
  });
  document.getElementById("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    setToken(document.getElementById("token-input").value.trim());
    document.getElementById("token-box").hidden = true;
    clearErrors();
    info.loaded = false;
    show();
  });
  window.addEventListener("hashchange", show);
  window.addEventListener("unhandledrejection", (ev) => {
    if (ev.reason instanceof ApiError) return; // shown by the call already
    showError(`unexpected error: ${ev.reason && ev.reason.message ? ev.reason.message : ev.reason}`);
  });
  show();
}

setup();
