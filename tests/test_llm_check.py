"""`shoal llm-check`: the probe against Shoal's loopback server, against a small fake
endpoint that refuses tools and structured output (so the decision falls to text), against
one that is not OpenAI-compatible, one that echoes the key, and a port nobody listens on.
Every server here binds 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest

from shoal.cli.main import main
from shoal.llm.check import (
    CHECKS,
    FAILED,
    NO,
    NOT_REPORTED,
    REFUSED,
    UNKNOWN,
    YES,
    Finding,
    Load,
    decide,
    parse_concurrency,
    schema_problem,
    suggest_concurrency,
)
from shoal.llm.server import serve_in_thread
from tests.helpers import closed_port, serve_http

KEY = "sk-test-" + "0123456789abcdef" * 2  # fake, key-shaped: must never be printed
SHOWN = {"chat", "tools", "json_schema", "json_object", "usage", "cached tokens", "tokenize",
         "context length"}  # the rows as the table names them


class FakeHandler(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint without tools or structured output: 400 to a
    request with tools, 500 to one with `response_format`, a plain answer otherwise (usage
    without cache details). Under /html/ it answers a web page, under /echo/ it refuses
    tools repeating the Authorization header it got (a careless proxy), under /down/ it
    answers 503 to every chat completion."""

    def log_message(self, *args) -> None:  # (quiet)
        pass

    def _answer(self, status: int, payload: object, kind: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/html/"):
            self._answer(200, b"<html><body>a router's login page</body></html>", "text/html")
        elif self.path.endswith("/v1/models"):
            self._answer(200, {"object": "list", "data": [{"id": "fake-model"}]})
        else:
            self._answer(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path.startswith("/html/"):
            self._answer(200, b"<html>not an API</html>", "text/html")
        elif self.path.startswith("/down/"):
            self._answer(503, {"error": {"message": "the model is loading"}})
        elif not self.path.endswith("/v1/chat/completions"):
            self._answer(404, {"error": {"message": f"no route {self.path}"}})
        elif "tools" in body:
            said = ("tools are not supported" if not self.path.startswith("/echo/")
                    else f"tools refused for {self.headers.get('Authorization')}")
            self._answer(400, {"error": {"message": said}})
        elif "response_format" in body:
            self._answer(500, {"error": {"message": "response_format: internal error"}})
        else:
            prompt = sum(len(m["content"]) for m in body["messages"]) // 4
            self._answer(200, {
                "id": "x", "object": "chat.completion", "model": "fake-model",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "ready"}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 2,
                          "total_tokens": prompt + 2}})


class SchemaHandler(FakeHandler):
    """An endpoint that decodes to a JSON schema but does not parse tool calls (the model
    writes its call as text), reports its cache as llama.cpp does (`timings.cache_n`),
    tokenizes in vLLM's form only and lists its context length as vLLM does."""

    seen: ClassVar[set[str]] = set()  # the prompts answered (one server per module)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._answer(200, {"data": [{"id": "small", "max_model_len": 8192}]})
        else:
            self._answer(404, {"error": {"message": "Not Found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path == "/tokenize":
            if "prompt" not in body:
                self._answer(400, {"error": {"message": "prompt: field required"}})
            else:
                tokens = list(range(len(body["prompt"]) // 3))
                self._answer(200, {"tokens": tokens, "count": len(tokens)})
            return
        if "tools" in body:
            content = 'I will call post({"text": "hello"})'
        elif "response_format" in body:
            content = json.dumps({"action": "post", "reason": "it matters to me"})
        else:
            content = "ready"
        prompt = "".join(m["content"] for m in body["messages"])
        cached = len(prompt) // 4 if prompt in self.seen else 0
        self.seen.add(prompt)
        self._answer(200, {
            "model": "small", "timings": {"cache_n": cached},
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": len(prompt) // 4 + 10, "completion_tokens": 5}})


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    """The fake endpoint without tools or structured output."""
    yield from serve_http(FakeHandler)


@pytest.fixture(scope="module")
def schema_only() -> Iterator[str]:
    """The fake endpoint with structured output but without parsed tool calls."""
    yield from serve_http(SchemaHandler)


@pytest.fixture(scope="module")
def loopback() -> Iterator[str]:
    s = serve_in_thread(seed=0)
    yield s.url
    s.stop()


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    """`shoal ARGV`'s exit code, stdout and stderr."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_loopback_table_has_every_row_and_a_decision(loopback, capsys):
    code, out, err = _run(["llm-check", loopback, "--concurrency", "1,2", "--requests", "3"],
                          capsys)
    assert code == 0, out + err
    rows = {line.split("  ")[0].strip() for line in out.splitlines() if line.strip()}
    assert rows >= SHOWN, out
    assert "concurrency 1" in out and "concurrency 2" in out
    assert "what Shoal will use" in out
    for setting in ("output", "token counter", "concurrency"):
        assert any(line.strip().startswith(setting) for line in out.splitlines()), out
    assert f"probing {loopback}, model shoal-loopback" in err


def test_loopback_capabilities(loopback, capsys):
    """What the loopback server does today: chat, tool calls, usage, a prefix cache."""
    code, out, err = _run(["llm-check", loopback, "--json", "--concurrency", "1,2",
                           "--requests", "3"], capsys)
    assert code == 0, err
    report = json.loads(out)
    checks = report["checks"]
    assert list(checks) == list(CHECKS)
    assert report["model"] == "shoal-loopback"
    assert checks["chat"]["status"] == YES and checks["chat"]["data"]["http_status"] == 200
    assert checks["tools"]["status"] == YES
    assert checks["tools"]["data"]["tool_choice"] == "required"
    assert checks["usage"]["status"] == YES
    cached = checks["cached_tokens"]
    assert cached["status"] == YES
    assert 0 < cached["data"]["cached_tokens"] <= cached["data"]["prompt_tokens"]
    assert [lv["concurrency"] for lv in report["load"]] == [1, 2]
    assert all(lv["ok"] == lv["requests"] == 3 for lv in report["load"])
    decision = report["decision"]
    assert decision["output"] == "tools"
    assert decision["concurrency"] in (1, 2)
    assert set(decision["reasons"]) == {"output", "token_counter", "concurrency"}


def test_an_endpoint_without_tools_or_json_gets_text(fake, capsys):
    code, out, err = _run(["llm-check", f"{fake}/v1", "--json", "--concurrency", "1,2",
                           "--requests", "2"], capsys)
    assert code == 0, err
    report = json.loads(out)
    checks = report["checks"]
    assert report["model"] == "fake-model"
    assert checks["chat"]["status"] == YES
    assert checks["tools"]["status"] == REFUSED
    assert "tool_choice required" in checks["tools"]["detail"]  # tried both, said both
    assert "tool_choice auto" in checks["tools"]["detail"]
    assert "tools are not supported" in checks["tools"]["detail"]
    assert checks["json_schema"]["status"] == REFUSED
    assert "HTTP 500" in checks["json_schema"]["detail"]
    assert checks["json_object"]["status"] == REFUSED
    assert checks["usage"]["status"] == YES
    assert checks["cached_tokens"]["status"] == NOT_REPORTED
    assert checks["tokenize"]["status"] == NO
    assert checks["context_length"]["status"] == UNKNOWN
    decision = report["decision"]
    assert decision["output"] == "text"
    assert decision["token_counter"] == "tiktoken"
    # the margin comes from the usage of a short and a long prompt (tokens: 4 characters)
    assert checks["tokenize"]["data"]["ratio_from"] == "the usage"
    assert decision["token_margin"] == pytest.approx(checks["tokenize"]["data"]["ratio"],
                                                     abs=0.01)


def test_an_endpoint_with_a_schema_but_no_tool_calls_gets_json_schema(schema_only, capsys):
    code, out, err = _run(["llm-check", f"{schema_only}/v1", "--json", "--concurrency", "1",
                           "--requests", "2"], capsys)
    assert code == 0, err
    checks = json.loads(out)["checks"]
    assert checks["tools"]["status"] == NO
    assert "answered without tool_calls" in checks["tools"]["detail"]
    assert checks["json_schema"]["status"] == YES
    assert checks["json_object"]["status"] == YES
    assert checks["cached_tokens"]["status"] == YES
    assert checks["cached_tokens"]["data"]["source"] == "timings.cache_n"
    assert checks["cached_tokens"]["data"]["first_call"] == 0
    assert checks["tokenize"]["status"] == YES
    assert checks["tokenize"]["data"]["form"] == "vLLM"  # after llama.cpp's was refused
    assert checks["tokenize"]["data"]["server_tokens"] > 0
    assert checks["context_length"]["data"] == {"tokens": 8192,
                                                "source": "models max_model_len"}
    decision = json.loads(out)["decision"]
    assert (decision["output"], decision["token_counter"]) == ("json_schema", "server")
    assert decision["token_margin"] is None


def test_the_table_for_the_fake_endpoint(fake, capsys):
    code, out, err = _run(["llm-check", f"{fake}/v1", "--model", "fake-model",
                           "--concurrency", "1", "--requests", "1"], capsys)
    assert code == 0, err
    assert "fake-model (--model)" in " ".join(out.split())
    text_row = next(line for line in out.splitlines() if line.strip().startswith("output"))
    assert text_row.split()[1] == "text"


def test_an_unreachable_endpoint_is_a_clear_error(capsys):
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/v1"
        code, out, err = _run(["llm-check", url], capsys)
    assert code == 2
    assert f"error: llm-check {url}: cannot connect" in " ".join(err.split())
    assert "Traceback" not in err and not out


def test_a_web_page_is_not_an_openai_endpoint(fake, capsys):
    code, out, err = _run(["llm-check", f"{fake}/html/v1", "--model", "m"], capsys)
    assert code == 2 and not out
    flat = " ".join(err.split())
    assert f"llm-check {fake}/html/v1: not an OpenAI-compatible endpoint" in flat
    assert "a body that is not JSON" in flat


def test_a_url_without_v1_gets_a_hint(fake, capsys):
    code, out, err = _run(["llm-check", fake], capsys)
    assert code == 2 and not out
    flat = " ".join(err.split())
    assert f"GET {fake}/models answered HTTP 404" in flat
    assert "(is /v1 missing from the URL?); give the model with --model" in flat


def test_a_failing_endpoint_exits_3(fake, capsys):
    code, out, err = _run(["llm-check", f"{fake}/down/v1"], capsys)
    assert code == 3 and not out
    assert (f"stopped: llm-check {fake}/down/v1: POST {fake}/down/v1/chat/completions "
            "answered HTTP 503: the model is loading") in " ".join(err.split())


def test_the_key_is_sent_and_never_shown(fake, capsys, monkeypatch):
    """The key goes in the Authorization header; a server repeating it is redacted."""
    monkeypatch.setenv("LLM_CHECK_TEST_KEY", KEY)
    code, out, err = _run(["llm-check", f"{fake}/echo/v1", "--api-key-env",
                           "LLM_CHECK_TEST_KEY", "--concurrency", "1", "--requests", "1",
                           "--json"], capsys)
    assert code == 0, err
    assert KEY not in out + err and KEY[-8:] not in out + err
    assert "tools refused for Bearer ***" in json.loads(out)["checks"]["tools"]["detail"]


@pytest.mark.slow
def test_loopback_word_starts_a_server(capsys):
    """`shoal llm-check loopback` starts Shoal's loopback server, probes it, stops it."""
    code, out, err = _run(["llm-check", "loopback", "--concurrency", "1", "--requests", "2"],
                          capsys)
    assert code == 0, err
    assert "loopback (http://127.0.0.1:" in out


@pytest.mark.slow
@pytest.mark.real_llm
def test_a_real_llama_server(llama_server, capsys):
    """Against llama.cpp's `llama-server` with SmolLM2-135M (the `llama_server` fixture of
    tests/conftest.py; only with --real-llm). What a 135M model writes varies; what the
    server offers does not: schema-constrained JSON, usage, a prefix cache, /tokenize
    and /props."""
    server = llama_server
    code, out, err = _run(["llm-check", server.url, "--json", "--concurrency", "1,2",
                           "--requests", "2", "--timeout", "300"], capsys)
    assert code == 0, err
    report = json.loads(out)
    checks = report["checks"]
    for name in ("chat", "json_schema", "usage", "cached_tokens", "tokenize"):
        assert checks[name]["status"] == YES, (name, checks[name])
    assert checks["tokenize"]["data"]["form"] == "llama.cpp"
    assert checks["context_length"]["data"]["source"].startswith("props")
    assert report["decision"]["output"] in ("tools", "json_schema")
    assert report["decision"]["token_counter"] == "server"


# --- the decision, from findings ------------------------------------------------------------


def _checks(**statuses: str) -> dict[str, Finding]:
    checks = {name: Finding(NO, "") for name in CHECKS}
    checks.update({k: Finding(v, "") for k, v in statuses.items()})
    return checks


def _load(*levels: tuple[int, int, float]) -> list[Load]:
    return [Load(c, 8, ok, 1.0, 10.0, rps, None) for c, ok, rps in levels]


def test_output_mode_order():
    load = _load((1, 8, 10.0))
    assert decide(_checks(tools=YES, json_schema=YES), load).output == "tools"
    assert decide(_checks(tools=REFUSED, json_schema=YES), load).output == "json_schema"
    assert decide(_checks(tools=NO, json_schema=REFUSED), load).output == "text"
    assert decide(_checks(tools=FAILED, json_schema=NO), load).output == "text"


def test_token_counter():
    load = _load((1, 8, 10.0))
    checks = _checks(tokenize=YES)
    checks["tokenize"].data["ratio"] = 1.3
    d = decide(checks, load)
    assert (d.token_counter, d.token_margin) == ("server", None)
    checks = _checks(tokenize=NO)
    checks["tokenize"].data.update(ratio=1.121, ratio_from="the usage")
    d = decide(checks, load)
    assert (d.token_counter, d.token_margin) == ("tiktoken", 1.13)  # rounded up
    d = decide(_checks(tokenize=NO), load)
    assert (d.token_counter, d.token_margin) == ("tiktoken", 1.0)
    assert "no usage" in d.reasons["token_counter"]


def test_suggested_concurrency():
    # saturates at 2: the lowest level within 10% of the best
    assert suggest_concurrency(_load((1, 8, 10.0), (2, 8, 19.0), (4, 8, 20.0)))[0] == 2
    # still rising at the top: the top, and a hint to measure higher
    level, why = suggest_concurrency(_load((1, 8, 10.0), (2, 8, 19.0), (4, 8, 36.0)))
    assert level == 4 and "--concurrency 4,8,16" in why
    # a level with failures (a rate limit) is not suggested
    level, why = suggest_concurrency(_load((1, 8, 10.0), (2, 8, 19.0), (4, 5, 25.0)))
    assert level == 2 and "at 4: 3 of 8 failed" in why
    assert suggest_concurrency(_load((1, 0, 0.0)))[0] == 1


def test_schema_problems():
    schema = {"type": "object", "properties": {"action": {"type": "string",
                                                          "enum": ["post", "do_nothing"]},
                                               "reason": {"type": "string"}},
              "required": ["action", "reason"], "additionalProperties": False}
    assert schema_problem({"action": "post", "reason": "why not"}, schema) is None
    assert schema_problem({"action": "post"}, schema)
    assert schema_problem({"action": "dance", "reason": "x"}, schema)
    assert schema_problem({"action": "post", "reason": "x", "extra": 1}, schema)
    assert schema_problem([1], schema)


def test_parse_concurrency():
    assert parse_concurrency("4,1,2,2") == (1, 2, 4)
    from shoal.core.errors import InputError

    for bad in ("", "0", "1,x", "-1", "1,,2"):
        with pytest.raises(InputError, match="--concurrency"):
            parse_concurrency(bad)


def test_the_schema_check_without_jsonschema():
    """The fallback used where the `jsonschema` library is not installed."""
    from shoal.llm.check import SCHEMA, _small_schema_problem

    assert _small_schema_problem({"action": "post", "reason": "why not"}, SCHEMA) is None
    assert "missing reason" in _small_schema_problem({"action": "post"}, SCHEMA)
    assert "not one of" in _small_schema_problem({"action": "dance", "reason": "x"}, SCHEMA)
    assert "unexpected extra" in _small_schema_problem(
        {"action": "post", "reason": "x", "extra": 1}, SCHEMA)
    assert "reason: not string" in _small_schema_problem({"action": "post", "reason": 1},
                                                         SCHEMA)
    assert "not object" in _small_schema_problem([1], SCHEMA)


@pytest.mark.parametrize(("body", "seen"), [
    ("<html>", "a body that is not JSON"),
    ("null", "JSON that is null, not an object"),
    ("[1, 2]", "JSON that is an array, not an object"),
    ('{"id": "x"}', "JSON without choices"),
    ('{"choices": null}', "JSON whose choices is null, not an array"),
    ('{"choices": []}', "JSON whose choices is an empty array"),
    ('{"choices": ["hi"]}', "JSON whose choices[0] is a string, not an object"),
    ('{"choices": [{"text": "hi"}]}', "JSON whose choices[0] has no message"),
    ('{"choices": [{"message": null}]}', "JSON whose choices[0].message is null, not an object"),
    ('{"choices": [{"message": true}]}', "JSON whose choices[0].message is true, not an object"),
])
def test_a_200_without_a_message_says_what_it_holds(body, seen):
    """The chat check's error names the first part of `choices[0].message` that is
    missing or not an object, read as the client reads it."""
    from shoal.llm.check import Reply, _no_message
    from shoal.llm.openai import read_json

    try:
        reply = Reply(200, read_json(body), body, is_json=True)
    except ValueError:
        reply = Reply(200, None, body)
    assert reply.message() is None
    assert _no_message(reply) == seen


def test_an_answer_past_the_cap_is_an_answer():
    """A body cut at 16 MB came from a server that answered: its status is kept and said
    with the size, and a check that gets it has learnt nothing (failed, not refused)."""
    from shoal.llm.check import Reply, _refusal

    reply = Reply(503, too_long=True)
    assert reply.said() == "HTTP 503 with more than 16 MB (not read on)"
    finding = _refusal(Reply(200, too_long=True), "the long prompt")
    assert finding.status == FAILED
    assert finding.detail == "the long prompt: HTTP 200 with more than 16 MB (not read on)"
