"""Round memory: what happened, across platforms, compacted as it ages.

Shape (MiroShark's, bounded and done right): the previous round in detail, the rounds
before it one line each, older history as one narrative, and pinned key moments that no
merge can remove. Each round the driver records the round's memory items (breaking news,
news posts, the most engaged posts, notable opinion shifts, activity); a background job
summarises the round into a line; once a round is older than `recent_rounds`, another job
merges its line into the narrative. Until a summary is ready a fallback line stands in.
Everything carries provenance (rounds and post ids covered), is logged to the `memory`
table, and is part of every checkpoint, pending work included. The checkpoint is a journal
(`take_changes`): a round's segment holds the items, summaries and jobs that changed in it
(shoal.core.state.KeyedJournal), not the whole window again.

The items and summaries are the run's, written once (in `population.language`); only the
words that frame them on an agent's lines ("Key moment (round 3): ...") are in each
agent's own language.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from shoal.core.language import DEFAULT, templates
from shoal.core.state import KeyedJournal, State
from shoal.memory.compaction import CompactionWorker, Item, Job, Summarizer
from shoal.memory.context import Line, inline


@dataclass
class MemoryItem:
    """One thing worth remembering about a round."""

    id: int
    round: int
    kind: str  # event | news | post | shift | stats
    text: str
    salience: float
    pinned: bool = False
    platform: str | None = None
    posts: list[int] = field(default_factory=list)
    audience: int | None = None  # id of an audience mask (targeted news); None: everyone


@dataclass
class Summary:
    """A compacted text and its state. `done` is the only state that is ever shown."""

    id: int
    kind: str  # "round" or "narrative"
    rounds: tuple[int, int]
    status: str = "pending"  # pending | done | failed (failed is still pending work)
    text: str = ""
    attempts: int = 0
    error: str = ""
    visible_from: int | None = None
    posts: list[int] = field(default_factory=list)


@dataclass
class MemorySettings:
    """The knobs of round memory (from the config's `memory` section)."""

    recent_rounds: int = 6
    merge_every: int = 1  # rounds folded into the narrative at once (docs/memory.md)
    detail_items: int = 8
    max_pinned_posts: int = 5
    max_pinned_shifts: int = 5
    retry_every: int = 1


class RoundMemory:
    """The memory state of a run and its compaction worker."""

    def __init__(self, settings: MemorySettings, summarizer: Summarizer):
        self.settings = settings
        self.summarizer = summarizer
        self.worker = CompactionWorker(summarizer)
        self.items: dict[int, list[MemoryItem]] = {}  # rounds not merged yet
        self.pinned: list[MemoryItem] = []
        self.summaries: dict[int, Summary] = {}  # round -> its summary (not merged yet)
        self.narrative: Summary | None = None  # the latest done narrative
        self.jobs: dict[int, Job] = {}  # pending work
        self.merged_upto = 0
        self.audiences: dict[int, np.ndarray] = {}
        self.next_id = 1
        self.log: list[dict] = []  # rows for the `memory` table, drained by the driver
        self._pending_narrative: Summary | None = None  # the narrative a merge job will make
        self.journal = KeyedJournal()
        self.journaling = True  # False once restored from a full state (see set_state)
        self._audiences_taken: set[int] = set()

    # ------------------------------------------------------------------ writing

    def new_id(self) -> int:
        """A fresh id for an item, summary or job."""
        self.next_id += 1
        return self.next_id - 1

    def record_round(self, round_: int, header: str, items: list[MemoryItem]) -> None:
        """Store a round's items, pin the salient ones, and start its summary."""
        self.items[round_] = items
        for item in items:
            self._log_item(round_, item)
            if item.pinned:
                self._pin(round_, item)
        # A round's summary (and the narrative it is merged into) is shown to everyone:
        # an item meant for an audience (targeted news) stays out of it, and reaches its
        # audience as a key moment or a line of the last round.
        public = [i for i in items if i.audience is None]
        job = Job(id=self.new_id(), kind="round", rounds=(round_, round_), header=header,
                  items=[Item(i.text, i.salience, i.pinned) for i in public])
        self.summaries[round_] = Summary(job.id, "round", (round_, round_),
                                         posts=sorted({p for i in public for p in i.posts}))
        self.jobs[job.id] = job
        self.worker.submit(job)
        self._log_summary(round_, self.summaries[round_])

    def _pin(self, round_: int, item: MemoryItem) -> None:
        """Keep a pinned item forever, except that only the most salient posts and shifts
        keep their pins (events always keep theirs)."""
        self.pinned.append(item)
        caps = {"post": self.settings.max_pinned_posts, "shift": self.settings.max_pinned_shifts}
        cap = caps.get(item.kind)
        same = [p for p in self.pinned if p.kind == item.kind]
        if cap is not None and len(same) > cap:
            weakest = min(same, key=lambda p: (p.salience, p.round))
            self.pinned.remove(weakest)
            weakest.pinned = False
            self.log.append({**self._item_row(round_, weakest), "status": "unpinned"})

    def boundary(self, round_: int) -> None:
        """Start of round `round_`: take finished compaction, retry failures, start merges."""
        wait = self.summarizer.deterministic
        self._take(self.worker.collect(self.jobs, wait=wait), round_)
        for job in self.jobs.values():  # retries and jobs restored from a checkpoint
            retry_due = job.failed_round < round_ and round_ % self.settings.retry_every == 0
            if not self.worker.running(job.id) and (not job.error or retry_due):
                self.worker.submit(job)
        self._maybe_merge(round_)
        if wait:  # deterministic work started here finishes before the round goes on
            self._take(self.worker.collect(self.jobs, wait=True), round_)

    def _take(self, outcomes, round_: int) -> None:
        """Apply finished attempts: done work becomes visible from this round; a failure
        is recorded and the job stays pending (it is retried, never counted as done)."""
        for outcome in outcomes:
            job = outcome.job
            job.attempts += 1
            target = self._summary_of(job)
            target.attempts = job.attempts
            if outcome.error is None:
                # A summary is a model's (or a plug-in's) text about what agents wrote: one
                # line that opens no section, whatever the model answered (docs/memory.md).
                target.status, target.text, target.error = "done", inline(outcome.text), ""
                target.visible_from = round_
                del self.jobs[job.id]
                if job.kind == "merge":
                    self._finish_merge(target)
            else:  # retried at a later boundary, never in the one that saw it fail
                target.status, target.error = "failed", outcome.error
                job.error, job.failed_round = outcome.error, round_
            self._log_summary(round_, target)

    def _summary_of(self, job: Job) -> Summary:
        if job.kind == "round":
            return self.summaries[job.rounds[0]]
        return self._pending_narrative

    def _maybe_merge(self, round_: int) -> None:
        """Merge the done round lines older than the recent window into the narrative."""
        if any(j.kind == "merge" for j in self.jobs.values()):
            return
        horizon = round_ - 1 - self.settings.recent_rounds
        rounds = []
        for r in range(self.merged_upto + 1, horizon + 1):
            s = self.summaries.get(r)
            if s is None or s.status != "done":
                break  # keep order: merge a contiguous prefix only
            rounds.append(r)
        # Folding several rounds at once leaves the memory section growing only at its end
        # between folds, so an agent's consecutive prompts share it (a server's prefix
        # cache reuses it) and fewer merge calls are made.
        if len(rounds) < self.settings.merge_every:
            return
        previous = self.narrative.text if self.narrative is not None else ""
        job = Job(id=self.new_id(), kind="merge", rounds=(1, rounds[-1]), previous=previous,
                  lines=[self.summaries[r].text for r in rounds])
        posts = sorted({p for r in rounds for p in self.summaries[r].posts}
                       | set(self.narrative.posts if self.narrative else []))
        self._pending_narrative = Summary(job.id, "narrative", (1, rounds[-1]), posts=posts)
        self.jobs[job.id] = job
        self.worker.submit(job)
        self._log_summary(round_, self._pending_narrative)

    def _finish_merge(self, narrative: Summary) -> None:
        """The new narrative replaces the old one; merged rounds leave the recent window
        (their pinned items stay pinned)."""
        self.narrative = narrative
        for r in range(self.merged_upto + 1, narrative.rounds[1] + 1):
            self.items.pop(r, None)
            self.summaries.pop(r, None)
        self.merged_upto = narrative.rounds[1]

    # ------------------------------------------------------------------ reading

    def lines(self, round_: int, agent: int, language: str = DEFAULT) -> list[Line]:
        """The memory section's lines for `agent` at the start of `round_` (display order;
        `rank` decides what a tight budget drops first), framed in its `language`."""
        t = templates(language)
        out: list[Line] = []
        seen = self._audience_ok(agent)
        last = round_ - 1
        for item in self.pinned:  # key moments, oldest first, never merged away
            if item.round < last and seen(item):
                out.append(_line(t("memory.key_moment", round=item.round, text=item.text),
                                 item, "pinned", 100 + item.salience))
        if self.narrative is not None and self.narrative.status == "done":
            n = self.narrative
            out.append(Line(t("memory.long_ago", first=n.rounds[0], last=n.rounds[1],
                              text=n.text),
                            {"kind": "summarized", "rounds": list(n.rounds), "posts": n.posts,
                             "summary": n.id, "rank": 40}))
        for r in range(self.merged_upto + 1, last):
            s = self.summaries.get(r)
            if s is not None and s.status == "done":
                out.append(Line(s.text, {  # the summary starts with the round's header
                    "kind": "summarized", "rounds": [r, r], "posts": s.posts, "summary": s.id,
                    "rank": 30 + r / max(round_, 1)}))
            else:
                n_items = len(self.items.get(r, []))
                out.append(Line(t("memory.pending", round=r, n=n_items),
                                {"kind": "fallback", "rounds": [r, r],
                                 "rank": 20 + r / max(round_, 1)}))
        detail = sorted((i for i in self.items.get(last, []) if seen(i)),
                        key=lambda i: (-i.salience, i.id))[: self.settings.detail_items]
        out += [_line(t("memory.last_round", text=i.text), i, "observed", 50 + i.salience)
                for i in detail]
        return out

    def _audience_ok(self, agent: int):
        def ok(item: MemoryItem) -> bool:
            if item.audience is None:
                return True
            mask = self.audiences[item.audience]
            return agent < len(mask) and bool(mask[agent])
        return ok

    # ------------------------------------------------------------------ logging, state

    def _item_row(self, round_: int, item: MemoryItem) -> dict:
        return {"round": round_, "id": item.id, "kind": item.kind, "level": "item",
                "text": item.text, "covers_from": item.round, "covers_to": item.round,
                "posts": item.posts, "pinned": item.pinned, "status": "recorded",
                "attempts": 0, "note": "", "audience": item.audience}

    def _log_item(self, round_: int, item: MemoryItem) -> None:
        self.log.append(self._item_row(round_, item))

    def _log_summary(self, round_: int, s: Summary) -> None:
        self.log.append({"round": round_, "id": s.id, "kind": s.kind, "level": "summary",
                         "text": s.text, "covers_from": s.rounds[0], "covers_to": s.rounds[1],
                         "posts": s.posts, "pinned": False, "status": s.status,
                         "attempts": s.attempts, "note": s.error, "audience": None})

    def drain_log(self) -> list[dict]:
        """Rows logged since the last call."""
        rows, self.log = self.log, []
        return rows

    def get_state(self) -> State:
        """Everything, pending jobs included."""
        arrays = {f"audience.{k}": v.copy() for k, v in self.audiences.items()}
        return State(arrays=arrays, meta=self._meta())

    def _meta(self) -> dict:
        """The JSON part of the state (fresh objects: nothing shared with live fields)."""
        return {
            "items": {str(r): [asdict(i) for i in items] for r, items in self.items.items()},
            "pinned": [asdict(i) for i in self.pinned],
            "summaries": {str(r): _summary_dict(s) for r, s in self.summaries.items()},
            "narrative": _summary_dict(self.narrative) if self.narrative else None,
            "pending_narrative": (_summary_dict(self._pending_narrative)
                                  if any(j.kind == "merge" for j in self.jobs.values())
                                  else None),
            "jobs": [j.to_dict() for j in self.jobs.values()],
            "merged_upto": self.merged_upto, "next_id": self.next_id,
        }

    def take_changes(self) -> State:
        """What changed since the previous call: the keys of the flattened state whose
        values changed (`KeyedJournal`), and the audience masks not taken yet (they never
        change once made)."""
        segment = self.journal.diff(_flatten(self._meta()))
        new = sorted(set(self.audiences) - self._audiences_taken)
        self._audiences_taken.update(new)
        return State(arrays={f"audience.{k}": self.audiences[k].copy() for k in new},
                     meta=segment)

    def replay(self, changes: Sequence[State]) -> None:
        """Become what the segments of `take_changes`, applied in order, make."""
        values: dict = {}
        arrays: dict[str, np.ndarray] = {}
        for change in changes:
            KeyedJournal.apply(values, change.meta)
            arrays.update(change.arrays)
        self.set_state(State(arrays=arrays, meta=_unflatten(values)))
        self.journal.reset(values)
        self.journaling = True
        self._audiences_taken = set(self.audiences)

    def set_state(self, state: State) -> None:
        """Inverse of `get_state`; pending jobs restart at the next boundary. Restored
        this way (from a checkpoint that kept the whole state), the memory is saved whole
        from then on: its log has no base a journal could build on."""
        meta, arrays = state.meta, state.arrays
        self.items = {int(r): [MemoryItem(**i) for i in items]
                      for r, items in meta.get("items", {}).items()}
        self.pinned = [MemoryItem(**i) for i in meta.get("pinned", [])]
        self.summaries = {int(r): _summary_from(s) for r, s in meta.get("summaries", {}).items()}
        self.narrative = _summary_from(meta["narrative"]) if meta.get("narrative") else None
        if meta.get("pending_narrative"):
            self._pending_narrative = _summary_from(meta["pending_narrative"])
        self.jobs = {j["id"]: Job.from_dict(j) for j in meta.get("jobs", [])}
        self.merged_upto = meta.get("merged_upto", 0)
        self.next_id = meta.get("next_id", 1)
        self.audiences = {int(k.split(".", 1)[1]): v.astype(bool) for k, v in arrays.items()
                          if k.startswith("audience.")}

    def close(self) -> None:
        """Stop the worker."""
        self.worker.close()


def _line(text: str, item: MemoryItem, kind: str, rank: float) -> Line:
    return Line(text, {"kind": kind, "rounds": [item.round, item.round], "posts": item.posts,
                       "item": item.id, "platform": item.platform, "rank": rank})


def _summary_dict(s: Summary) -> dict:
    d = asdict(s)
    d["rounds"] = list(s.rounds)
    return d


def _summary_from(d: dict) -> Summary:
    return Summary(**{**d, "rounds": tuple(d["rounds"])})


# The journal's keys: one per round's items, summary and job, so that a round's segment
# holds only what that round touched; a narrative's post ids (which only grow) apart from
# its text, so that they are journaled as what was appended.
_PER_KEY = ("items", "summaries")
_SUMMARIES = ("narrative", "pending_narrative")


def _flatten(meta: dict) -> dict:
    """`get_state().meta` as a flat mapping of journal keys to JSON values."""
    out: dict = {}
    for section in _PER_KEY:
        for r, value in meta[section].items():
            out[f"{section}.{r}"] = value
    for job in meta["jobs"]:
        out[f"jobs.{job['id']}"] = job
    for name in _SUMMARIES:
        if meta[name] is not None:
            out[name] = {k: v for k, v in meta[name].items() if k != "posts"}
            out[f"{name}.posts"] = meta[name]["posts"]
    for name in ("pinned", "merged_upto", "next_id"):
        out[name] = meta[name]
    return out


def _unflatten(values: dict) -> dict:
    """Inverse of `_flatten` (sections in ascending round / id order, as they were made)."""
    def section(name: str) -> list[tuple[int, object]]:
        return sorted((int(k.split(".", 1)[1]), v) for k, v in values.items()
                      if k.startswith(f"{name}."))
    meta: dict = {s: {str(r): v for r, v in section(s)} for s in _PER_KEY}
    meta["jobs"] = [v for _, v in section("jobs")]
    for name in _SUMMARIES:
        meta[name] = ({**values[name], "posts": values[f"{name}.posts"]}
                      if name in values else None)
    for name, default in (("pinned", []), ("merged_upto", 0), ("next_id", 1)):
        meta[name] = values.get(name, default)
    return meta
