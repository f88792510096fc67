"""An endpoint that answers, but badly: token counts that are not numbers (strings,
negative numbers, NaN and Infinity, which JSON does not allow), control characters in
what it says, answers of more than 16 MB. Its numbers are taken as not given, its text is
shown escaped, and neither a run nor an interview stops or crashes over them; `shoal
llm-check` judges its answers as the client reads them, and says what is wrong."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from shoal.cli.main import main
from shoal.config.llm import ProviderConfig
from shoal.llm.chat import ChatRequest, SyncChat, chat_model
from shoal.llm.openai import read_json
from tests.helpers import make_config, query, run_config, serve_http
from tests.test_llm import llm_dict

# Usage counts JSON does not allow (the stdlib reads them, orjson refuses them), in an
# answer whose content holds the same words as text.
NAN_ANSWER = (b'{"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": '
              b'"assistant", "content": "NaN, Infinity and 1e999 are words here."}}], '
              b'"usage": {"prompt_tokens": NaN, "completion_tokens": Infinity, '
              b'"total_tokens": 1e999, "prompt_tokens_details": {"cached_tokens": -Infinity}}}')
# The same with a lone surrogate in the content, which orjson refuses too: not only the
# numbers are wrong, so the answer is not kept.
SURROGATE_ANSWER = NAN_ANSWER.replace(b"are words here.", b"\\ud800")


@functools.cache
def bomb() -> bytes:
    """64 MB of spaces, gzipped to about 64 KB (built when first asked for)."""
    return gzip.compress(b" " * (64 * 2**20), 9)


class HostileHandler(BaseHTTPRequestHandler):
    """Chat completions whose usage holds strings and negative numbers; under /garbage/
    an unreadable body with terminal escape sequences in it; under /nan/ usage of NaN and
    Infinity (/surrogate/: and a lone surrogate); under /null/ JSON null, under
    /nullmessage/ a null message; under /huge/, /bomb/ and /endless/ more than 16 MB."""

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
        if self.path.startswith("/bomb/"):  # small on the wire, 64 MB unpacked
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(bomb())))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(bomb())
            return
        if self.path.startswith("/endless/"):  # no length: a body that goes on and on
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            with contextlib.suppress(OSError):  # (until the client hangs up; 64 MB at most)
                self.wfile.write(b'{"choices": "')
                for _ in range(64 * 16):
                    self.wfile.write(b"a" * 2**16)
            return
        if self.path.startswith("/huge/"):  # a well-formed answer of 17 MB
            body = (b'{"choices": [{"message": {"role": "assistant", "content": "'
                    + b"a" * (17 * 2**20) + b'"}}]}')
        elif self.path.startswith("/deep/"):
            body = b'{"choices": ' + b"[" * 100000 + b"]" * 100000 + b"}"
        elif self.path.startswith("/garbage/"):
            body = b"\x1b[2J\x1b]0;owned\x07 not json \x00"
        elif self.path.startswith("/nan/"):
            body = NAN_ANSWER
        elif self.path.startswith("/surrogate/"):
            body = SURROGATE_ANSWER
        elif self.path.startswith("/null/"):
            body = b"null"
        elif self.path.startswith("/nullmessage/"):
            body = b'{"choices": [{"message": null}]}'
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


def test_counts_that_are_not_json_numbers_are_taken_as_not_given():
    """NaN, Infinity, -Infinity and numbers beyond a double (1e999), which orjson refuses:
    the answer is kept and those numbers read as null; the same words inside strings (a
    message's content, a tool call's arguments) are text and stay as sent."""
    data = read_json(NAN_ANSWER)
    assert data["choices"][0]["message"]["content"] == "NaN, Infinity and 1e999 are words here."
    assert data["usage"] == {"prompt_tokens": None, "completion_tokens": None,
                             "total_tokens": None,
                             "prompt_tokens_details": {"cached_tokens": None}}
    call = (b'{"choices": [{"message": {"tool_calls": [{"function": {"name": "post", '
            b'"arguments": "{\\"text\\": \\"Infinity and NaN\\", \\"n\\": NaN}"}}, '
            b'{"function": {"name": "post", "arguments": {"text": "x", "n": -Infinity}}}]}}], '
            b'"usage": {"prompt_tokens": 12, "completion_tokens": 1E400}}')
    calls = read_json(call)["choices"][0]["message"]["tool_calls"]
    assert calls[0]["function"]["arguments"] == '{"text": "Infinity and NaN", "n": NaN}'
    assert calls[1]["function"]["arguments"] == {"text": "x", "n": None}
    assert read_json(call)["usage"] == {"prompt_tokens": 12, "completion_tokens": None}
    # read as orjson reads what it accepts: big whole numbers as doubles, tiny ones as 0
    assert read_json(b"[18446744073709551616, 1e-999, NaN]") == [2.0**64, 0.0, None]
    assert read_json("[-9223372036854775809, 1.5]") == [-(2.0**63), 1.5]
    for refused in (SURROGATE_ANSWER, b"NaN garbage", b'{"a": NaN,}', b"[" * 5000 + b"NaN",
                    b'\xef\xbb\xbf{"a": NaN}', b'{"a": NaN, "b": "\xff"}'):
        with pytest.raises(ValueError):
            read_json(refused)


def test_a_run_takes_counts_that_are_nan_or_infinity_as_not_given(hostile, tmp_path):
    """Every call of a run against an endpoint whose usage holds NaN and Infinity gets
    its answer (not 'unexpected response'), logged without the server's counts."""
    run = run_config(make_config(llm_dict(hostile.replace("/v1", "/nan/v1"), size=40,
                                          rounds=2), tmp_path))
    rows = query(run.dir.db, "SELECT status, error, completion_tokens, cached_tokens "
                             "FROM llm_calls")
    assert rows and all(status == "ok" for status, *_ in rows), rows[:3]
    assert {tuple(r[2:]) for r in rows} == {(0, None)}


@pytest.mark.parametrize("mode", ["nan", "surrogate", "null", "nullmessage", "garbage"])
def test_llm_check_accepts_what_the_client_accepts(hostile, mode, capsys):
    """`shoal llm-check` calls an endpoint usable exactly when Shoal's client takes its
    answers: NaN usage kept by both (as usage not reported), a lone surrogate, JSON null
    and a null message refused by both."""
    url = hostile.replace("/v1", f"/{mode}/v1")
    chat = SyncChat(chat_model(ProviderConfig(base_urls=[url], model="m", max_retries=0)))
    try:
        said = chat.chat(ChatRequest([{"role": "user", "content": "hello"}]))
    finally:
        chat.close()
    code = main(["llm-check", url, "--model", "m", "--timeout", "5", "--concurrency", "1",
                 "--requests", "1", "--json"])
    out = capsys.readouterr().out
    assert (code == 0) == (said.status == "ok") == (mode == "nan"), (code, said.error)
    if mode == "nan":
        assert said.text == "NaN, Infinity and 1e999 are words here."
        assert (said.prompt_tokens, said.completion_tokens) == (None, None)
        checks = json.loads(out)["checks"]
        assert checks["chat"]["status"] == "yes"
        assert checks["usage"]["status"] == "not reported"


@pytest.mark.parametrize("mode", ["huge", "bomb", "endless"])
def test_llm_check_says_an_answer_was_too_long_not_that_it_cannot_connect(hostile, mode,
                                                                           capsys):
    """17 MB of JSON, a gzip bomb, a body without end: the server did answer, so the
    error says the answer was too long, not that nothing could connect."""
    url = hostile.replace("/v1", f"/{mode}/v1")
    code = main(["llm-check", url, "--model", "m", "--timeout", "20", "--concurrency", "1",
                 "--requests", "1"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert (f"llm-check {url}: POST {url}/chat/completions: the server answered with more "
            "than 16 MB") in err
    assert "cannot connect" not in err and "aaaaaaaaaa" not in err


@pytest.mark.parametrize(("mode", "seen"), [
    ("null", "JSON that is null, not an object ('null')"),
    ("nullmessage", "JSON whose choices[0].message is null, not an object"),
    ("garbage", "a body that is not JSON")])
def test_llm_check_says_what_a_body_without_a_message_holds(hostile, mode, seen, capsys):
    """A 200 without a chat completion's message: the error names what is there instead
    (JSON null is JSON; a null message is not missing choices)."""
    url = hostile.replace("/v1", f"/{mode}/v1")
    code = main(["llm-check", url, "--model", "m", "--timeout", "5"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert (f"not an OpenAI-compatible endpoint: POST {url}/chat/completions answered 200 "
            f"with {seen}") in err
