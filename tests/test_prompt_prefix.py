"""Prompts a server can prefix-cache: the sections from the most stable to the most
volatile, the measured reuse of each agent's previous prompt (per call and per round),
the server's cached tokens recorded, and all of it identical across a resume."""

from __future__ import annotations

import json
import random

import httpx
import pytest
import yaml

from shoal.agents.prompt import INTERVIEW, ContextInputs, FeedItem, build_context
from shoal.llm.server import BLOCK_TOKENS, PrefixCache, serve_in_thread
from shoal.memory.context import Line
from shoal.memory.prefix_reuse import PrefixReuse, reused_tokens
from shoal.memory.tokens import encoding
from shoal.runs.simulation import Simulation
from tests.conftest import CONFIGS
from tests.helpers import make_config, query, tables_differ

SYSTEM_ORDER = ["Who you are", "How to act", "What you think", "What has happened so far",
                "Breaking news", "Your recent activity on other platforms",
                "What you can do on Twitter", "What you know"]
ENDS = ["word", "1234", "end.", 'said "so"', "trailing space ", "tab\t", "nl\n", "it's",
        "naïve", "中文", "😀", "…", "#", "## ", "- ", '"', "x  \n ", "'", "    indented", "\t",
        ".\n\n", "\r\n", " "]
TRAITS = ["patient", "sceptical", "curious", "blunt", "warm", "dry", "careful", "restless"]


def _inputs(platform: str = "twitter", **over) -> ContextInputs:
    base = dict(
        round=4, platform=platform, name="Ada Lovelace", username="ada_l0", bio="Bio.",
        persona="A persona.", group=None, beliefs=["On the tax: you support it; unsure."],
        trusted=["bob_1"], distrusted=[], memory=[Line("Round 2: something happened.")],
        digest=[Line('On Reddit, round 3: you posted: "x"')],
        events=[Line('- "BREAKING: news" (until round 5)')],
        feed=[FeedItem(i, "bob_1", "post", "text " * 20, 1) for i in range(3)],
        notifications=[Line("@bob_1 liked your post")], knowledge=[Line("- a fact")])
    return ContextInputs(**{**base, **over})


def _titles(text: str) -> list[str]:
    return [ln[3:] for ln in text.splitlines() if ln.startswith("## ")]


def test_sections_go_from_stable_to_volatile():
    """System text: persona, how to act, beliefs, memory, events, digest, the platform's
    actions, knowledge; the observation: notifications, then the feed. Neither persona
    nor how-to-act names the platform or the round, so they are the same on every
    platform; the trimming priorities are the sections' own."""
    a = build_context(_inputs(), budget=2500)
    assert _titles(a.system) == SYSTEM_ORDER
    assert _titles(a.observation) == ["Since your last turn here",
                                      "Your Twitter feed (round 4, newest first)"]
    b = build_context(_inputs("reddit", round=9), budget=2500)
    head = "".join(a.pieces[:4])  # persona, how to act, beliefs, memory
    assert b.system.startswith(head) and "Twitter" not in head
    assert "".join(a.pieces[:len(_titles(a.system))]) == a.system
    assert "".join(a.pieces[len(_titles(a.system)):]) == a.observation
    # Under a tight budget the digest and memory still give way before the actions.
    tight = build_context(_inputs(memory=[Line("memory " * 40)] * 20), budget=500)
    assert {t.section for t in tight.trimmed} >= {"memory"}
    assert "actions" not in {t.section for t in tight.trimmed}
    # An interview: the same order, no actions, no observation.
    i = build_context(_inputs(INTERVIEW, feed=[], notifications=[]), budget=2500)
    assert _titles(i.system) == ["Who you are", "How to act", "What you think",
                                 "What has happened so far", "Breaking news",
                                 "Your recent activity", "What you know"]
    assert i.observation == ""


def test_the_last_rounds_details_follow_the_news():
    """The round memory's last-round details (they change every round) are a section of
    their own after the memory and the breaking news; the memory keeps its other lines."""
    memory = [Line("Round 2: a summary", {"kind": "summarized"}),
              Line("Last round: @ann said so", {"kind": "observed"})]
    a = build_context(_inputs(memory=memory), budget=2500)
    titles = _titles(a.system)
    assert titles.index("Last round") == titles.index("Breaking news") + 1
    assert "Round 2: a summary" in a.system.split("## Breaking news")[0]
    assert "@ann said so" in a.system.split("## Last round")[1]
    assert "Last round" not in _titles(build_context(_inputs(), budget=2500).system)


def test_reused_tokens_are_the_common_token_prefix():
    """The measure equals the longest common prefix of the two prompts' cl100k tokens,
    whether they differ inside a piece, at a piece's end, or not at all."""
    enc = encoding()
    a = build_context(_inputs(), budget=2500)
    variants = [_inputs(), _inputs(feed=[]), _inputs("reddit"), _inputs(beliefs=["Other."]),
                _inputs(memory=[Line("Round 2: something happened."), Line("More.")]),
                _inputs(persona="A persona, longer.")]
    for inp in variants:
        b = build_context(inp, budget=2500)
        ta = enc.encode_ordinary(a.system) + enc.encode_ordinary(a.observation)
        tb = enc.encode_ordinary(b.system) + enc.encode_ordinary(b.observation)
        common = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y),
                      min(len(ta), len(tb)))
        assert reused_tokens(a.pieces, b.pieces) == common
    assert reused_tokens(a.pieces, a.pieces) == a.total_tokens
    # Lines ending (and starting) in every way cl100k's pre-tokenizer tells apart.
    rng = random.Random(3)
    for _ in range(300):
        texts = [[rng.choice(ENDS) + " " + rng.choice(ENDS) for _ in range(6)] for _ in "ab"]
        texts[1][:3] = texts[0][:3]
        joined = ["## A\n" + "\n".join(t) for t in texts]
        ta, tb = (enc.encode_ordinary(t) for t in joined)
        common = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y),
                      min(len(ta), len(tb)))
        assert reused_tokens([joined[0]], [joined[1]]) == common
    memo = PrefixReuse()
    assert memo.measure(7, a.pieces) == 0 and memo.measure(7, a.pieces) == a.total_tokens
    again = PrefixReuse()
    again.set_state(memo.get_state())
    assert again.previous == memo.previous


def test_loopback_prefix_cache_counts_leading_blocks():
    """Chained block hashes: a shared start is reused, the same blocks after a different
    start are not, and the least recently used blocks are evicted."""
    cache = PrefixCache(blocks=8)
    width = BLOCK_TOKENS * 4
    a, b, c = "a" * width * 3, "b" * width, "c" * width
    assert cache.admit(a + b) == 0
    assert cache.admit(a + c) == 3 * BLOCK_TOKENS
    assert cache.admit(c + a) == 0  # the same text after another start is another block
    assert cache.admit("x" * width * 8) == 0  # fills the cache: the rest is evicted
    assert cache.admit(a) == 0


def _profiles(n: int) -> list[dict]:
    """Profiles with personas of a paragraph, as LLM simulations give their agents."""
    out = []
    for i in range(n):
        trait = TRAITS[i % len(TRAITS)]
        out.append({"name": f"Person {i}", "username": f"person_{i}",
                    "bio": f"A {trait} reader of the news, number {i}.",
                    "persona": (f"You are {trait} by nature. " + " ".join(
                        f"You care about your town, your work and your family ({k})."
                        for k in range(12)))})
    return out


def _config(url: str, tmp_path, rounds: int = 4) -> dict:
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps(_profiles(24)))
    data.update(rounds=rounds, population={"file": str(profiles)}, interventions=[])
    data["platforms"]["twitter"]["feed_size"] = 3
    data["platforms"]["reddit"] = {"members": {"fraction": 1.0}, "feed_size": 3}
    data["llm"]["providers"][0].update(base_urls=[url], max_retries=1, timeout_s=10)
    data["llm"]["agents"]["fraction"] = 0.5
    data["memory"]["detail_items"] = 3
    return data


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A small LLM run against its own loopback server."""
    server = serve_in_thread(seed=0)
    try:
        tmp = tmp_path_factory.mktemp("prefix")
        data = _config(server.url, tmp)
        with Simulation.create(make_config(data, tmp / "runs")) as sim:
            sim.run()
        requests = httpx.get(server.url.replace("/v1", "/_shoal/requests")).json()["requests"]
    finally:
        server.stop()
    return sim.dir, data, requests


def test_reuse_is_reported_per_call_and_per_round(reference):
    """After round 3 more than half of the prompt tokens repeat the agent's previous
    prompt; the round's share is the calls' reused tokens over their prompt tokens."""
    run_dir, _, _ = reference
    db = run_dir.db
    rounds = dict(query(db, "SELECT round, prefix_reuse FROM rounds"))
    assert all(rounds[r] >= 0.5 for r in rounds if r >= 3), rounds
    turns = query(db, """SELECT round, sum(reused_tokens),
        sum(CAST(json_extract(section_tokens, '$.total') AS INTEGER))
        FROM llm_calls WHERE call = 1 AND retries = 0 AND agent IS NOT NULL GROUP BY round""")
    assert len(turns) == len(rounds)
    for r, reused, total in turns:
        assert reused == pytest.approx(rounds[r] * total)
    first = query(db, "SELECT min(reused_tokens) FROM llm_calls WHERE round = 1")[0][0]
    assert first == 0  # nobody had a previous prompt


def test_cached_tokens_come_from_the_server(reference):
    """Every answer's cached tokens are what the server said, and after round 1 the
    server had prefixes of the agents' earlier prompts."""
    run_dir, _, requests = reference
    rows = query(run_dir.db, "SELECT round, cached_tokens, prompt_tokens FROM llm_calls "
                             "WHERE status = 'ok'")
    assert rows and all(c is not None and 0 <= c <= p for _, c, p in rows)
    assert all(c > 0 for r, c, _ in rows if r > 1)
    assert len(requests) == len(rows)


def test_resume_gives_identical_tables(reference, tmp_path):
    """Stopped after round 2 and resumed (with a new server, its cache empty), the run
    has the reference's tables, the reuse columns included (cached_tokens depends on the
    server's history: it is left out, as in the golden digests)."""
    ref_dir, data, _ = reference
    server = serve_in_thread(seed=0)
    try:
        cfg = make_config({**data, "llm": {**data["llm"], "providers": [
            {**data["llm"]["providers"][0], "base_urls": [server.url]}]}}, tmp_path)
        with Simulation.create(cfg) as sim:
            sim.run(2)
        with Simulation.resume(sim.dir.root) as again:
            again.run()
    finally:
        server.stop()
    assert tables_differ(ref_dir.db, again.dir.db) == []
    reuse = query(again.dir.db, "SELECT count(*) FROM rounds WHERE prefix_reuse > 0")[0][0]
    assert reuse == data["rounds"]


def test_a_cached_answer_keeps_the_cached_tokens_it_was_given():
    """An answer from the response cache reports what the server said when it was
    recorded, not what the server would say now; a server that says nothing gives None."""
    import asyncio

    from shoal.config.llm import ProviderConfig
    from shoal.llm.cache import CachedChat, CacheSpec, ResponseCache
    from shoal.llm.chat import ChatRequest, call_rows, chat_model

    server = serve_in_thread(seed=0)
    try:
        provider = ProviderConfig(base_urls=[server.url], model="m", max_retries=0)
        system = {"role": "system", "content": "You are a careful reader. " * 40}
        ask = ChatRequest([system, {"role": "user", "content": "Say something. " * 20}],
                          seed=1)

        async def go():
            plain = chat_model(provider)
            cached = CachedChat(chat_model(provider),
                                ResponseCache(CacheSpec("auto", "r1", None)))
            warm = await plain.chat(ChatRequest([system, {"role": "user", "content": "Hi."}]))
            first = await cached.chat(ask)  # asked: the system text is in the server's cache
            now = await plain.chat(ask)  # the server has the whole prompt now
            again = await cached.chat(ask)  # answered by the response cache
            await plain.close()
            await cached.close()
            return warm, first, now, again

        warm, first, now, again = asyncio.run(go())
    finally:
        server.stop()
    assert warm.cached_tokens == 0 < first.cached_tokens < now.cached_tokens
    assert again.attempts[-1].cache == "hit" and again.cached_tokens == first.cached_tokens
    row = call_rows(again, provider, round_=1, agent=0, platform="twitter")[0]
    assert row["cached_tokens"] == first.cached_tokens and row["reused_tokens"] is None
