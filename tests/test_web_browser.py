"""The browser app of `shoal serve`, driven in Debian's Chromium by Playwright: every page
renders without an error, a running run's belief chart gains rounds while it is watched,
a post opens its author's page, and the fork editor makes the fork `shoal fork` makes.

Playwright (the pip package) drives the system's `chromium` (never a downloaded browser);
without either the browser tests skip, saying why. Screenshots of every page go to
build/test-artifacts/web/ (the test run's artifacts); with SHOAL_WRITE_SCREENSHOTS=1 the
runs page and the page of the running run are also copied to docs/img/web-runs.png and
docs/img/web-run.png."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import CONFIGS, ROOT
from tests.helpers import run_cli, tables_differ

STATIC = ROOT / "sim" / "web" / "static"
PARENT_ROUNDS = 6
SMALL = ["--set", "population.size=150"]


# ------------------------------------------------------------------ without a browser


def test_the_app_loads_nothing_from_the_network():
    """index.html and every script and stylesheet name only files of the package; each
    vendored library has its licence and a line in vendor/README.md."""
    texts = {p: p.read_text(encoding="utf-8") for p in
             [STATIC / "index.html", STATIC / "app.js", STATIC / "app.css",
              *sorted((STATIC / "js").glob("*.js"))]}
    for path, text in texts.items():
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), path
        assert not re.search(r"""(import|fetch|EventSource)\s*\(?\s*["'](https?:)?//""",
                             text), path
    for ref in re.findall(r"""(?:src|href)="(static/[^"]+)\"""",
                          texts[STATIC / "index.html"]):
        assert (STATIC.parent / ref).is_file(), ref
    for js in (STATIC / "js").glob("*.js"):
        for mod in re.findall(r"""from "\./([\w.-]+)\"""", js.read_text(encoding="utf-8")):
            assert (STATIC / "js" / mod).is_file(), f"{js.name} imports a missing {mod}"
    readme = (STATIC / "vendor" / "README.md").read_text(encoding="utf-8")
    for lib, files in {"uPlot": ["uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"],
                       "cytoscape": ["cytoscape.min.js", "cytoscape.LICENSE"]}.items():
        for name in files:
            assert (STATIC / "vendor" / name).is_file(), name
        assert "MIT" in (STATIC / "vendor" / f"{lib}.LICENSE").read_text(encoding="utf-8")
        assert files[0] in readme


# ------------------------------------------------------------------ fixtures


def _need_browser() -> str:
    """The Chromium to drive, or a skip saying what is missing."""
    pytest.importorskip("playwright.sync_api",
                        reason="the browser tests need the pip package playwright")
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("no `chromium` on PATH (Debian's package chromium): the browser tests "
                    "drive the system browser and never download one")
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiError(Exception):
    """An error answer of the API (its status and message)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Server:
    """`shoal serve FOLDER` on a free loopback port, in its own process."""

    def __init__(self, folder: Path, log: Path):
        self.folder = folder
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shoal.cli", "serve", str(folder), "--host", "127.0.0.1",
             "--port", str(self.port)], cwd=folder.parent, stdout=log.open("w"),
            stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"})
        deadline = time.monotonic() + 90
        while True:
            try:
                self.get("/api/info")
                return
            except (OSError, urllib.error.URLError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("shoal serve did not come up:\n"
                                       + log.read_text()) from None
                time.sleep(0.2)

    def _call(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="GET" if body is None
                                     else "POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return json.loads(res.read())
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, f"{req.method} {path}: HTTP {exc.code}: "
                                     f"{exc.read().decode(errors='replace')}") from None

    def get(self, path: str) -> dict:
        return self._call(path)

    def post(self, path: str, body: dict) -> dict:
        return self._call(path, body)

    def wait_run(self, run_id: str, status: tuple[str, ...] = ("finished",),
                 timeout: float = 180) -> dict:
        """The run's details once its status is one of `status` (its job, if any, done
        writing)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                run = self.get(f"/api/runs/{run_id}")
            except ApiError as exc:  # 409: written by a process without a live mirror
                if exc.status != 409:
                    raise
                run = {"status": "being written"}
            if run["status"] in status and not run["live"] and run["job"] is None:
                return run
            assert time.monotonic() < deadline, f"{run_id} is still {run['status']}"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # (it stops the runs it started, too)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def chromium_path() -> str:
    return _need_browser()


@pytest.fixture(scope="module")
def served(tmp_path_factory, chromium_path):
    """A folder with one finished small quick-start run, served; (server, parent run id)."""
    base = tmp_path_factory.mktemp("web")
    folder = base / "runs"
    made = run_cli(["run", str(CONFIGS / "quickstart.yaml"), "--out", str(folder), "--quiet",
                    "--set", f"rounds={PARENT_ROUNDS}", *SMALL])
    assert made.returncode == 0, made.stderr
    (parent,) = [p.name for p in folder.iterdir() if (p / "run.json").is_file()]
    server = Server(folder, base / "serve.log")
    yield server, parent
    server.stop()


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A 1280x800 page; the test fails on any uncaught script error in it, and on
    anything the server's content security policy blocked."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda m: m.type == "error" and "Content Security Policy" in m.text
          and errors.append(m.text))
    pg.set_default_timeout(30_000)
    yield pg
    context.close()
    assert not errors, f"script errors in the page: {errors}"


@pytest.fixture(scope="module")
def shots() -> Path:
    """The screenshots of every page: kept as the test run's artifacts, in
    build/test-artifacts/web/ (build/ is not committed)."""
    folder = ROOT / "build" / "test-artifacts" / "web"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# the screenshots docs/web.md shows: the runs page, and the run page of a running run
DOCS_SHOTS = {"runs": "web-runs.png", "run-live": "web-run.png"}


def _shot(page, shots: Path, name: str) -> None:
    """A screenshot of the page (the docs' copy only when SHOAL_WRITE_SCREENSHOTS=1)."""
    path = shots / f"web-{name}.png"
    page.screenshot(path=str(path))
    if os.environ.get("SHOAL_WRITE_SCREENSHOTS") == "1" and name in DOCS_SHOTS:
        (ROOT / "docs" / "img").mkdir(exist_ok=True)
        shutil.copyfile(path, ROOT / "docs" / "img" / DOCS_SHOTS[name])


def _open(page, server: Server, route: str, ready: str) -> None:
    """Go to a route of the app and wait until `ready` (a selector) is shown, with no
    error in the banner."""
    page.goto(f"{server.url}/#{route}")
    page.wait_for_selector(ready, state="visible")
    page.wait_for_load_state("networkidle")
    banner = page.locator("#banner")
    assert not banner.is_visible(), banner.inner_text()


# ------------------------------------------------------------------ the pages


@pytest.mark.slow
def test_every_page_renders(served, page, shots):
    """Each route shows its content with no error banner and no script error."""
    server, parent = served
    _open(page, server, "/", f'tr.run-row[data-run="{parent}"]')
    assert page.locator("tr.run-row").count() >= 1
    _shot(page, shots, "runs")
    _open(page, server, f"/run/{parent}", "#chart-beliefs-carbon_tax canvas")
    assert page.locator("#chart-beliefs-carbon_tax").get_attribute("data-rounds") == \
        str(len(server.get(f"/api/runs/{parent}/series")["rounds"]))
    assert page.locator("#fork-link").is_visible()
    assert page.locator("#stop").is_hidden()  # (finished: nothing to stop or resume)
    assert page.locator("#resume").is_hidden()
    _shot(page, shots, "run")
    _open(page, server, f"/run/{parent}/network?round=3", "#follow-graph canvas")
    assert "all 150 agents" in page.locator("#follow-info").inner_text()
    _shot(page, shots, "network")
    _open(page, server, f"/run/{parent}/agent/3?round=2", '#context[data-round="2"]')
    assert page.locator("#context").inner_text().strip() != "" or \
        "No context" in page.locator("#context-meta").inner_text()
    assert "Agent 3" in page.locator("#agent-title").inner_text()
    _shot(page, shots, "agent")
    _open(page, server, f"/run/{parent}/fork?round=2", "#fork-submit")
    assert page.locator("#fork-round").input_value() == "2"
    _shot(page, shots, "fork")
    _open(page, server, f"/run/{parent}/analysis", "#analyses")
    _shot(page, shots, "analysis")
    _open(page, server, "/start", "#check")
    page.locator("#start-use-yaml").check()
    page.locator("#start-yaml").fill("rounds: 3\npopulation: {size: -3}\n")
    page.locator("#check").click()
    message = page.locator("#check-result .check-error")
    message.wait_for()
    assert "population.size" in message.inner_text()
    assert "line" in message.inner_text() or "pasted.yaml" in message.inner_text()
    _shot(page, shots, "start")
    _open(page, server, f"/compare?runs={parent},{parent}", "#compare-charts canvas")
    _shot(page, shots, "compare")


@pytest.mark.slow
def test_a_running_runs_belief_chart_gains_rounds_while_watched(served, page, shots):
    """A run started through the API (long enough to be running while the page is open):
    its page's belief chart gains rounds as they are committed; the stop button stops it
    and the resume button appears."""
    server, _ = served
    started = server.post("/api/start", {
        "yaml": (CONFIGS / "quickstart.yaml").read_text(),
        "sets": ["rounds=2000", "population.size=300", "name=live"]})
    run_id = started["run_id"] or started["job"]["run_id"]
    assert run_id, started
    page.goto(f"{server.url}/#/run/{run_id}")
    chart = page.locator("#chart-beliefs-carbon_tax")
    chart.locator("canvas").wait_for()
    first = int(chart.get_attribute("data-rounds"))
    # the chart must gain a round while we watch, with nothing but the page's own updates
    page.wait_for_function(
        "n => Number(document.querySelector('#chart-beliefs-carbon_tax').dataset.rounds) > n",
        arg=first, timeout=30_000)
    second = int(chart.get_attribute("data-rounds"))
    page.wait_for_function(
        "n => Number(document.querySelector('#chart-beliefs-carbon_tax').dataset.rounds) > n",
        arg=second, timeout=30_000)
    # every round the API can serve reaches the chart by the page's own updates (how soon
    # is for bench/web.py to measure: a test on a shared machine holds no clock to it)
    for _ in range(3):
        n = len(server.get(f"/api/runs/{run_id}/series")["rounds"])
        page.wait_for_function(
            "n => Number(document.querySelector('#chart-beliefs-carbon_tax').dataset.rounds)"
            " >= n", arg=n, timeout=30_000)
    assert server.get(f"/api/runs/{run_id}")["status"] == "running"
    _shot(page, shots, "run-live")
    page.locator("#stop").click()
    # (a run stopped between rounds can be resumed: "stopped" or "interrupted")
    server.wait_run(run_id, ("stopped", "interrupted"), timeout=120)
    page.locator("#resume").wait_for(state="visible", timeout=30_000)
    assert page.locator("#stop").is_hidden()
    done = server.get(f"/api/runs/{run_id}")["rounds_done"]
    assert done < 2000
    # the last committed round is drawn
    page.wait_for_function(
        "n => Number(document.querySelector('#chart-beliefs-carbon_tax').dataset.rounds) >= n",
        arg=len(server.get(f"/api/runs/{run_id}/series")["rounds"]), timeout=10_000)


@pytest.mark.slow
def test_clicking_a_post_opens_its_authors_page(served, page):
    server, parent = served
    _open(page, server, f"/run/{parent}?round=3", ".post-row")
    row = page.locator(".post-row").first
    author = row.get_attribute("data-author")
    row.locator("td.text").click()
    page.wait_for_url(re.compile(rf"#/run/{re.escape(parent)}/agent/{author}\?round=3$"))
    page.locator("#agent-title").wait_for()
    assert author in page.locator("#agent-title").inner_text()
    assert author in page.url


@pytest.mark.slow
def test_the_fork_editor_makes_the_fork_shoal_fork_makes(served, page, tmp_path):
    """Fork a finished run at round 2 with one --set through the page (run it), and with
    `shoal fork` the same plan into another folder: every table is the same."""
    server, parent = served
    _open(page, server, f"/run/{parent}/fork?round=2", "#fork-submit")
    page.locator("#fork-round").fill("2")
    page.locator("#fork-sets").fill("policy.post_rate=0.6")
    assert page.locator("#fork-run").is_checked()
    page.locator("#fork-submit").click()
    page.wait_for_url(re.compile(r"#/run/[^/?]+$"))
    fork_id = page.url.rsplit("#/run/", 1)[1]
    assert fork_id != parent
    run = server.wait_run(fork_id)
    assert (run["parent_run_id"], run["fork_round"]) == (parent, 2)
    # (the page shows the fork once it can read it)
    page.locator("#chart-beliefs-carbon_tax[data-rounds]").wait_for()
    assert page.locator("#chart-beliefs-carbon_tax").get_attribute("data-rounds") == \
        str(PARENT_ROUNDS + 1)  # (rounds 0..6: the parent's to round 2, then the fork's)
    cli = run_cli(["fork", str(server.folder / parent), "--round", "2", "--set",
                   "policy.post_rate=0.6", "--out", str(tmp_path), "--quiet"])
    assert cli.returncode == 0, cli.stderr
    (cli_dir,) = [p for p in tmp_path.iterdir() if (p / "run.json").is_file()]
    differ = tables_differ(server.folder / fork_id / "trajectory.duckdb",
                           cli_dir / "trajectory.duckdb")
    # (the `run` table holds each run's own id and creation time)
    assert [t for t in differ if t != "run"] == []


@pytest.mark.slow
def test_at_a_phone_width_the_pages_keep_the_screens_width(served, browser, shots):
    """At 375 px a wide table (the runs, a round's posts) scrolls inside its card; the
    page itself keeps the screen's width (it was twice as wide: the top bar and every
    card ended half-way across the page)."""
    server, parent = served
    context = browser.new_context(viewport={"width": 375, "height": 800})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        for route, ready in [("/", f'tr.run-row[data-run="{parent}"]'),
                             (f"/run/{parent}?round=3", ".post-row")]:
            _open(pg, server, route, ready)
            width, screen = pg.evaluate(
                "() => [document.documentElement.scrollWidth, window.innerWidth]")
            assert width <= screen, f"#{route}: the page is {width} px wide on a {screen} px screen"
        _shot(pg, shots, "run-narrow")
    finally:
        context.close()
    assert not errors, errors


@pytest.mark.slow
def test_a_charts_axis_is_as_wide_as_its_tick_labels(served, page):
    """Counts of hundreds of thousands (LLM tokens, a large run's actions) are drawn in
    full left of the plot (the axis was a fixed 52 px: '100,000' lost its first digits)."""
    server, parent = served
    _open(page, server, f"/run/{parent}", "#chart-activity canvas")
    room, widest = page.evaluate("""async () => {
        const { chart } = await import("./static/js/charts.js");
        const el = document.createElement("div");
        el.style.width = "600px";
        document.body.append(el);
        const u = chart(el, { title: "t", x: [0, 1, 2],
          series: [{ label: "tokens", values: [0, 600000, 1250000] }] }).u;
        for (let i = 0; i < 3 && !u.axes[1]._values; i++) {
          await new Promise((r) => requestAnimationFrame(() => r()));  // (drawn)
        }
        const axis = u.axes[1];
        const ctx = document.createElement("canvas").getContext("2d");
        ctx.font = axis.font[0];
        const px = devicePixelRatio || 1;
        const widest = Math.max(...axis._values.map((v) => ctx.measureText(v).width)) / px;
        return [u.bbox.left / px - axis.ticks.size - axis.gap, widest];
    }""")
    assert room >= widest, f"tick labels {widest:.0f} px wide in {room:.0f} px"
