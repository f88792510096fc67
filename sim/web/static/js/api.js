// The one way the pages talk to `shoal serve`: JSON under api/, the bearer token (if any)
// on every call, API errors shown in the banner (never swallowed), and /api/info.

const TOKEN_KEY = "shoal.token";

export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

// The token arrives once in the address (`#token=...`, or `token=` in a route's query),
// is kept in sessionStorage and taken out of the address bar.
export function takeTokenFromHash() {
  const hash = location.hash || "";
  let token = null;
  let rest = hash;
  const bare = hash.match(/^#token=([^&]*)(?:&(.*))?$/);
  if (bare) {
    token = decodeURIComponent(bare[1]);
    rest = bare[2] ? "#" + bare[2] : "#/";
  } else {
    const q = hash.indexOf("?");
    if (q >= 0) {
      const params = new URLSearchParams(hash.slice(q + 1));
      if (params.has("token")) {
        token = params.get("token");
        params.delete("token");
        const qs = params.toString();
        rest = hash.slice(0, q) + (qs ? "?" + qs : "");
      }
    }
  }
  if (token !== null) {
    setToken(token);
    history.replaceState(null, "", location.pathname + location.search + rest);
  }
}

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage refused (private mode): the token lives for this page only */
  }
  memoryToken = token || "";
}

let memoryToken = "";

function token() {
  return getToken() || memoryToken;
}

// ---- the error banner -------------------------------------------------------------------

let onUnauthorized = null;

export function whenUnauthorized(fn) {
  onUnauthorized = fn;
}

export function showError(message) {
  const banner = document.getElementById("banner");
  if (!banner) {
    console.error(message);
    return;
  }
  const list = banner.querySelector("ul");
  // the same message twice (a poll failing again) is shown once, counted
  for (const li of list.children) {
    if (li.dataset.message === message) {
      const n = Number(li.dataset.count || 1) + 1;
      li.dataset.count = String(n);
      li.querySelector(".count").textContent = ` (×${n})`;
      banner.hidden = false;
      return;
    }
  }
  const li = document.createElement("li");
  li.dataset.message = message;
  li.append(document.createTextNode(message));
  const count = document.createElement("span");
  count.className = "count";
  li.append(count);
  list.append(li);
  banner.hidden = false;
}

export function clearErrors() {
  const banner = document.getElementById("banner");
  if (!banner) return;
  banner.querySelector("ul").replaceChildren();
  banner.hidden = true;
}

// ---- calls ------------------------------------------------------------------------------

export function headers(extra = {}) {
  const out = { ...extra };
  const t = token();
  if (t) out.Authorization = `Bearer ${t}`;
  return out;
}

// `path` starts with "/" and is under api/ (e.g. "/runs"). `quiet`: the caller shows the
// error itself (it is still thrown).
export async function api(path, { method = "GET", body, quiet = false } = {}) {
  const init = { method, headers: headers({ Accept: "application/json" }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch("api" + path, init);
  } catch (exc) {
    const err = new ApiError(0, `the server cannot be reached (${exc.message})`, path);
    if (!quiet) showError(`${method} /api${path}: ${err.message}`);
    throw err;
  }
  if (!res.ok) {
    let message = `HTTP ${res.status} ${res.statusText}`;
    try {
      const data = await res.json();
      if (data && typeof data.error === "string") message = data.error;
      else if (data && data.detail) message = JSON.stringify(data.detail);
    } catch {
      /* not JSON: keep the status line */
    }
    const err = new ApiError(res.status, message, path);
    if (res.status === 401 && onUnauthorized) onUnauthorized(message);
    if (!quiet) showError(`${method} /api${path}: ${message}`);
    throw err;
  }
  return res.json();
}

export const get = (path, opts) => api(path, opts);
export const post = (path, body = {}, opts = {}) => api(path, { ...opts, method: "POST", body });

// A query string from a mapping, leaving out null/undefined/"" values.
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "") p.set(k, String(v));
  }
  const s = p.toString();
  return s ? "?" + s : "";
}

export const runPath = (id) => `/runs/${encodeURIComponent(id)}`;

// The URL of the run's event stream (EventSource cannot send headers: ?token=).
export function eventsUrl(runId) {
  const t = token();
  return `api${runPath(runId)}/events` + (t ? `?token=${encodeURIComponent(t)}` : "");
}

// Opens an HTML page of the API (the run report) in a new tab: a plain link without a
// token; with one, fetched with the header and shown from a blob.
export async function openHtml(path) {
  if (!token()) {
    window.open("api" + path, "_blank", "noopener");
    return;
  }
  const tab = window.open("", "_blank");
  try {
    const res = await fetch("api" + path, { headers: headers() });
    if (!res.ok) {
      let message = `HTTP ${res.status}`;
      try {
        message = (await res.json()).error || message;
      } catch {
        /* keep the status */
      }
      throw new Error(message);
    }
    const html = await res.text();
    if (tab) {
      // the blank tab is of this origin: the page is written into it
      tab.document.open();
      tab.document.write(html);
      tab.document.close();
    } else {
      window.open(URL.createObjectURL(new Blob([html], { type: "text/html" })), "_blank");
    }
  } catch (exc) {
    if (tab) tab.close();
    showError(`GET /api${path}: ${exc.message}`);
  }
}

// ---- /api/info ---------------------------------------------------------------------------

export const info = { version: "", folder: "", read_only: false, token: false, loaded: false };

export async function loadInfo() {
  const data = await api("/info");
  Object.assign(info, data, { loaded: true });
  return info;
}
