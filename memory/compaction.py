"""Compaction of round memory: summarisers and the background worker that runs them.

A summariser turns a round's memory items into one line, and a few round lines plus the
previous narrative into a new narrative. It reads *all* of its input: a long input is
split into chunks of at most `input_tokens`, each chunk is summarised, and the parts are
combined (map, then reduce). Nothing is cut to its last N tokens, so a fact early in a
long round is as safe as a late one.

The worker runs jobs on a background thread; the round loop never waits on it (except for
the deterministic extractive summariser, whose jobs take microseconds and whose results
are collected at the next round boundary, so runs stay reproducible). A job that fails is
recorded with its error, stays pending and is retried; it never counts as done.
"""

from __future__ import annotations

import concurrent.futures as cf
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal

from shoal.config.base import Strict
from shoal.core.language import DEFAULT
from shoal.core.registry import SUMMARIZERS
from shoal.memory.tokens import count, truncate


@dataclass
class Item:
    """What a summariser reads: a memory item's text, salience and pin."""

    text: str
    salience: float
    pinned: bool = False


def chunks(items: list[Item], input_tokens: int) -> list[list[Item]]:
    """Consecutive groups of items of at most `input_tokens` tokens (an item larger than
    that is a group of its own, never cut)."""
    groups: list[list[Item]] = []
    current: list[Item] = []
    used = 0
    for item in items:
        n = count(item.text) + 1
        if current and used + n > input_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(item)
        used += n
    if current:
        groups.append(current)
    return groups


class Summarizer(ABC):
    """Summarises rounds and merges summaries. `deterministic` summarisers are collected
    synchronously at the next round boundary."""

    deterministic: bool = False
    name: str = "summarizer"
    calls = None  # a summariser that calls a model keeps its `llm_calls` rows here (CallLog)
    # The run's language (`population.language`, set by the world): round memory is
    # written once for everyone, in it, so a model is asked to summarise in it too.
    language: str = DEFAULT

    @abstractmethod
    def summarize_round(self, header: str, items: list[Item]) -> str:
        """One line for a whole round."""

    @abstractmethod
    def merge(self, previous: str, lines: list[str]) -> str:
        """A narrative of `previous` (may be empty) followed by the given round lines."""

    def close(self) -> None:  # noqa: B027 (only summarisers holding connections need it)
        """Release connections (called when the memory closes)."""


class ExtractiveConfig(Strict):
    """The extractive summariser: no model, the most salient items kept whole."""

    kind: Literal["extractive"] = "extractive"


@dataclass
class ExtractiveSummarizer(Summarizer):
    """No model: keep the most salient items, in full sentences, within a token cap."""

    input_tokens: int = 400
    summary_tokens: int = 80
    narrative_tokens: int = 200
    deterministic: bool = True
    name: str = "extractive"

    def summarize_round(self, header: str, items: list[Item]) -> str:
        # Map: the most salient item of every chunk (pinned ones always). Reduce: the best
        # of those, in order of salience, while they fit.
        picked: list[Item] = []
        for group in chunks(items, self.input_tokens):
            picked += [i for i in group if i.pinned]
            best = max((i for i in group if not i.pinned), key=lambda i: i.salience,
                       default=None)
            if best is not None:
                picked.append(best)
        picked.sort(key=lambda i: (-i.pinned, -i.salience))
        texts = list(dict.fromkeys(i.text for i in picked))  # dedup, keep order
        return self._fit([header, *texts], self.summary_tokens)

    def merge(self, previous: str, lines: list[str]) -> str:
        # Older material first, then the rounds being merged; sentences that do not fit are
        # dropped from the oldest end (pinned items are kept outside the narrative).
        parts = ([previous] if previous else []) + [ln for ln in lines if ln not in previous]
        parts = list(dict.fromkeys(parts))  # dedup, keep order
        while len(parts) > 1 and count(" ".join(parts)) > self.narrative_tokens:
            parts.pop(0)
        return truncate(" ".join(parts), self.narrative_tokens)

    @staticmethod
    def _fit(parts: list[str], max_tokens: int) -> str:
        """Whole parts while they fit; the first one that does not is cut to the space
        left, so a summary is never just its header."""
        out = parts[0]
        for part in parts[1:]:
            candidate = f"{out} {part}"
            if count(candidate) > max_tokens:
                room = max_tokens - count(out) - 1
                if room > 8:
                    out = f"{out} {truncate(part, room)}"
                break
            out = candidate
        return truncate(out, max_tokens)


@SUMMARIZERS.register("extractive", config=ExtractiveConfig)
def extractive(cfg: ExtractiveConfig, memory, llm) -> ExtractiveSummarizer:
    """The extractive summariser for a `memory` config (`llm` is not used)."""
    return ExtractiveSummarizer(memory.input_tokens, memory.summary_tokens,
                                memory.narrative_tokens)


@dataclass
class Job:
    """A compaction to do: summarise a round, or merge rounds into the narrative."""

    id: int
    kind: str  # "round" or "merge"
    rounds: tuple[int, int]  # first and last round covered
    header: str = ""
    items: list[Item] = field(default_factory=list)
    previous: str = ""
    lines: list[str] = field(default_factory=list)
    attempts: int = 0
    error: str = ""
    failed_round: int = -1  # the boundary at which the last attempt failed

    def run(self, summarizer: Summarizer) -> str:
        """Do the work (raises on failure, as for a summary that is not text)."""
        if self.kind == "round":
            text = summarizer.summarize_round(self.header, self.items)
        else:
            text = summarizer.merge(self.previous, self.lines)
        if not isinstance(text, str):  # (a plug-in's: kept, it would be a NULL summary)
            raise TypeError(f"the summarizer {type(summarizer).__name__} returned "
                            f"{type(text).__name__}, not the summary's text")
        return text

    def to_dict(self) -> dict:
        """JSON-able form (checkpoints keep pending work)."""
        return {"id": self.id, "kind": self.kind, "rounds": list(self.rounds),
                "header": self.header,
                "items": [[i.text, i.salience, i.pinned] for i in self.items],
                "previous": self.previous, "lines": list(self.lines), "attempts": self.attempts,
                "error": self.error, "failed_round": self.failed_round}

    @classmethod
    def from_dict(cls, d: dict) -> Job:
        """Inverse of `to_dict`."""
        return cls(id=d["id"], kind=d["kind"], rounds=tuple(d["rounds"]), header=d["header"],
                   items=[Item(t, s, p) for t, s, p in d["items"]], previous=d["previous"],
                   lines=d["lines"], attempts=d["attempts"], error=d["error"],
                   failed_round=d.get("failed_round", -1))


@dataclass
class Outcome:
    """A finished attempt: the text, or the error that makes the job stay pending."""

    job: Job
    text: str | None
    error: str | None


class CompactionWorker:
    """Runs jobs on one background thread; `collect` hands back finished attempts."""

    def __init__(self, summarizer: Summarizer):
        self.summarizer = summarizer
        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="shoal-compact")
        self._running: dict[int, cf.Future] = {}

    def submit(self, job: Job) -> None:
        """Start an attempt (no-op if this job is already running). Attempts are counted
        when they finish, so an attempt lost to a crash is not counted."""
        if job.id not in self._running:
            self._running[job.id] = self._pool.submit(job.run, self.summarizer)

    def running(self, job_id: int) -> bool:
        """Is an attempt of this job in flight?"""
        return job_id in self._running

    def collect(self, jobs: dict[int, Job], wait: bool) -> list[Outcome]:
        """Finished attempts (all of them if `wait`), in job-id order."""
        out = []
        for job_id in sorted(self._running):
            future = self._running[job_id]
            if not wait and not future.done():
                continue
            del self._running[job_id]
            try:
                out.append(Outcome(jobs[job_id], future.result(), None))
            except Exception as exc:  # any failure leaves the job pending
                out.append(Outcome(jobs[job_id], None, f"{type(exc).__name__}: {exc}"))
        return out

    def close(self) -> None:
        """Stop the thread (running attempts are abandoned; their jobs stay pending) and
        let the summariser release what it holds."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.summarizer.close()
