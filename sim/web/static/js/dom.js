// Small DOM and formatting helpers shared by the pages (no framework).

import { info } from "./api.js";

// h("tag.class#id", {attrs}, ...children): attrs `on` (events), `dataset`, `style`
// (an object), properties (value, checked, disabled, hidden, ...) and plain attributes.
export function h(spec, attrs = null, ...children) {
  const m = spec.match(/^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i);
  const el = document.createElement((m && m[1]) || "div");
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === ".") el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "style") Object.assign(el.style, v);
      else if (k === "class") el.className += (el.className ? " " : "") + v;
      else if (k in PROPS) el[k] = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

const PROPS = { value: 1, checked: 1, disabled: 1, hidden: 1, selected: 1, textContent: 1,
  htmlFor: 1, open: 1 };

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.append(c);
    else el.append(document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// ---- numbers ----------------------------------------------------------------------------

const INT = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

export function fmtInt(v) {
  return v === null || v === undefined || Number.isNaN(v) ? "–" : INT.format(v);
}

export function fmtNum(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(Number(v))) return "–";
  const n = Number(v);
  if (Number.isInteger(n) && Math.abs(n) >= 1) return INT.format(n);
  return n.toLocaleString("en-US", { maximumFractionDigits: digits,
    minimumFractionDigits: Math.abs(n) < 1e-12 ? 0 : Math.min(2, digits) });
}

export function fmtSigned(v, digits = 2) {
  if (v === null || v === undefined || Number.isNaN(Number(v))) return "–";
  const n = Number(v);
  return (n > 0 ? "+" : n < 0 ? "−" : "±") + Math.abs(n).toFixed(digits);
}

export function fmtCost(v) {
  if (v === null || v === undefined) return "–";
  const n = Number(v);
  if (n === 0) return "$0";
  if (n < 0.01) return "$" + n.toPrecision(2);
  return "$" + n.toFixed(2);
}

export function fmtDate(v) {
  if (!v) return "–";
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return String(v);
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// ---- pieces -----------------------------------------------------------------------------

export const STATUSES = ["created", "running", "finished", "stopped", "interrupted", "damaged"];

export function badge(status) {
  const s = String(status || "unknown");
  return h("span.badge", { class: "st-" + s.replace(/[^\w-]/g, ""), title: s }, s);
}

export function verdictBadge(verdict) {
  const v = String(verdict || "unknown");
  return h("span.badge", { class: "v-" + v.replace(/[^\w-]/g, "") }, v);
}

// The link to a route of the app (a hash route), with its query.
export function route(path, params = null) {
  let q = "";
  if (params) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (v !== null && v !== undefined && v !== "") p.set(k, String(v));
    }
    q = p.toString() ? "?" + p.toString() : "";
  }
  return "#" + path + q;
}

export const runRoute = (id, sub = "", params = null) =>
  route(`/run/${encodeURIComponent(id)}${sub}`, params);

export function link(href, ...children) {
  return h("a", { href }, ...children);
}

// Replaces the route's query in the address bar without re-rendering the page.
export function setQuery(params) {
  const hash = location.hash || "#/";
  const q = hash.indexOf("?");
  const base = q >= 0 ? hash.slice(0, q) : hash;
  const p = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : "");
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === "") p.delete(k);
    else p.set(k, String(v));
  }
  const s = p.toString();
  history.replaceState(null, "", location.pathname + location.search + base + (s ? "?" + s : ""));
}

// A control that changes something: hidden and disabled in read-only mode.
export function mutating(el) {
  el.classList.add("mutating");
  if (info.read_only) {
    el.hidden = true;
    for (const c of [el, ...el.querySelectorAll("button, input, textarea, select")]) {
      if ("disabled" in c) c.disabled = true;
    }
  }
  return el;
}

export function section(title, ...children) {
  return h("section.card", null, title ? h("h2", null, title) : null, ...children);
}

export function kvTable(rows) {
  return h("table.kv", null, h("tbody", null, rows
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => h("tr", null, h("th", null, k), h("td", null, v instanceof Node ? v
      : v === null ? "–" : typeof v === "number" && !Number.isInteger(v) ? fmtNum(v, 4)
        : typeof v === "object" ? JSON.stringify(v) : String(v))))));
}

// A table: columns [{label, num?, cell(row) -> node|string}], rows.
export function table(columns, rows, { rowAttrs = null, empty = "none" } = {}) {
  if (!rows.length) return h("p.muted", null, empty);
  return h("table", null,
    h("thead", null, h("tr", null, columns.map((c) =>
      h("th", { class: c.num ? "num" : null }, c.label)))),
    h("tbody", null, rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : null,
      columns.map((c) => {
        const v = c.cell(r);
        return h("td", { class: c.num ? "num" : c.cls || null }, v);
      })))));
}

// Any JSON value as a small table: a list of objects as rows, an object as key/value
// rows, anything nested as compact JSON.
export function jsonTable(value) {
  if (value === null || value === undefined) return h("span.muted", null, "–");
  if (Array.isArray(value)) {
    if (!value.length) return h("span.muted", null, "none");
    if (value.every((v) => v && typeof v === "object" && !Array.isArray(v))) {
      const keys = [...new Set(value.flatMap((v) => Object.keys(v)))];
      return h("table.ev", null,
        h("thead", null, h("tr", null, keys.map((k) => h("th", null, k)))),
        h("tbody", null, value.map((v) => h("tr", null,
          keys.map((k) => h("td", null, scalar(v[k])))))));
    }
    return h("table.ev", null, h("tbody", null,
      value.map((v) => h("tr", null, h("td", null, scalar(v))))));
  }
  if (typeof value === "object") {
    return h("table.ev", null, h("tbody", null, Object.entries(value).map(([k, v]) =>
      h("tr", null, h("th", null, k), h("td", null, scalar(v))))));
  }
  return h("span", null, String(value));
}

function scalar(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return fmtNum(v, 4);
  if (typeof v === "object") return h("code", null, JSON.stringify(v));
  return String(v);
}

// The stance mapping of a post {topic: x} as short text.
export function stanceText(stance) {
  if (stance === null || stance === undefined) return "–";
  if (typeof stance === "number") return fmtSigned(stance);
  const parts = Object.entries(stance).map(([t, x]) => `${t} ${fmtSigned(x)}`);
  return parts.length ? parts.join(", ") : "–";
}

export function debounce(fn, ms) {
  let t = null;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

// A diverging colour for a stance in [-1, 1]: blue (against), grey (0), orange (for).
export function stanceColor(x) {
  if (x === null || x === undefined || Number.isNaN(Number(x))) return "#b8bec4";
  const t = Math.max(-1, Math.min(1, Number(x)));
  const mid = [225, 228, 231];
  const neg = [33, 102, 172];
  const pos = [214, 96, 20];
  const end = t < 0 ? neg : pos;
  const a = Math.abs(t);
  const c = mid.map((m, i) => Math.round(m + (end[i] - m) * a));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
