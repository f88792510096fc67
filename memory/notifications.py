"""Notifications: what others did to an agent since its last turn on a platform.

Replies, comments and quotes of its posts, likes, upvotes, downvotes and reposts of them,
and new followers, grouped per post so that a popular post costs one line, not fifty.
Like the digest, they are kept live only for agents whose context is built; an entry
is dropped once the agent has had a turn on that platform after it happened (it was
shown then). Entries are plain tuples, so they checkpoint as JSON; checkpoints journal
them (`take_changes`): a round's segment holds, for each queue that changed, what was
queued and how many notices were dropped (shoal.core.state.KeyedJournal).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.core.language import DEFAULT, Templates, templates
from shoal.core.state import KeyedJournal, State, queue_changes, queue_values, replay_queues
from shoal.memory.context import Line, quote

REPLIES = frozenset({"reply", "comment", "quote"})
REACTIONS = {"like": "liked", "upvote": "upvoted", "downvote": "downvoted",
             "repost": "reposted"}
FOLLOW = "follow"


@dataclass
class Notice:
    """One thing another account did to the agent."""

    round: int
    platform: str
    action: str  # reply, comment, quote, like, upvote, downvote, repost, follow
    who: str  # the other account's username
    post: int | None  # the agent's post it concerns
    text: str  # the agent's post's text (reactions) or the reply's text (replies)
    reply: int | None = None  # the reply's own post id

    def astuple(self) -> tuple:
        """The fields in order."""
        return (self.round, self.platform, self.action, self.who, self.post, self.text,
                self.reply)


class Notifications:
    """Bounded per-(agent, platform) queues of notices, dropped once seen."""

    def __init__(self, keep: int = 40, preview_chars: int = 160, minutes_per_round: int = 60):
        self.keep, self.preview_chars = keep, preview_chars
        self.minutes_per_round = minutes_per_round
        self.queues: dict[int, dict[str, deque[Notice]]] = {}
        self.journal = KeyedJournal()
        self.journaling = True  # False once restored from a full state (see set_state)
        self._dirty: set[tuple[int, str]] = set()

    def record(self, agent: int, notice: Notice) -> None:
        """Queue a notice for `agent`."""
        per = self.queues.setdefault(agent, {})
        per.setdefault(notice.platform, deque(maxlen=self.keep)).append(notice)
        self._dirty.add((agent, notice.platform))

    def seen(self, agent: int, platform: str, round_: int) -> None:
        """The agent had a turn on `platform` in `round_`: what happened before it was shown."""
        q = self.queues.get(agent, {}).get(platform)
        if q and q[0].round < round_:
            self._dirty.add((agent, platform))
        while q and q[0].round < round_:
            q.popleft()

    def lines(self, agent: int, platform: str, round_: int, language: str = DEFAULT
              ) -> list[Line]:
        """The notices waiting for `agent` on `platform` at the start of `round_`, in the
        agent's `language`."""
        notices = [n for n in self.queues.get(agent, {}).get(platform, ()) if n.round < round_]
        t = templates(language)
        out: list[Line] = []
        for n in notices:
            if n.action in REPLIES:
                out.append(Line(t(f"notifications.{n.action}", who=n.who, post=n.post,
                                  age=self._age(t, round_ - n.round),
                                  text=quote(n.text, self.preview_chars)),
                                {"kind": "observed", "post": n.reply, "rank": n.round}))
        reactions: dict[tuple[int | None, str], list[Notice]] = defaultdict(list)
        for n in notices:
            if n.action in REACTIONS:
                reactions[(n.post, n.action)].append(n)
        for (post, action), group in reactions.items():
            out.append(Line(t(f"notifications.{action}", who=_who(group, t), post=post,
                              text=quote(group[-1].text, self.preview_chars)),
                            {"kind": "observed", "post": post, "rank": group[-1].round}))
        followers = [n for n in notices if n.action == FOLLOW]
        if followers:
            out.append(Line(t.plural("notifications.followers", len(followers),
                                     who=_who(followers, t)),
                            {"kind": "observed", "rank": followers[-1].round}))
        return out

    def _age(self, t: Templates, rounds: int) -> str:
        minutes = rounds * self.minutes_per_round
        return t("time.minutes_ago", n=minutes) if minutes < 60 else \
            t("time.hours_ago", n=minutes // 60)

    def get_state(self) -> State:
        """Every queued notice (as field tuples), by agent and platform."""
        return State(meta={str(a): {p: [n.astuple() for n in q] for p, q in per.items()}
                           for a, per in self.queues.items()})

    def set_state(self, state: State) -> None:
        """Inverse of `get_state`. Restored this way (from a checkpoint that kept the whole
        state), the notifications are saved whole from then on: their log has no base."""
        self.queues = {int(a): {p: deque((Notice(*n) for n in q), maxlen=self.keep)
                                for p, q in per.items()} for a, per in state.meta.items()}
        self.journaling = False
        self._dirty.clear()

    def take_changes(self) -> State:
        """The (agent, platform) queues changed since the previous call, as journal
        splices."""
        return queue_changes(self.journal, self.queues, self._dirty)

    def replay(self, changes: Sequence[State]) -> None:
        """Become what the segments of `take_changes`, applied in order, make."""
        self.set_state(State(meta=replay_queues(changes)))
        self.journal.reset(queue_values(self.queues))
        self.journaling = True


def _who(notices: list[Notice], t: Templates | None = None, show: int = 3) -> str:
    """'@a', '@a and @b', '@a, @b, @c and 4 others' (distinct accounts, latest first; in
    the language of `t`, English by default)."""
    t = t or templates()
    sep = t.text("language.sep")
    names = list(dict.fromkeys(n.who for n in reversed(notices)))
    shown = [f"@{u}" for u in names[:show]]
    rest = len(names) - len(shown)
    if rest:
        return t.plural("notifications.others", rest, names=sep.join(shown))
    return shown[0] if len(shown) == 1 else t("notifications.both", first=sep.join(shown[:-1]),
                                              last=shown[-1])
