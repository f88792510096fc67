"""Output modes (tools, json_schema, text, auto) and the model's own token counts, against
the loopback server over real HTTP (tests/test_real_llm.py does the same against
llama-server with a real model)."""

from __future__ import annotations

import json
import signal

import pytest
import yaml

from shoal.agents.llm_output import action_schema, added_text, probe
from shoal.config.llm import ProviderConfig
from shoal.core.errors import InputError
from shoal.llm.chat import SyncChat, chat_model, response_format
from shoal.llm.server import Faults, serve_in_thread
from shoal.memory.model_tokens import MARGIN, TEMPLATE_TOKENS, ModelTokens, measure
from shoal.memory.tokens import count
from tests.conftest import CONFIGS, write_config
from tests.helpers import closed_port, query, run_cli


def test_the_action_schema_names_only_what_the_agent_can_do():
    schema = action_schema("twitter", [7, 3, 7], ["ann"], {})
    by_action = {b["properties"]["action"]["const"]: b for b in schema["anyOf"]}
    assert {"post", "like", "reply", "follow", "do_nothing"} <= set(by_action)
    assert by_action["like"]["properties"]["post_id"] == {"enum": [3, 7]}
    assert by_action["follow"]["properties"]["username"] == {"enum": ["ann"]}
    for branch in schema["anyOf"]:  # every argument required, nothing else allowed
        assert branch["required"] == list(branch["properties"])
        assert branch["additionalProperties"] is False
    empty = action_schema("twitter", [], [], {})
    names = {b["properties"]["action"]["const"] for b in empty["anyOf"]}
    assert names == {"post", "do_nothing"}  # no feed, no accounts: nothing to point at
    fmt = response_format(empty)
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == empty


def _provider(url: str, **kw) -> ProviderConfig:
    return ProviderConfig(base_urls=[url], model="shoal-loopback", **kw)


@pytest.mark.parametrize(("faults", "mode"), [
    (Faults(), "tools"), (Faults(reject_tools=True), "json_schema"),
    (Faults(reject_tools=True, reject_schema=True), "text")])
def test_the_probe_picks_what_the_server_can_do(faults, mode):
    server = serve_in_thread(faults=faults, seed=0)
    try:
        model = chat_model(_provider(server.url, max_retries=0))
        sync = SyncChat(model)
        try:
            found, why = sync.run(probe(model), 60)
        finally:
            sync.close()
    finally:
        server.stop()
    assert found == mode, why
    assert why


def _llm_config(tmp_path, name: str, **provider) -> object:
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=2, population={**data["population"], "size": 60})
    data.pop("interventions")
    data["llm"]["providers"][0].update(provider)
    return write_config(tmp_path / f"{name}.yaml", data)


def _run(tmp_path, name: str, **provider):
    out = tmp_path / name
    done = run_cli(["run", str(_llm_config(tmp_path, name, **provider)), "--out", str(out),
                    "--quiet"])
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = out.iterdir()
    return run, done


@pytest.mark.slow
@pytest.mark.parametrize(("provider", "expected"), [
    ({"output": "json_schema"}, "json_schema"),
    ({"output": "auto", "loopback": {"reject_tools": True}}, "json_schema"),
    ({"output": "auto"}, "tools"),
    ({"tools": "json"}, "text"),  # the older spelling of output: text
    ({"output": "json_schema", "loopback": {"reject_schema": True}}, "text")])
def test_a_run_asks_in_its_output_mode_and_reports_it(tmp_path, provider, expected):
    run, done = _run(tmp_path, "r", **provider)
    db = run / "trajectory.duckdb"
    modes = query(db, "SELECT output, count(*) FILTER (WHERE fallback_reason = ''), count(*) "
                      "FROM llm_calls WHERE agent IS NOT NULL AND outcome NOT IN "
                      "('tools_refused', 'schema_refused') GROUP BY ALL")
    assert [m[0] for m in modes] == [expected]
    assert modes[0][1] == modes[0][2]  # the loopback server's answers are all usable
    assert f"{expected}: " in done.stdout  # the summary's line for the mode
    assert "LLM token count" in done.stdout and "drift" in done.stdout
    if "reject_schema" in str(provider):  # refused once, then text for the rest of the run
        refused = query(db, "SELECT count(*) FROM llm_calls WHERE outcome = 'schema_refused'")
        assert refused[0][0] >= 1


@pytest.mark.slow
def test_auto_is_kept_by_a_resume(tmp_path):
    """The probed mode is part of the checkpoint: a run killed in round 2 and resumed
    does not probe again, and asks in the same mode."""
    out = tmp_path / "a"
    config = _llm_config(tmp_path, "a", output="auto", loopback={"reject_tools": True})
    killed = run_cli(["run", str(config), "--out", str(out), "--quiet"],
                     env={"SHOAL_FAULT": "mid_round:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "output json_schema (" in killed.stderr  # the probe's finding, said once
    (run,) = out.iterdir()
    done = run_cli(["resume", str(run), "--quiet"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "output json_schema (" not in done.stderr  # no second probe
    modes = query(run / "trajectory.duckdb",
                  "SELECT DISTINCT output FROM llm_calls WHERE agent IS NOT NULL")
    assert modes == [("json_schema",)]


def test_the_model_counts_through_the_servers_tokenize_endpoint():
    server = serve_in_thread(seed=0)
    try:
        texts = ["A persona of a few words.", "日本語のペルソナ、少し長め。" * 5]
        requests = {"twitter": added_text("tools", "twitter", ["carbon_tax"])}
        tokens = measure(_provider(server.url), server.url, texts, requests)
    finally:
        server.stop()
    assert tokens.counter == "server"
    # the loopback server counts 4 characters a token
    assert tokens.overhead["twitter"] == -(-len(requests["twitter"]) // 4) + TEMPLATE_TOKENS
    assert tokens.ratio >= 1.0
    assert tokens.budget(2500) == int((2500 - tokens.overhead["twitter"]) / tokens.ratio)
    assert tokens.prompt(100, "twitter") == -(-100 * tokens.ratio // 1) + \
        tokens.overhead["twitter"]


def test_without_a_tokenizer_the_margin_applies():
    requests = {"reddit": "Answer with one JSON object."}
    tokens = measure(_provider("http://127.0.0.1:9/v1", tokenizer="auto"), None, [], requests)
    assert tokens == ModelTokens("tiktoken", MARGIN, {"reddit": -(-count(requests["reddit"])
                                                                 * MARGIN // 1) + 16})
    with pytest.raises(InputError, match="tokenize did not answer"):
        measure(_provider("http://127.0.0.1:9/v1", tokenizer="server"),
                "http://127.0.0.1:9/v1", [], requests)


def test_a_tokenizer_json_counts_exactly(tmp_path):
    """A Hugging Face tokenizer.json (a real one, trained here by the `tokenizers`
    library) counts the samples itself."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["one two three four five"] * 3,
                            trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    provider = _provider("http://127.0.0.1:9/v1", tokenizer=str(path))
    tokens = measure(provider, None, ["one two three"], {"twitter": "four five"})
    assert tokens.counter == "tokenizer.json"
    assert tokens.overhead == {"twitter": 2 + TEMPLATE_TOKENS}
    with pytest.raises(InputError, match="no such file"):
        measure(_provider("http://x/v1", tokenizer=str(tmp_path / "nope.json")), None, [],
                {})


@pytest.mark.slow
def test_estimate_predicts_with_the_runs_counter(tmp_path):
    """`shoal estimate` counts in the model's tokens as the run would: with a
    tokenizer.json that splits on whitespace only, fewer tokens than with the margin."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = tmp_path / "tokenizer.json"
    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    margin = run_cli(["estimate", str(_llm_config(tmp_path, "m"))])
    words = run_cli(["estimate", str(_llm_config(tmp_path, "w", tokenizer=str(path)))])
    assert margin.returncode == 0 and words.returncode == 0, margin.stderr + words.stderr

    def prompt_tokens(out: str) -> int:
        line = next(x for x in out.splitlines() if "prompt tokens" in x)
        return int(line.split()[2].replace(",", ""))

    assert prompt_tokens(words.stdout) < prompt_tokens(margin.stdout)
    # and each says whose tokens it counted
    assert "counted with       cl100k and the margin (1.25 per cl100k token)" in margin.stdout
    assert "counted with       the tokenizer.json (" in words.stdout


def test_estimate_says_why_it_counted_with_the_margin(tmp_path):
    """A provider whose server cannot be reached: `shoal estimate` still predicts (with the
    margin), and a warning says why, naming the URL it asked and the connection error."""
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/v1"
        done = run_cli(["estimate", str(_llm_config(tmp_path, "e", base_urls=[url]))])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "counted with       cl100k and the margin (1.25 per cl100k token)" in done.stdout
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("warning: ")]
    assert line.startswith("warning: provider default: prompt tokens counted with cl100k "
                           f"and the margin: http://127.0.0.1:{port}/tokenize could not be "
                           "asked (ConnectError: "), line


def test_the_loopback_server_tokenizes_like_llama_cpp_and_vllm():
    import httpx

    server = serve_in_thread(seed=0)
    try:
        root = server.url.removesuffix("/v1")
        a = httpx.post(f"{root}/tokenize", json={"content": "abcdefghi"}).json()
        b = httpx.post(f"{root}/tokenize", json={"model": "m", "prompt": "abcdefghi"}).json()
        bad = httpx.post(f"{root}/tokenize", json={"nothing": 1})
    finally:
        server.stop()
    assert len(a["tokens"]) == 3 and a == b and a["count"] == 3
    assert bad.status_code == 400


def test_a_schema_request_gets_bare_json_from_the_loopback_server():
    server = serve_in_thread(seed=0)
    try:
        model = chat_model(_provider(server.url))
        sync = SyncChat(model)
        try:
            from shoal.llm.chat import ChatRequest

            reply = sync.chat(ChatRequest(
                messages=[{"role": "user", "content": "act"}],
                response_format=response_format(action_schema("twitter", [], [])),
                meta={"kind": "turn", "actions": ["post", "do_nothing"], "topics": []}))
        finally:
            sync.close()
    finally:
        server.stop()
    assert json.loads(reply.message["content"])["action"] in ("post", "do_nothing")


def test_a_budget_that_cannot_hold_the_tools_is_refused(tmp_path):
    """The budget covers the whole request: one smaller than the tool definitions is an
    error naming the field and the size it needs, before anything is written."""
    config = _llm_config(tmp_path, "tight")
    data = yaml.safe_load(config.read_text())
    data["memory"]["context"]["budget_tokens"] = 700
    out = tmp_path / "out"
    done = run_cli(["run", str(write_config(tmp_path / "tight.yaml", data)), "--out",
                    str(out), "--quiet"])
    assert done.returncode == 2, done.stderr[-2000:]
    assert "memory.context.budget_tokens: 700 leaves no room for the context" in done.stderr
    assert "raise it to at least" in done.stderr
    assert not out.exists() or not any(out.iterdir())


def test_auto_refuses_to_decide_without_an_answer():
    """An endpoint that does not answer teaches nothing: `auto` says so instead of
    settling the run on `text`."""

    with closed_port() as port:
        model = chat_model(_provider(f"http://127.0.0.1:{port}/v1", max_retries=0))
        sync = SyncChat(model)
        try:
            with pytest.raises(InputError, match="output: auto could not probe"):
                sync.run(probe(model), 60)
        finally:
            sync.close()


def test_auto_names_the_key_variable_when_the_server_refuses_the_key(monkeypatch):
    """A 401 is about the key, not the server: the message names the variable to check."""
    monkeypatch.setenv("SHOAL_TEST_PROBE_KEY", "not-the-key")
    server = serve_in_thread(seed=0, key="the-key")
    try:
        model = chat_model(_provider(server.url, max_retries=0,
                                     api_key_env="SHOAL_TEST_PROBE_KEY"))
        sync = SyncChat(model)
        try:
            with pytest.raises(InputError) as refused:
                sync.run(probe(model), 60)
        finally:
            sync.close()
    finally:
        server.stop()
    message = str(refused.value)
    assert "check the key in $SHOAL_TEST_PROBE_KEY (api_key_env)" in message
    assert "not-the-key" not in message and "start the server" not in message
