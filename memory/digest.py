"""The cross-platform digest: each agent's own recent actions, per platform.

On each platform an agent is shown what it did recently on the *other* platforms (MiroShark
defaults: keep 15 per platform, show 5, 200-character previews). Noise (doing nothing) is
never logged. Every line carries its provenance: round, platform, action and post.

The digest is kept live only for agents whose context is built during the run; for any
other agent it is rebuilt from the `actions` table with the same functions (`shoal
inspect`), since it is a function of the agent's logged actions.

Checkpoints journal it (`take_changes`): a round's segment holds, for each (agent,
platform) log that changed, what was appended and how many old entries fell off
(shoal.core.state.KeyedJournal), not every kept entry again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.core.language import DEFAULT, templates
from shoal.core.state import KeyedJournal, State, queue_changes, queue_values, replay_queues
from shoal.memory.context import Line, quote
from shoal.platforms.spec import label

# The actions the digest logs, with their English words (each language's are its
# templates' `digest.actions`).
LABELS = {
    "post": "you posted", "repost": "you reposted a post by {who}",
    "quote": "you quoted {who}", "reply": "you replied to {who}",
    "comment": "you commented on a post by {who}", "like": "you liked a post by {who}",
    "upvote": "you upvoted a post by {who}", "downvote": "you downvoted a post by {who}",
    "follow": "you followed {who}", "unfollow": "you unfollowed {who}",
}
NOISE = frozenset({"do_nothing", "refresh", "search"})


@dataclass
class Entry:
    """One logged action of the agent (a tuple of plain fields, for checkpoints)."""

    round: int
    platform: str
    action: str
    post: int | None  # the post made, or acted on
    who: str | None  # username of the other account, if any
    text: str  # the post's text (own post, or the one acted on)

    def astuple(self) -> tuple:
        """The fields in order."""
        return (self.round, self.platform, self.action, self.post, self.who, self.text)

    def render(self, preview_chars: int, platform: str | None = None,
               language: str = DEFAULT) -> str:
        """The entry as a digest line of the agent's language: `On <platform>, round N:
        you ...: "text"`."""
        t = templates(language)
        who = f"@{self.who}" if self.who else t("digest.someone")
        body = t("digest.text", text=quote(self.text, preview_chars)) if self.text else ""
        where = t.get(f"platforms.{platform or self.platform}.label",
                      label(platform or self.platform))
        return t("digest.line", platform=where, round=self.round,
                 action=t(f"digest.actions.{self.action}", who=who), text=body)


class CrossPlatformDigest:
    """Bounded per-(agent, platform) logs of own actions."""

    def __init__(self, keep: int = 15, show: int = 5, preview_chars: int = 200):
        self.keep, self.show, self.preview_chars = keep, show, preview_chars
        self.logs: dict[int, dict[str, deque[Entry]]] = {}
        self.journal = KeyedJournal()
        self.journaling = True  # False once restored from a full state (see set_state)
        self._dirty: set[tuple[int, str]] = set()

    def record(self, agent: int, entry: Entry) -> None:
        """Log one applied action of a social platform (noise is ignored). Actions on a
        platform with its own engine (the market's trades) are not the digest's: the
        driver never records them (that platform has its own context section), so a
        digest rebuilt from every logged action (`shoal inspect`) skips them too."""
        if entry.action in NOISE or entry.action not in LABELS:
            return
        per = self.logs.setdefault(agent, {})
        per.setdefault(entry.platform, deque(maxlen=self.keep)).append(entry)
        self._dirty.add((agent, entry.platform))

    def lines(self, agent: int, platform: str, language: str = DEFAULT) -> list[Line]:
        """Digest lines for `agent` acting on `platform`: its latest actions elsewhere,
        in its `language`."""
        out = []
        for other, entries in sorted(self.logs.get(agent, {}).items()):
            if other == platform or not entries:
                continue
            for e in list(entries)[-self.show:][::-1]:  # newest first
                out.append(Line(e.render(self.preview_chars, other, language),
                                {"kind": "observed", "rounds": [e.round, e.round],
                                 "platform": other, "action": e.action, "post": e.post,
                                 "rank": e.round}))
        return out

    def get_state(self) -> State:
        """Every kept entry (as field tuples), by agent and platform."""
        return State(meta={str(a): {p: [e.astuple() for e in q] for p, q in per.items()}
                           for a, per in self.logs.items()})

    def set_state(self, state: State) -> None:
        """Inverse of `get_state`. Restored this way (from a checkpoint that kept the whole
        state), the digest is saved whole from then on: its log has no base to build on."""
        self.logs = {int(a): {p: deque((Entry(*e) for e in q), maxlen=self.keep)
                              for p, q in per.items()} for a, per in state.meta.items()}
        self.journaling = False
        self._dirty.clear()

    def take_changes(self) -> State:
        """The (agent, platform) logs changed since the previous call, as journal splices."""
        return queue_changes(self.journal, self.logs, self._dirty)

    def replay(self, changes: Sequence[State]) -> None:
        """Become what the segments of `take_changes`, applied in order, make."""
        self.set_state(State(meta=replay_queues(changes)))
        self.journal.reset(queue_values(self.logs))
        self.journaling = True

