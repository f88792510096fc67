"""The `shoal` field: what a chat request is about, as data, for Shoal's loopback server.

Every request Shoal makes is built from typed data (an agent's feed, its beliefs, a
survey's items, the analyst's run facts); the prompt is that data in words. The loopback
server answers deterministically from the same data, which Shoal's client puts into the
request body as one top-level object, `"shoal": {"v": 1, "kind": ..., ...}`, built by the
code that builds the prompt (so the two cannot drift) and never read back from the
prompt's wording. The kinds and their fields (docs/llm.md, "The `shoal` field"):

- `turn`: `agent`, `username`, `round`, `platform`, `actions` (the platform's), `topics`,
  `feed` (`[{post, author}]`: the posts the observation shows, in its order) and `markets`
  (`{id: [outcomes]}`: the markets it shows);
- `interview`: `agent`, `round`, `name` (None when its line was trimmed) and `beliefs`
  (`[{about, stance, confidence}]`: the belief lines the system text keeps);
- `survey`: an interview's fields and `items` (`[{id, kind, about, points, reverse,
  range, options}]`: the questionnaire);
- a `turn`, an `interview` and a `survey` of an agent not spoken to in English also carry
  `language`, its BCP 47 tag (`Prompt.meta`'s; shoal.core.language): the loopback server
  answers in it;
- `summary`: `texts` (what is summarised or merged, oldest first), and `language` (the
  run's `population.language`) when that is not English;
- `extraction`: `text` (the text to read, as given);
- `analyst`: `call` (`plan` or `section`), `section` (its id), `topics` (`[[name,
  label]]`), `last_round`, `interventions` (how many fired), `compared` (the compared
  runs' labels), `graph_memory` (how many relations it holds) and `question`.

`stance` is one of `STANCES`, `confidence` one of `CONFIDENCES` (the bins of
`shoal.beliefs.render`, whose words the system text uses). Everything in the field is
already in the prompt in words, or is the agent's id: never a key, a URL or a header. It
is deterministic (made of the run's data, in a fixed order).

Where it is sent (`shoal.llm.openai.sends_field`): only to the loopback server, unless
the provider says otherwise (`shoal_field`): OpenAI refuses unknown body fields (and its
own `metadata` is a map of strings, allowed only with `store`), older vLLM refuses them
too and newer vLLM logs each one; llama.cpp and Ollama ignore them. It is not part of the
response cache's key (the key is the request as any server would see it), and the
loopback server draws its replies from the body without it, so sending it changes no
answer and no cache entry.
"""

from __future__ import annotations

from typing import Any

FIELD = "shoal"  # the top-level field of a request body
VERSION = 1
LOOPBACK_MODEL = "shoal-loopback"  # the one model the loopback server lists

TURN, INTERVIEW, SURVEY = "turn", "interview", "survey"
SUMMARY, EXTRACTION, ANALYST = "summary", "extraction", "analyst"

# The bins of shoal.beliefs.render, in its order: STANCE_BINS (strongly support first) and
# CONFIDENCE_LABELS (very sure first).
STANCES = ("strongly_support", "support", "undecided", "oppose", "strongly_oppose")
CONFIDENCES = ("very_sure", "fairly_confident", "not_sure", "uncertain")


def meta(kind: str, **fields: Any) -> dict[str, Any]:
    """The field's value for a request of `kind`."""
    return {"v": VERSION, "kind": kind, **fields}


def without_field(request: dict[str, Any]) -> dict[str, Any]:
    """A request body as a server that ignores the field sees it."""
    return {k: v for k, v in request.items() if k != FIELD}
