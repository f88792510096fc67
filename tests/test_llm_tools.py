"""The LLM action protocol: tool definitions, tolerant reply parsing, validation."""

from __future__ import annotations

import json

import pytest

from shoal.agents.llm_tools import (
    Parsed,
    json_instructions,
    parse_reply,
    platform_actions,
    tools,
    validate,
)
from shoal.core.vocabulary import ActionType
from shoal.llm.chat import strip_reasoning

TOPICS = ["carbon_tax", "nuclear_power"]
USERS = {"ana": 0, "bo": 1, "cy": 2}


def tool_call(name: str, arguments) -> dict:
    """An assistant message with one tool call."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}]}


def test_tools_offer_each_platforms_actions_with_stance_on_writes():
    for platform, names in ((p, platform_actions(p)) for p in ("twitter", "reddit")):
        defs = tools(platform, TOPICS)
        assert [d["function"]["name"] for d in defs] == names
        for d in defs:
            props = d["function"]["parameters"]["properties"]
            writes = "text" in d["function"]["parameters"]["required"]
            assert ("stance" in props) == writes
            if writes:
                assert set(props["stance"]["properties"]) == set(TOPICS)
    assert "comment" not in platform_actions("twitter") and "like" not in platform_actions("reddit")
    assert "carbon_tax, nuclear_power" in json_instructions("reddit", TOPICS)


@pytest.mark.parametrize("message, expected", [
    (tool_call("like", {"post_id": 12}), ("like", {"post_id": 12})),
    (tool_call("reply", '```json\n{"post_id": 3, "text": "No."}\n```'),
     ("reply", {"post_id": 3, "text": "No."})),
    ({"content": '{"action": "post", "text": "Hi"}'}, ("post", {"text": "Hi"})),
    ({"content": '```json\n{"action": "upvote", "post_id": 5}\n```'}, ("upvote", {"post_id": 5})),
    ({"content": '<think>The feed shows {"x": 1}... I should like 7.</think>\n'
                 '{"action": "like", "post_id": 7}'}, ("like", {"post_id": 7})),
    ({"content": 'I think I will do this: {"action": "follow", "username": "bo"} -- done.'},
     ("follow", {"username": "bo"})),
    ({"content": "", "reasoning_content": 'Thinking... {"action": "do_nothing"}'},
     ("do_nothing", {})),
    ({"content": '{"name": "repost", "arguments": {"post_id": 9}}'}, ("repost", {"post_id": 9})),
    ({"content": 'Reasoning first.</think>{"action": "like", "post_id": 2}'},
     ("like", {"post_id": 2})),
])
def test_parse_reply_accepts_messy_answers(message, expected):
    parsed, why = parse_reply(message)
    assert why == "" and parsed is not None
    assert (parsed.name, parsed.args) == expected


@pytest.mark.parametrize("message, reason", [
    ({"content": None}, "empty reply"),
    ({"content": "   ", "reasoning_content": ""}, "empty reply"),
    ({"content": "I would rather not say."}, "no action found"),
    (tool_call("like", "{'post_id': oops"), "unparseable arguments"),
])
def test_parse_reply_says_why_it_failed(message, reason):
    parsed, why = parse_reply(message)
    assert parsed is None and reason in why


@pytest.mark.parametrize("parsed, platform, reason", [
    (Parsed("like", {"post_id": 99}), "twitter", "post 99 is not in your feed"),
    (Parsed("like", {"post_id": "seven"}), "twitter", "is not a number"),
    (Parsed("upvote", {"post_id": 1}), "twitter", "unknown action 'upvote' on twitter"),
    (Parsed("follow", {"username": "nobody"}), "twitter", "no account @nobody"),
    (Parsed("follow", {"username": "@ana"}), "twitter", "cannot follow yourself"),
    (Parsed("post", {"text": "   "}), "reddit", "text is empty"),
    (Parsed("post", {"text": "x", "stance": {"taxes": 1}}), "reddit", "unknown topic 'taxes'"),
    (Parsed("post", {"text": "x", "stance": {"carbon_tax": "lots"}}), "reddit", "not a number"),
])
def test_validate_rejects_impossible_actions(parsed, platform, reason):
    valid, why = validate(parsed, platform, {1, 2, 3}, USERS, agent=0, topics=TOPICS)
    assert valid is None and reason in why


def test_validate_builds_the_action():
    valid, _ = validate(Parsed("quote", {"post_id": 2, "text": " so\n true ",
                                         "stance": {"carbon_tax": 3}}),
                        "twitter", {1, 2}, USERS, agent=0, topics=TOPICS)
    assert valid.action == ActionType.QUOTE and valid.post_id == 2 and valid.text == "so true"
    assert valid.stance == {"carbon_tax": 1.0}  # clipped to the scale
    valid, _ = validate(Parsed("follow", {"username": "@cy"}), "reddit", set(), USERS, 0, TOPICS)
    assert valid.action == ActionType.FOLLOW and valid.target_agent == 2


def test_strip_reasoning():
    assert strip_reasoning("<think>a\nb</think>\n Answer.") == "Answer."
    assert strip_reasoning("half a thought</think>Answer.") == "Answer."
    assert strip_reasoning("Plain.") == "Plain."
