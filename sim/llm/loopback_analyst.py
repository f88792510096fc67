"""The loopback server's analyst: deterministic replies to `shoal analyse`'s requests, so
the whole pipeline (plan, tool calls, writing, verification, traces) runs without a model.

A plan request gets sections chosen from the run facts its `shoal` field carries
(interventions fired, compared runs, graph memory, a question). A section request gets a
fixed sequence of tool calls for its section id, then a `write_section` whose sentences
quote numbers from the tool results it received and cite them, so every citation
resolves. Nothing is read from the requests' wording: the field says which call it is, and
the tool results are the messages of role `tool`. A script (`shoal llm-serve --script
FILE`, JSON `{"plan" | section id: [message, ...]}`) replaces the n-th reply of a
conversation with its n-th message (`{"content": ...}` or `{"tool_calls": [{"name",
"arguments"}]}`), for tests of what the verifier catches.
"""

from __future__ import annotations

import json
import random


def analyst_reply(request: dict, meta: dict, rng: random.Random,
                  script: dict | None = None) -> dict:
    """The assistant message for an analyst request (`meta`: its `shoal` field)."""
    messages = request.get("messages", [])
    tools = [(t.get("function") or {}).get("name") for t in request.get("tools") or []]
    section = "plan" if meta.get("call") == "plan" else str(meta.get("section") or "?")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    scripted = (script or {}).get(section) or []
    if turn < len(scripted):
        return _message(scripted[turn], rng)
    if section == "plan":
        return _call(rng, "plan_sections", {"sections": _plan(meta)})
    results = [json.loads(m["content"]) for m in messages if m.get("role") == "tool"]
    calls = _calls(section, meta)
    forced = tools == ["write_section"]  # the tool budget is spent
    if len(results) < len(calls) and not forced:
        name, args = calls[len(results)]
        return _call(rng, name, args)
    return _call(rng, "write_section", {"text": _write(section, meta, results)})


def _topic(meta: dict) -> tuple[str, str]:
    """The run's first topic: its name and label ("" and "" without topics)."""
    topics = meta.get("topics") or [("", "")]
    name, label = topics[0]
    return str(name), str(label)


def _plan(meta: dict) -> list[dict]:
    sections = [("overview", "What happened", "The run in numbers: agents, rounds, posts."),
                ("opinion", "Opinion dynamics", "How positions moved and polarised."),
                ("engagement", "Engagement", "The posts that drew the most engagement.")]
    if meta.get("interventions"):
        sections.append(("interventions", "Interventions", "What the interventions did."))
    if meta.get("compared"):
        sections.append(("forks", "The counterfactuals", "How the compared runs diverge."))
    if meta.get("graph_memory"):
        sections.append(("knowledge", "What the graph memory holds", "Facts it kept."))
    if meta.get("question"):
        sections.append(("question", "The question", "Answer the question asked."))
    return [{"id": i, "title": t, "brief": b} for i, t, b in sections]


def _calls(section: str, meta: dict) -> list[tuple[str, dict]]:
    topic = _topic(meta)
    last = int(meta.get("last_round") or 0)
    compared = [str(c) for c in meta.get("compared") or ()]
    return {
        "overview": [("sql", {"query": "SELECT count(*) AS posts, count(DISTINCT author) "
                              "AS authors FROM posts WHERE author >= 0"}),
                     ("sql", {"query": "SELECT max(round) AS last_round, count(DISTINCT "
                              "agent) AS agents FROM beliefs"})],
        "opinion": [("metric", {"name": "polarization", "topic": topic[0]})],
        "engagement": [("top_posts", {"limit": 3})],
        "interventions": [("sql", {"query": "SELECT count(*) AS fired, min(round) AS "
                                   "first_round FROM interventions"})],
        "forks": [("divergence", {"run": compared[0] if compared else "B",
                                  "topic": topic[0]})],
        "knowledge": [("graph_search", {"query": topic[1] or topic[0], "limit": 3})],
        "question": [("interview", {"agents": [0, 1, 2], "round": last,
                                    "question": str(meta.get("question") or "")})],
    }.get(section, [])


def _write(section: str, meta: dict, results: list[dict]) -> str:
    """Sentences built from the results' rows, each citing the step it quotes."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return "The tools returned nothing to report for this section."
    first, label = ok[0], _topic(meta)[1] if meta.get("topics") else "the topic"
    rows = [dict(zip(first.get("columns", []), r, strict=False)) for r in first.get("rows", [])]
    step = first.get("step", 1)
    if section == "overview" and rows and len(ok) > 1:
        second = dict(zip(ok[1]["columns"], ok[1]["rows"][0], strict=False))
        return (f"By round {second['last_round']} the {second['agents']} agents had written "
                f"{rows[0]['posts']} posts [step {step}] [step {ok[1]['step']}]. "
                f"{rows[0]['authors']} different agents wrote at least one of them "
                f"[step {step}].")
    if section == "opinion" and rows:
        a, b = rows[0], rows[-1]
        return (f"On {label}, the standard deviation of positions went from {a['sd']:.3f} "
                f"at round {a['round']} to {b['sd']:.3f} at round {b['round']} [step {step}]. "
                f"The bimodality coefficient ended at {b['bimodality']:.2f} [step {step}].")
    if section == "engagement" and rows:
        p = rows[0]
        return (f"The most engaged post was post {p['post_id']} by @{p['author_username']}, "
                f"with {p['engagement']} engagements [step {step}] [post {p['post_id']}].")
    if section == "interventions" and rows:
        r = rows[0]
        return (f"{r['fired']} interventions fired, the first at round {r['first_round']} "
                f"[step {step}].")
    if section == "forks" and rows:
        r = rows[-1]
        return (f"At round {r['round']} the mean position on {label} was {r['mean_a']:.3f} "
                f"in this run and {r['mean_b']:.3f} in run {first.get('run')}, a difference "
                f"of {r['difference']:.3f} [step {step}].")
    if section == "knowledge" and rows:
        return f"The graph memory holds facts such as: “{rows[0]['fact']}” [step {step}]."
    if section == "question" and rows:
        sentences = [f"Agent {r['agent']} answered at round {first['round']}: "
                     f"“{r['answer']}” [step {step}]." for r in rows if r.get("answer")]
        return " ".join(sentences) or f"No agent answered [step {step}]."
    return f"The tools returned no rows for this section [step {step}]."


def _call(rng: random.Random, name: str, args: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{rng.randrange(10**9)}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)}}]}


def _message(scripted: dict, rng: random.Random) -> dict:
    """A scripted message in the wire format."""
    if scripted.get("tool_calls"):
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{rng.randrange(10**9)}", "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
            for c in scripted["tool_calls"]]}
    return {"role": "assistant", "content": scripted.get("content", "")}
