"""The action protocol of LLM agents: platform actions as tools, a JSON-in-text fallback,
tolerant reply parsing, and validation against what the agent can actually see.

Local and reasoning models are messy: tool calls with arguments wrapped in code fences,
answers after a `<think>` block or a paragraph of reasoning, JSON with trailing prose, an
empty `content` with everything in `reasoning_content`. `parse_reply` accepts all of
those; `validate` then checks the action is possible (the post is in this agent's feed,
the account exists, there is text to post) and returns a reason when it is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from shoal.core.language import DEFAULT, templates
from shoal.core.vocabulary import ACTION_NAMES, ActionType
from shoal.llm.chat import json_objects, strip_reasoning
from shoal.platforms.spec import spec

_POST_ARG = {"type": "integer", "description": "the id shown as [post N] in your feed"}
_TEXT_ARG = {"type": "string", "description": "what you write, in your own voice"}
_USER_ARG = {"type": "string", "description": "the account's @username, without the @"}

# action name -> (ActionType, required args, description)
ACTIONS = {
    "post": (ActionType.POST, ["text"], "Write a new post."),
    "repost": (ActionType.REPOST, ["post_id"], "Share a post from your feed as it is."),
    "quote": (ActionType.QUOTE, ["post_id", "text"], "Share a post with your own comment."),
    "reply": (ActionType.REPLY, ["post_id", "text"], "Reply to a post."),
    "comment": (ActionType.COMMENT, ["post_id", "text"], "Comment on a post."),
    "like": (ActionType.LIKE, ["post_id"], "Like a post."),
    "upvote": (ActionType.UPVOTE, ["post_id"], "Upvote a post."),
    "downvote": (ActionType.DOWNVOTE, ["post_id"], "Downvote a post."),
    "follow": (ActionType.FOLLOW, ["username"], "Follow an account."),
    "unfollow": (ActionType.UNFOLLOW, ["username"], "Stop following an account."),
    "buy": (ActionType.BUY, ["market", "outcome", "amount"],
            "Spend `amount` of your cash on shares of an outcome of a market."),
    "sell": (ActionType.SELL, ["market", "outcome", "amount"],
             "Sell `amount` shares you hold of an outcome of a market."),
    "do_nothing": (ActionType.DO_NOTHING, [], "Do nothing this turn."),
}
TRADES = {"buy", "sell"}
WRITES = {"post", "quote", "reply", "comment"}


def _params(name: str, topics: list[str], language: str = DEFAULT) -> dict:
    _, required, _ = ACTIONS[name]
    words = templates(language)  # the descriptions' language (the schema is the same)
    props: dict = {}
    if "post_id" in required:
        props["post_id"] = {**_POST_ARG, "description": words("tools.post_id")}
    if "text" in required:
        props["text"] = {**_TEXT_ARG, "description": words("tools.text")}
        props["stance"] = {
            "type": "object", "description": words("tools.stance"),
            "properties": {t: {"type": "number", "minimum": -1, "maximum": 1} for t in topics},
            "additionalProperties": False}
    if "username" in required:
        props["username"] = {**_USER_ARG, "description": words("tools.username")}
    if name in TRADES:
        props["market"] = {"type": "string", "description": words("tools.market")}
        props["outcome"] = {"type": "string", "description": words("tools.outcome")}
        props["amount"] = {"type": "number", "exclusiveMinimum": 0,
                           "description": words("tools.amount")}
    if name == "do_nothing":
        props["reason"] = {"type": "string"}
    return {"type": "object", "properties": props, "required": required}


def platform_actions(platform: str) -> list[str]:
    """The names of the actions an agent may take on `platform`, in its spec's order."""
    return [ACTION_NAMES[a] for a in spec(platform).actions]


def tools(platform: str, topics: list[str], language: str = DEFAULT) -> list[dict]:
    """OpenAI-style tool definitions for the platform's actions, described in `language`
    (names and arguments are the same in every language)."""
    words = templates(language)
    return [{"type": "function", "function": {
        "name": name, "description": words.get(f"tools.actions.{name}", ACTIONS[name][2]),
        "parameters": _params(name, topics, language)}}
            for name in platform_actions(platform)]


def json_instructions(platform: str, topics: list[str], language: str = DEFAULT) -> str:
    """The instruction for models without tool calling: answer with one JSON object (in
    `language`; the JSON's field names and action names are the same in every language)."""
    words = templates(language)
    names = ", ".join(platform_actions(platform))
    if TRADES & set(platform_actions(platform)):
        return words("tools.json_trades", names=names)
    return words("tools.json", names=names, topics=", ".join(topics))


@dataclass
class Parsed:
    """An action the model asked for (not yet validated)."""

    name: str
    args: dict


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def _clean(text: str) -> str:
    text = strip_reasoning(text)
    fenced = _FENCE.findall(text)
    return "\n".join(fenced) if fenced else text


def _arguments(raw) -> dict | None:
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return None
    for obj in json_objects(_clean(raw)):
        if isinstance(obj, dict):
            return obj
    return None


def parse_reply(message: dict) -> tuple[Parsed | None, str]:
    """The action in a chat-completions `message`, or None and why not."""
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        name = fn.get("name")
        args = _arguments(fn.get("arguments", {}))
        if name and args is not None:
            return Parsed(name, args), ""
        return None, f"tool call {name!r} with unparseable arguments"
    content = message.get("content") or ""
    if not content.strip():
        content = message.get("reasoning_content") or message.get("reasoning") or ""
        if not content.strip():
            return None, "empty reply"
    for obj in json_objects(_clean(content)):
        if isinstance(obj, dict):
            if "action" in obj:
                name = obj.pop("action")
                return Parsed(str(name), obj), ""
            if "name" in obj and "arguments" in obj:  # a tool call written as text
                args = _arguments(obj["arguments"])
                if args is not None:
                    return Parsed(str(obj["name"]), args), ""
    return None, "no action found in the reply"


def _trade(p: Parsed, out: Valid, markets: dict[str, list[str]]) -> tuple[Valid | None, str]:
    market = str(p.args.get("market", "")).strip().strip("[]")
    if market not in markets:
        return None, f"no market {market!r}; markets: {', '.join(markets) or 'none'}"
    outcomes = markets[market]
    outcome = str(p.args.get("outcome", "")).strip()
    if outcome not in outcomes:
        return None, f"market {market!r} has no outcome {outcome!r}; outcomes: " + \
            ", ".join(outcomes)
    try:
        amount = float(p.args.get("amount"))
    except (TypeError, ValueError):
        return None, f"amount {p.args.get('amount')!r} is not a number"
    if not (np.isfinite(amount) and amount > 0):
        return None, f"amount must be a positive number, got {amount}"
    out.market, out.outcome, out.amount = list(markets).index(market), \
        outcomes.index(outcome), amount
    return out, ""


@dataclass
class Valid:
    """A validated action, ready to become a row of the shard's ActionBatch."""

    action: ActionType
    post_id: int = -1
    target_agent: int = -1
    text: str = ""
    stance: dict | None = None  # self-reported stance per topic, if given
    market: int = -1  # a trade's market (index), outcome (index) and amount
    outcome: int = -1
    amount: float = float("nan")


def validate(p: Parsed, platform: str, feed: set[int], usernames: dict[str, int],
             agent: int, topics: list[str], markets: dict[str, list[str]] | None = None
             ) -> tuple[Valid | None, str]:
    """Check an action against the agent's situation; a reason when it is not possible.
    `markets`: each market's outcomes by id, in config order (for trades; whether the
    trader can afford one is the market's to check when it applies)."""
    if p.name not in platform_actions(platform):
        return None, f"unknown action {p.name!r} on {platform}"
    action, required, _ = ACTIONS[p.name]
    out = Valid(action)
    if p.name in TRADES:
        return _trade(p, out, markets or {})
    if "post_id" in required:
        try:
            out.post_id = int(p.args.get("post_id"))
        except (TypeError, ValueError):
            return None, f"post_id {p.args.get('post_id')!r} is not a number"
        if out.post_id not in feed:
            return None, f"post {out.post_id} is not in your feed"
    if "username" in required:
        name = str(p.args.get("username", "")).lstrip("@").strip()
        if name not in usernames:
            return None, f"no account @{name}"
        out.target_agent = usernames[name]
        if out.target_agent == agent:
            return None, "you cannot follow yourself"
    if "text" in required:
        out.text = " ".join(str(p.args.get("text", "")).split())
        if not out.text:
            return None, "text is empty"
        stance = p.args.get("stance")
        if isinstance(stance, dict) and stance:
            clean = {}
            for topic, value in stance.items():
                if topic not in topics:
                    return None, f"unknown topic {topic!r} in stance"
                try:
                    clean[topic] = float(np.clip(float(value), -1.0, 1.0))
                except (TypeError, ValueError):
                    return None, f"stance for {topic!r} is not a number"
            out.stance = clean
    return out, ""
