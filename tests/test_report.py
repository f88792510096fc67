"""`shoal report`: the HTML of a small real run, rendered and checked in headless Chromium.

Chromium (Debian's `chromium` package, installed by `.ci/run`) is driven over the DevTools
protocol through `--remote-debugging-pipe`: JSON messages, NUL-terminated, on file
descriptors 3 (to the browser) and 4 (from it). That needs no Node, no driver binary and
no websocket library.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from shoal.analysis.report import llm_html, write_report
from shoal.cli.main import main
from shoal.runs.fork import fork_run
from shoal.runs.fork_plan import ForkPlan
from tests.conftest import CONFIGS
from tests.helpers import make_config, run_config

XSS = "<script>alert(1)</script>"
POST_TEXT = f"Rates & taxes {XSS} <b>not bold</b> carbon tax"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
HEADINGS = ["Summary", "Plots", "Top posts", "Interventions", "Memory", "LLM cost",
            "Configuration"]


# ---------------------------------------------------------------------- a small run


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """The quick start shrunk to 150 agents x 5 rounds, with a seeded post whose text
    holds markup and a script, so it lands among the top posts."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data["interventions"] = [
        {"kind": "post", "round": 0, "platform": "twitter", "text": POST_TEXT,
         "stance": {"carbon_tax": 0.5}, "votes": {"up": 500}},
        {"kind": "event", "round": 2, "text": "BREAKING: parliament passes the carbon tax",
         "stance": {"carbon_tax": 0.9}},
    ]
    cfg = make_config(data, tmp_path_factory.mktemp("report") / "runs",
                      population={**data["population"], "size": 150}, rounds=5)
    return run_config(cfg).dir.root


@pytest.fixture(scope="module")
def report_file(small_run) -> Path:
    return write_report(small_run, small_run.parent / "report.html")


# ---------------------------------------------------------------------- Chromium over CDP


class Browser:
    """Headless Chromium on a DevTools pipe: commands, collected events, one page."""

    def __init__(self, executable: str, profile: Path):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # the child reads commands on fd 3 and answers on fd 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire_fds, pass_fds=(3, 4))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None

    def send(self, method: str, params: dict | None = None, session: bool = True,
             timeout: float = 30) -> dict:
        """Send a command and wait for its reply (events that arrive meanwhile are kept)."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._on_event(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        """Wait until an event `method` has arrived (or return one that already has)."""
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method for e in self.events):
            self._on_event(self._read(deadline))
        return next(e for e in self.events if e["method"] == method)

    def _on_event(self, msg: dict) -> None:
        if "method" not in msg:
            return
        self.events.append(msg)
        if msg["method"] == "Page.javascriptDialogOpening":  # an alert would block the page
            self.send("Page.handleJavaScriptDialog", {"accept": True})

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def open(self, url: str) -> None:
        """A fresh tab at `url`, with console, log, network and dialogs watched."""
        self.events.clear()
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.send("Target.attachToTarget", {"targetId": target["targetId"],
                                                           "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def problems(self) -> dict[str, list[str]]:
        """What went wrong on the page: console errors, uncaught exceptions, error log
        entries, dialogs opened (a script ran), requests that left the file."""
        out: dict[str, list[str]] = {"console": [], "exceptions": [], "log": [],
                                     "dialogs": [], "requests": []}
        for e in self.events:
            p, m = e.get("params", {}), e["method"]
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out["console"].append(str(p.get("args")))
            elif m == "Runtime.exceptionThrown":
                out["exceptions"].append(str(p.get("exceptionDetails")))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out["log"].append(p["entry"].get("text", ""))
            elif m == "Page.javascriptDialogOpening":
                out["dialogs"].append(p.get("message", ""))
            elif m == "Network.requestWillBeSent" and not re.match(
                    r"^(file|data):", p["request"]["url"]):
                out["requests"].append(p["request"]["url"])
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=5)
            self.proc.wait(timeout=10)
        except (OSError, RuntimeError, TimeoutError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._to_child)
            os.close(self._from_child)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's headless Chromium; the test skips (saying why) when it is not installed."""
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium; "
                    ".ci/run installs it): the report cannot be checked in a browser")
    b = Browser(executable, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


IMAGES_JS = """Promise.all([...document.images].map(img => img.decode()
    .then(() => [img.naturalWidth, img.naturalHeight]).catch(() => [0, 0])))"""


def test_the_harness_sees_a_script_a_console_error_and_a_broken_image(browser, tmp_path):
    """Control: the checks below would fail on a page that runs a script, logs an error
    or has an image that does not decode."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><title>bad</title><h2>x</h2>"
                   f"{XSS}<script>console.error('boom')</script>"
                   '<img src="data:image/png;base64,AAAA">')
    browser.open(bad.as_uri())
    problems = browser.problems()
    assert problems["dialogs"] == ["1"]
    assert problems["console"]
    assert browser.evaluate(IMAGES_JS) == [[0, 0]]


def test_report_renders_in_chromium(browser, report_file, tmp_path):
    """The page loads from the file alone, has every section, every plot decodes, nothing
    errs or leaves the file, and the post holding a script shows it as text."""
    browser.open(report_file.as_uri())
    assert browser.evaluate("document.title").startswith("Shoal report: ")
    assert browser.evaluate("[...document.querySelectorAll('h2')].map(h => h.textContent)"
                            ) == HEADINGS
    h3 = browser.evaluate("[...document.querySelectorAll('h3')].map(h => h.textContent)")
    for title in ("Belief distribution over time", "Polarization over time", "Cascade growth",
                  "Lineage", "Timings", "Checkpoints", "Key moments"):
        assert title in h3
    sizes = browser.evaluate(IMAGES_JS)
    assert len(sizes) == 3 and all(w > 100 and h > 100 for w, h in sizes), sizes
    assert browser.problems() == {"console": [], "exceptions": [], "log": [], "dialogs": [],
                                  "requests": []}
    # the untrusted post is text: no script or <b> element came from it, its text is intact
    assert browser.evaluate("document.scripts.length") == 0
    assert browser.evaluate("document.querySelectorAll('b').length") == 0
    cells = browser.evaluate("[...document.querySelectorAll('#top-posts td')]"
                             ".map(td => td.textContent)")
    assert POST_TEXT in cells
    assert "no LLM calls" in browser.evaluate("document.querySelector('#llm').innerText")
    # and it renders: a full-page screenshot is a real, non-blank PNG
    shot = browser.send("Page.captureScreenshot", {"format": "png",
                                                   "captureBeyondViewport": True})
    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000
    (tmp_path / "report.png").write_bytes(png)


# ---------------------------------------------------------------------- the HTML itself


def test_report_is_self_contained_and_escaped(report_file):
    """No external reference at all; plots are data URIs; untrusted text is escaped."""
    page = report_file.read_text()
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert refs and all(r.startswith(("data:image/png;base64,", "#")) for r in refs), refs
    assert not re.search(r"https?://|<script|<link|@import|url\(", page, re.I)
    assert XSS not in page
    assert "Rates &amp; taxes &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Content-Security-Policy" in page


def test_fork_report_covers_the_full_history(small_run, tmp_path):
    """A fork's report lists its lineage and plots rounds from 0, not from the fork."""
    fork = fork_run(small_run, 2, ForkPlan(sets=["policy.post_rate=0.4"]), out=tmp_path)
    try:
                fork.run()
    finally:
        fork.close()
    page = write_report(fork.dir.root, tmp_path / "fork.html").read_text()
    assert f"{small_run.name} at round 2" in page
    assert "0..2" in page and "3..5" in page  # rounds each run contributes
    assert "150 × 5" in page
    assert "fork round(s) 2" in page


def test_llm_cost_section_counts_calls_tokens_failures_and_cost():
    """From an `llm_calls`-shaped frame (columns may be missing): totals and per model;
    cost from cost_usd, else from the configured prices."""
    # One row per HTTP request: agent 1's call took three (two timed out, then an answer);
    # agent 0's call of round 2 timed out on its only request and fell back.
    calls = pd.DataFrame({
        "round": [1, 1, 1, 1, 2], "agent": [0, 1, 1, 1, 0], "platform": ["twitter"] * 5,
        "model": ["m1", "m1", "m1", "m1", "m2"],
        "prompt_tokens": [1000, 2000, 2000, 2000, 500],
        "completion_tokens": [100, 0, 0, 200, 0],
        "latency_ms": [120.0, 900.0, 900.0, 300.0, 50.0], "retries": [0, 0, 1, 2, 0],
        "status": ["ok", "timeout", "timeout", "ok", "timeout"],
        "outcome": ["post", "retried", "retried", "like", "fallback_rule"],
        "fallback_reason": [None, None, None, None, "timeout"],
        "cost_usd": [0.01, 0.002, 0.002, None, None],
    })
    config = {"llm": {"providers": [{"model": "m1", "price_prompt_per_mtok": 1.0,
                                     "price_completion_per_mtok": 10.0}]}}
    page = llm_html(calls, config)
    assert "3 (5 HTTP requests, 3 turns)" in page  # calls, not requests
    assert "7,500 prompt + 300 completion" in page
    assert "1 (timeout: 1)" in page  # the call without an answer; retried requests are not
    assert "2 HTTP requests sent again" in page
    assert "fallbacks</th><td>1 (timeout: 1)" in page
    assert "$0.0180" in page  # 0.014 logged + (2000 * 1 + 200 * 10) / 1e6 estimated
    assert llm_html(calls.drop(columns=["cost_usd", "latency_ms"]), {}).count("—") >= 1
    assert "no LLM calls" in llm_html(None, {})


def test_report_command_writes_the_file_and_rejects_unknown_runs(small_run, tmp_path, capsys):
    """`shoal report` exits 0 with the file written, 2 for an unknown run or a bad --out."""
    out = tmp_path / "r.html"
    assert main(["report", str(small_run), "--out", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(tmp_path / "no-such-run")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert main(["report", str(small_run), "--out", str(tmp_path / "r.pdf")]) == 2
    assert main(["report", str(small_run), "--out", str(tmp_path / "nope" / "r.html")]) == 2


def test_report_with_an_analysis_renders_its_verdicts_in_chromium(browser, small_run,
                                                                   tmp_path):
    """An analysis with a wrong number and a missing post (a scripted loopback analyst):
    the page has the Analysis section, both sentences flagged with their evidence linked,
    and it still loads nothing, runs nothing and logs no error."""
    from shoal.llm.server import serve_in_thread
    from tests.helpers import query

    run = Path(shutil.copytree(small_run, tmp_path / small_run.name))
    posts = query(run / "trajectory.duckdb", "SELECT count(*) FROM posts")[0][0]
    text = (f"The run has {posts + 5} posts [step 1]. There were {posts} posts [step 1]. "
            f"Post 99999 said {XSS} [post 99999].")
    script = {"plan": [{"tool_calls": [{"name": "plan_sections", "arguments": {
        "sections": [{"id": "overview", "title": "What happened", "brief": "numbers"}]}}]}],
        "overview": [{"tool_calls": [{"name": "sql", "arguments": {
            "query": "SELECT count(*) AS posts FROM posts"}}]},
            {"tool_calls": [{"name": "write_section", "arguments": {"text": text}}]}]}
    server = serve_in_thread(script=script)
    try:
        assert main(["analyse", str(run), "--base-url", server.url, "--model",
                     "shoal-loopback"]) == 0
    finally:
        server.stop()
    page = write_report(run, tmp_path / "report.html")
    browser.open(page.as_uri())
    assert browser.evaluate("[...document.querySelectorAll('h2')].map(h => h.textContent)"
                            ) == [HEADINGS[0], "Analysis", *HEADINGS[1:]]
    verdicts = browser.evaluate("[...document.querySelectorAll('#analysis .claim')]"
                                ".map(s => s.dataset.verdict)")
    assert verdicts == ["unsupported", "verified", "unresolved"]
    head = browser.evaluate("document.querySelector('.analysis-head').innerText")
    assert "3 claims, 2 unverified" in head
    # each claim links to its footnote, which shows the cited rows
    links = browser.evaluate("[...document.querySelectorAll('#analysis sup a')]"
                             ".map(a => document.querySelector(a.getAttribute('href'))"
                             ".innerText)")
    assert len(links) == 3 and str(posts) in links[1] and "no post 99999" in links[2]
    assert browser.evaluate("document.scripts.length") == 0
    assert browser.problems() == {"console": [], "exceptions": [], "log": [], "dialogs": [],
                                  "requests": []}


# ---------------------------------------------------------------------- issue 26


def test_a_fork_round_that_is_not_a_number_is_exit_2_naming_the_field(small_run, tmp_path,
                                                                      capsys):
    """issue 26 item 12: a fork whose run.json says `fork_round: "three"` makes `shoal
    report` exit 2 naming the file and the field, not fail with exit 1."""
    fork = fork_run(small_run, 2, ForkPlan(), out=tmp_path, name="odd")
    fork.close()
    meta = json.loads(fork.dir.meta.read_text())
    meta["lineage"]["fork_round"] = "three"
    fork.dir.meta.write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(["report", str(fork.dir.root), "--out", str(tmp_path / "r.html")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"{fork.dir.meta}: lineage.fork_round: must be a whole number >= 0, got "
            "'three'") in err
    assert not (tmp_path / "r.html").exists()


def test_report_of_a_run_being_written_reads_its_live_mirror(tmp_path, capsys):
    """issue 26 item 14: with `output.live_parquet: true`, `shoal report` of a run whose
    file a writer holds is written from the mirror, as the refusal message promises (the
    analysis section, which the mirror does not have, is left out)."""
    from tests.test_lineage import held

    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    cfg = make_config(data, tmp_path / "runs", population={**data["population"], "size": 100},
                      rounds=3, output={"live_parquet": True})
    run = run_config(cfg).dir.root
    with held(run / "trajectory.duckdb"):
        capsys.readouterr()
        assert main(["report", str(run), "--out", str(tmp_path / "live.html")]) == 0
    page = (tmp_path / "live.html").read_text()
    assert "100 × 3" in page and 'id="analysis"' not in page


def test_report_names_the_summarizer_in_words(report_file):
    """issue 26 item 18: the config highlights say which summariser compacts memory, in
    words, not as the config's mapping."""
    page = report_file.read_text()
    assert "extractive summarizer (no model" in page
    assert "{&#x27;kind&#x27;" not in page and "{'kind'" not in page


def test_llm_cost_section_leaves_a_stopped_rounds_calls_out_of_failures_and_fallbacks():
    """issue 26 item 17: the requests of a round that stopped (outcome round_stopped) were
    neither failed turns nor fallbacks: the section counts them apart; their tokens are
    still counted."""
    calls = pd.DataFrame({
        "round": [1, 2, 2, 2], "agent": [0, 0, 1, 1], "platform": ["twitter"] * 4,
        "model": ["m1"] * 4, "prompt_tokens": [100, 100, 100, 100],
        "completion_tokens": [10, 10, 0, 0], "latency_ms": [50.0] * 4, "retries": [0] * 4,
        "status": ["ok", "ok", "unreachable", "unreachable"],
        "outcome": ["post", "like", "round_stopped", "round_stopped"],
        "fallback_reason": [None, None, "unreachable", "unreachable"],
        "cost_usd": [0.001] * 4,
    })
    page = llm_html(calls, {})
    assert "2 (2 HTTP requests, 2 turns)" in page
    assert "failed calls</th><td>0" in page and "fallbacks</th><td>0" in page
    assert "2 requests of round(s) 2, which got no answer" in page
    assert "400 prompt + 20 completion" in page and "$0.0040" in page
