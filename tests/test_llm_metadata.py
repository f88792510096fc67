"""Issue #27: the loopback server reads what a request is about from its `shoal` field
(shoal.llm.metadata), built with the prompt from the same data, never from Shoal's prompt
wording; the field reaches the loopback server over real HTTP, is not sent to other
servers, and is no part of the response cache's key.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from dataclasses import replace

import orjson
import pytest
import yaml

import shoal.agents.prompt as prompt
import shoal.surveys.asking as asking
from shoal.agents.llm_tools import parse_reply
from shoal.cli.main import main
from shoal.config.llm import ProviderConfig
from shoal.llm.cache import request_key
from shoal.llm.chat import ChatRequest, SyncChat, chat_model
from shoal.llm.metadata import FIELD, LOOPBACK_MODEL, SUMMARY, TURN, meta
from shoal.llm.openai import sends_field
from shoal.llm.server import Faults, LoopbackServer, reply, serve_in_thread
from shoal.memory.compaction import Item
from shoal.memory.knowledge.llm_extractor import LLMExtractor
from shoal.memory.llm_summarizer import LLMSummarizer
from shoal.runs.interview import interview_agents
from tests.conftest import CONFIGS
from tests.helpers import make_config, query, run_config

SURVEY = {"name": "panel", "waves": [1, 2], "sample": {}, "items": [
    {"id": "good", "kind": "likert", "topic": "carbon_tax", "text": "The tax is good."},
    {"id": "hurts", "kind": "likert", "topic": "carbon_tax", "reverse": True,
     "points": 7, "text": "The tax hurts people like me."},
    {"id": "pay", "kind": "numeric", "topic": "nuclear_power", "range": [0, 50],
     "text": "How much would you pay?"},
    {"id": "vote", "kind": "single", "topic": "carbon_tax", "text": "Your vote?",
     "options": [{"label": "against", "position": -0.6}, {"label": "abstain", "position": 0},
                 {"label": "for", "position": 0.6}]},
    {"id": "which", "kind": "multiple", "topic": "nuclear_power", "text": "Which ones?",
     "options": [{"label": "none", "position": -0.5}, {"label": "some", "position": 0},
                 {"label": "all", "position": 0.5}]},
    {"id": "why", "kind": "text", "text": "Why?"}]}


def _data(url: str) -> dict:
    """The LLM quick start, small, pointed at `url`, with a survey; the budget is generous
    (nothing is trimmed, so a reworded prompt shows the same lines)."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=3, surveys=[SURVEY])
    data["population"]["size"] = 60
    data["llm"]["providers"][0].update(base_urls=[url], max_retries=1, timeout_s=10)
    data["llm"]["agents"]["fraction"] = 0.5
    data["interventions"][0]["round"] = 2
    data["memory"]["context"]["budget_tokens"] = 20_000
    return data


def _reworded(text: str) -> str:
    """Shoal's prompt markers said otherwise: feed lines, the persona line, beliefs, the
    questionnaire's item grammar (a reworded prompt must get the same answers)."""
    for old, new in (("[post ", "<item "), ("] @", "> from "), ("You are ", "Name: "),
                     ("On ", "About "), (" support", " favour"), (" oppose", " reject"),
                     ("undecided", "torn"), ("likert 1-", "scale to "), ("choice", "pick"),
                     ("numeric", "number"), (", about ", " / topic "), ("## ", "### ")):
        text = text.replace(old, new)
    return text


def _reword_prompts(monkeypatch) -> None:
    """Every section's title, intro and lines, and the questionnaire, reworded."""
    sections, questionnaire = prompt.sections, asking.questionnaire

    def sections_reworded(inp, specs=None):
        return [replace(s, title=_reworded(s.title).upper(), intro=_reworded(s.intro),
                        lines=[replace(ln, text=_reworded(ln.text)) for ln in s.lines])
                for s in sections(inp, specs)]

    monkeypatch.setattr(prompt, "sections", sections_reworded)
    monkeypatch.setattr(asking, "questionnaire",
                        lambda survey, labels: "Questionnaire (reworded)\n"
                        + _reworded(questionnaire(survey, labels)))


def _key_on_the_field(monkeypatch) -> None:
    """The server's draws keyed on the field (and the seed and the turn of the
    conversation) instead of the whole body: then only what the server reads could make
    a reworded prompt's answer differ."""
    complete = LoopbackServer.complete

    async def keyed(self, request, body, attempt):
        key = orjson.dumps([request.get("seed"), len(request.get("messages") or []),
                            request.get(FIELD)])
        return await complete(self, request, key, attempt)

    monkeypatch.setattr(LoopbackServer, "complete", keyed)


def _asked(run, server) -> dict:
    """The run's LLM turns, interviews and survey answers, and the fields the server got."""
    sent = len(server.state.requests)
    answers = interview_agents(str(run), list(range(0, 60, 3)), "What do you think?")
    assert main(["survey", str(run)]) == 0
    db = run / "trajectory.duckdb"
    requests = [e["request"] for e in server.state.requests]
    return {
        "actions": query(db, "SELECT round, platform, agent, slot, action, target_post, "
                             "target_agent, new_post_id, status, source FROM actions "
                             "ORDER BY ALL"),
        "posts": query(db, "SELECT post_id, author, kind, parent_id, text, stance_method "
                           "FROM posts ORDER BY post_id"),
        "interviews": [(i.agent, i.answer) for i in answers.interviews],
        "survey": query(db, "SELECT wave, agent, item, value, choice, text, abstained FROM "
                            "survey_responses WHERE source = 'llm' ORDER BY ALL"),
        "fields": sorted(json.dumps(r[FIELD], sort_keys=True) for r in requests),
        "requests": requests, "turns": requests[:sent],
        "trimmed": query(db, "SELECT count(*) FROM context WHERE trimmed <> '[]'")[0][0]}


def test_reworded_prompts_get_the_same_answers(tmp_path, monkeypatch):
    """Every context section, the feed's and the persona's lines, the beliefs' words and
    the survey's item grammar reworded: the agents act alike, interviews and surveys are
    answered alike, and the server was sent the same `shoal` fields."""
    _key_on_the_field(monkeypatch)
    server = serve_in_thread(seed=0)
    try:
        data = _data(server.url)
        plain = _asked(run_config(make_config(data, tmp_path / "plain")).dir.root, server)
        server.state.requests.clear()
        _reword_prompts(monkeypatch)
        other = _asked(run_config(make_config(data, tmp_path / "reworded")).dir.root, server)
    finally:
        server.stop()
    # the prompts did change: none of the old markers reached the server
    assert plain["trimmed"] == other["trimmed"] == 0
    old_users = " ".join(m["content"] for r in plain["turns"] for m in r["messages"]
                         if m["role"] == "user")
    new_users = " ".join(m["content"] for r in other["turns"] for m in r["messages"]
                         if m["role"] == "user")
    assert re.search(r"\[post \d+\] @", old_users) and not re.search(r"\[post \d+\]", new_users)
    said = " ".join(m["content"] for r in other["requests"] for m in r["messages"])
    assert "You are " not in said and "\nOn " not in said and "likert" not in said
    kinds = {r[FIELD]["kind"] for r in other["requests"]}
    assert kinds == {"turn", "interview", "survey"}
    assert any(r[FIELD]["feed"] for r in other["requests"] if r[FIELD]["kind"] == "turn")
    assert plain["fields"] == other["fields"]
    for what in ("actions", "posts", "interviews", "survey"):
        assert plain[what] == other[what], what
    # (and there was something to compare: LLM agents acting on their feeds, interviews
    # answered from beliefs, every survey item answered)
    assert any(r[-1] == "llm" and r[5] is not None for r in plain["actions"])
    assert any(a.startswith("Speaking for myself: I am ") for _, a in plain["interviews"])
    assert {row[2] for row in plain["survey"]} == {it["id"] for it in SURVEY["items"]}


def _scrambled(request: dict) -> dict:
    """The request with the text of every system, user and assistant message replaced:
    what is left is the field and the generic parts (tools, roles, tool results)."""
    return {**request, "messages": [
        m if m.get("role") == "tool" else {**m, "content": None if m.get("content") is None
                                           else "(the prompt, in other words)"}
        for m in request["messages"]]}


def test_no_reply_reads_the_prompt_text(tmp_path):
    """Requests of every kind Shoal makes (turns and repairs, interviews, surveys, the
    analyst's plan and sections, summaries, graph extraction), sent over HTTP: each
    carries the field, and the reply to it is the same with all its message text
    replaced."""
    server = serve_in_thread(seed=0, faults=Faults(malformed_rate=0.3))  # repairs too
    try:
        run = run_config(make_config(_data(server.url), tmp_path / "runs")).dir.root
        interview_agents(str(run), [0, 1, 2], "What do you think?")
        assert main(["survey", str(run)]) == 0
        assert main(["analyse", str(run), "--base-url", server.url, "--model",
                     LOOPBACK_MODEL, "--parallel", "1", "--question", "What moved you?"]) == 0
        provider = ProviderConfig(base_urls=[server.url], model=LOOPBACK_MODEL,
                                  max_retries=1)
        summarizer = LLMSummarizer(provider, 400, 80, 200)
        summarizer.summarize_round("Round 1:", [Item("Ana posted.", 1.0)])
        summarizer.merge("Long ago: quiet.", ["Round 2: Leo replied."])
        summarizer.close()
        extractor = LLMExtractor(provider)
        extractor.extract(["The Council backs the Levy. Greens oppose it."], {},
                          authors=["ana_kamau86"])
        extractor.close()
        requests = [e["request"] for e in server.state.requests]
    finally:
        server.stop()
    kinds = {r[FIELD]["kind"] for r in requests}
    assert kinds == {"turn", "interview", "survey", "analyst", "summary", "extraction"}
    assert any(m["role"] == "assistant" for r in requests if r[FIELD]["kind"] == "turn"
               for m in r["messages"]), "no repair was asked"
    for request in requests:
        want = reply(request, random.Random(7), False, False)
        assert reply(_scrambled(request), random.Random(7), False, False) == want, \
            request[FIELD]
    summaries = [reply(r, random.Random(0), False, False)["content"] for r in requests
                 if r[FIELD]["kind"] == SUMMARY]
    assert summaries == ["Ana posted.", "Long ago: quiet."]


@pytest.mark.parametrize("model, shoal_field, sent", [
    (LOOPBACK_MODEL, None, True),  # the loopback server's model: sent
    ("gpt-4o-mini", None, False),  # any other server: not sent
    ("gpt-4o-mini", True, True),
    (LOOPBACK_MODEL, False, False)])
def test_the_field_goes_to_the_loopback_server_only(model, shoal_field, sent):
    """Over real HTTP: the field reaches a provider that is the loopback server and no
    other (unless `shoal_field` says otherwise); the bytes before it are the body every
    other server gets, and the response cache's key is the same with or without it."""
    server = serve_in_thread(seed=0)
    try:
        provider = ProviderConfig(base_urls=[server.url], model=model, max_retries=0,
                                  shoal_field=shoal_field)
        client = chat_model(provider)
        about = meta(TURN, agent=3, username="ana_kamau86", round=1, platform="twitter",
                     actions=["post", "like", "do_nothing"], topics=["carbon_tax"],
                     feed=[{"post": 5, "author": "leo_ortiz34"}], markets={})
        request = ChatRequest([{"role": "system", "content": "You are Ana."},
                               {"role": "user", "content": "Your feed: post 5."}],
                              tools=None, seed=11, meta=about)

        async def ask():
            try:
                return await client.chat(request)
            finally:
                await client.close()

        answer = asyncio.run(ask())
        (entry,) = server.state.requests
    finally:
        server.stop()
    assert answer.status == "ok"
    got = entry["request"]
    assert (FIELD in got) is sent and got.get(FIELD, about) == about
    body = client.body(request)
    assert FIELD not in body and orjson.dumps({k: v for k, v in got.items() if k != FIELD}
                                              ) == orjson.dumps(body)
    assert request_key(body) == request_key(client.body(replace(request, meta=None)))
    # with the field, the turn is answered from it: an action on the feed's post
    if sent:
        action, _ = parse_reply(answer.message)
        assert action.name in about["actions"] and action.args.get("post_id", 5) == 5


def test_which_providers_are_sent_the_field():
    """`base_urls: [loopback]` and the model `shoal-loopback` mean the loopback server;
    anything else is not sent the field unless the provider asks for it."""
    assert sends_field(ProviderConfig(base_urls=["loopback"], model="m"))
    assert sends_field(ProviderConfig(base_urls=["http://127.0.0.1:9/v1"],
                                      model=LOOPBACK_MODEL))
    assert not sends_field(ProviderConfig(base_urls=["https://api.openai.com/v1"],
                                          model="gpt-4o-mini"))
    assert not sends_field(ProviderConfig(base_urls=["loopback"], model="m",
                                          shoal_field=False))
    assert sends_field(ProviderConfig(base_urls=["http://gpu-1:8000/v1"], model="q",
                                      shoal_field=True))


def test_a_sync_request_without_the_field_is_answered_as_a_plain_question():
    """A request from a client that is not Shoal's (no field): a question gets an answer
    of no known views, a turn an action that needs no feed."""
    server = serve_in_thread(seed=0)
    try:
        chat = SyncChat(chat_model(ProviderConfig(base_urls=[server.url], model="m",
                                                  max_retries=0)))
        said = chat.chat(ChatRequest([{"role": "user", "content": "hello"}]))
        chat.close()
    finally:
        server.stop()
    assert said.text == "Speaking for myself: I have not made up my mind."
