"""An endpoint that answers, but badly: token counts that are not numbers, control
characters in what it says. Its numbers are taken as not given, its text is shown
escaped, and neither a run nor an interview stops or crashes over them."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from shoal.cli.main import main
from tests.helpers import make_config, query, run_config, serve_http
from tests.test_llm import llm_dict


class HostileHandler(BaseHTTPRequestHandler):
    """Chat completions whose usage holds strings and negative numbers; under /garbage/
    an unreadable body with terminal escape sequences in it."""

    def log_message(self, *args) -> None:  # (quiet)
        pass

    def do_GET(self) -> None:
        self.do_POST()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/trickle/"):  # a byte at a time, slower than any timeout
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(100000):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:  # (the client gave up)
                pass
            return
        if self.path.startswith("/toolong/") and self.path.endswith("/chat/completions"):
            body = json.dumps({"error": {  # llama-server -c 256's answer to a longer prompt
                "code": 400, "message": "request (449 tokens) exceeds the available context "
                "size (256 tokens), try increasing it", "type": "exceed_context_size_error",
                "n_prompt_tokens": 449, "n_ctx": 256}}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/huge/"):  # a well-formed answer of 17 MB
            body = (b'{"choices": [{"message": {"role": "assistant", "content": "'
                    + b"a" * (17 * 2**20) + b'"}}]}')
        elif self.path.startswith("/deep/"):
            body = b'{"choices": ' + b"[" * 100000 + b"]" * 100000 + b"}"
        elif self.path.startswith("/garbage/"):
            body = b"\x1b[2J\x1b]0;owned\x07 not json \x00"
        else:
            body = json.dumps({
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": "I would rather not say."}}],
                "usage": {"prompt_tokens": "lots", "completion_tokens": -3,
                          "prompt_tokens_details": {"cached_tokens": "some"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # (the client stopped reading)
            self.wfile.write(body)


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    for root in serve_http(HostileHandler):
        yield root + "/v1"


def test_a_run_takes_counts_that_are_not_numbers_as_not_given(hostile, tmp_path):
    """The run finishes; the calls are logged without the server's counts (not 'lots',
    not -3: the completion as 0 tokens, as for any reply without usage)."""
    run = run_config(make_config(llm_dict(hostile, size=40, rounds=2), tmp_path))
    rows = query(run.dir.db, "SELECT status, prompt_tokens, completion_tokens, "
                             "cached_tokens FROM llm_calls")
    assert rows and all(status == "ok" for status, *_ in rows)
    assert {tuple(r[2:]) for r in rows} == {(0, None)}
    assert all(r[1] is None or r[1] >= 0 for r in rows)  # (NULL, or Shoal's own count)


def test_an_interview_of_a_hostile_endpoint_ends_cleanly(hostile, tmp_path, capsys):
    """`shoal interview` gets its answer despite the counts, and a reply that is not JSON
    is reported with its control characters escaped, not sent to the terminal."""
    run = run_config(make_config(llm_dict(hostile, size=40, rounds=2), tmp_path))
    agent = str(query(run.dir.db, "SELECT agent FROM llm_calls LIMIT 1")[0][0])
    assert main(["interview", str(run.dir.root), "--agent", agent, "--base-url", hostile,
                 "--model", "x", "How are you?"]) == 0
    assert "I would rather not say." in capsys.readouterr().out
    garbage = hostile.replace("/v1", "/garbage/v1")
    code = main(["interview", str(run.dir.root), "--agent", agent, "--base-url", garbage,
                 "--model", "x", "How are you?"])
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert code in (0, 3), shown
    assert "unexpected response" in shown and "\\x1b[2J" in shown
    assert "\x1b" not in shown and "\x07" not in shown and "\x00" not in shown


@pytest.mark.parametrize("mode", ["deep", "trickle"])
def test_llm_check_of_an_endpoint_that_never_answers_properly_ends(hostile, mode, capsys):
    """JSON nested 100,000 deep, and an answer dripping a byte at a time: `shoal llm-check`
    reports the endpoint unusable within its timeout, as an error of the endpoint (not an
    internal error, not a hang)."""
    url = hostile.replace("/v1", f"/{mode}/v1")
    code = main(["llm-check", url, "--model", "m", "--timeout", "1", "--concurrency", "1",
                 "--requests", "1"])
    shown = capsys.readouterr()
    assert "internal error" not in shown.err, shown.err
    assert code in (2, 3), shown.out + shown.err


@pytest.mark.parametrize("mode", ["deep", "trickle"])
def test_a_tokenize_endpoint_that_never_answers_properly_is_no_tokenizer(hostile, mode):
    """The run's token counter asks the server's /tokenize first: a bottomless JSON
    answer, or one that drips past the timeout, means the server has none (the run then
    counts with tiktoken) instead of a crash or a run stuck before round 1."""
    from shoal.memory.model_tokens import server_count

    url = hostile.replace("/v1", f"/{mode}/v1")
    assert server_count(url, "m", ["hello there"], timeout_s=1.0) is None


def test_an_answer_beyond_reason_is_not_read_whole(hostile, tmp_path, capsys):
    """A 17 MB chat answer (past the client's 16 MB cap) is an unexpected response, read
    no further than the cap: the interview ends with the endpoint's error, not with the
    answer in memory or on the terminal."""
    run = run_config(make_config(llm_dict(hostile, size=40, rounds=2), tmp_path))
    agent = str(query(run.dir.db, "SELECT agent FROM llm_calls LIMIT 1")[0][0])
    code = main(["interview", str(run.dir.root), "--agent", agent, "--base-url",
                 hostile.replace("/v1", "/huge/v1"), "--model", "x", "How are you?"])
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert code in (0, 3), shown
    assert "an answer over 16 MB" in shown and "aaaaaaaaaa" not in shown


def test_prompts_longer_than_the_servers_context_stop_with_the_remedy(hostile, tmp_path,
                                                                       capsys):
    """A server whose context is shorter than every prompt (llama-server -c 256) answers
    each turn 400: the run stops (exit 3) saying so, and what to change, not only the
    server's words and `shoal resume` (which would meet the same refusal)."""
    data = llm_dict(hostile.replace("/v1", "/toolong/v1"), size=40, rounds=2)
    data["output"] = {"dir": str(tmp_path)}
    path = tmp_path / "toolong.yaml"
    path.write_text(json.dumps(data, default=str))
    assert main(["run", str(path), "--quiet"]) == 3
    said = " ".join(capsys.readouterr().err.split())
    assert "exceeds the available context size" in said, said
    assert "longer than the model's context" in said and "budget_tokens" in said, said
