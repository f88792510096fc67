"""Workload W as an idiomatic Mesa 3 model (baseline; spec: docs/workload_w.md).

One `Agent` per person, a post stage and a read stage per step, both through
`self.agents.shuffle_do(...)`, and a `DataCollector` that records the mean position.
A post is a tuple `(key, value)` with `key = t*N + author`; tuples order by key.

Runs in its own venv (Mesa 3.5 needs Python >= 3.12): `bench/baselines/setup_mesa_venv.sh`,
then `bench/.venv-mesa/bin/python bench/baselines/w_mesa.py --n 100000 --rounds 5 --feed pull`.
"""

from __future__ import annotations

import heapq
import statistics
import time
from collections import deque

import mesa
import numpy as np
from w_common import EPS, MU, Args, K, P, Run, initial_state, main, shared_post_mask

Post = tuple[int, float]


class Person(mesa.Agent):
    """An opinion `x` in [-1, 1], a fixed set of followees, and a feed of at most K posts."""

    model: OpinionModel

    def __init__(self, model: OpinionModel, index: int, x: float) -> None:
        super().__init__(model)
        self.index = index  # position in the initial-state arrays (unique_id starts at 1)
        self.x = x
        self.follows: list[Person] = []
        self.followers: list[Person] = []

    def post(self) -> None:
        model = self.model
        mask = model.post_mask
        wants = mask[model.steps - 1][self.index] if mask is not None else self.random.random() < P
        if wants:
            post = (model.steps * model.n + self.index, self.x)
            model.new_posts.append(post)
            self.publish(post)

    def publish(self, post: Post) -> None:
        raise NotImplementedError

    def followee_feed(self) -> list[Post]:
        """The K newest posts by accounts this person follows (fewer if there are fewer)."""
        raise NotImplementedError

    def read(self) -> None:
        feed = self.followee_feed()
        if len(feed) < K:
            self.model.fallback_reads += 1
            self.top_up(feed)
        for _, value in sorted(feed):  # oldest first
            if abs(value - self.x) < EPS:
                self.x = self.x + MU * (value - self.x)

    def top_up(self, feed: list[Post]) -> None:
        """Global fallback: add the newest posts system-wide that are not by this person
        and not already in the feed, until it holds K."""
        have = {key for key, _ in feed}
        n = self.model.n
        for post in reversed(self.model.posts):
            if len(feed) == K:
                break
            if post[0] % n != self.index and post[0] not in have:
                feed.append(post)


class PullPerson(Person):
    """Fan-out on read: keeps its own last K posts; readers merge their followees' lists."""

    def __init__(self, model: OpinionModel, index: int, x: float) -> None:
        super().__init__(model, index, x)
        self.recent: deque[Post] = deque(maxlen=K)

    def publish(self, post: Post) -> None:
        self.recent.append(post)

    def followee_feed(self) -> list[Post]:
        return heapq.nlargest(K, [p for f in self.follows for p in f.recent])


class PushPerson(Person):
    """Fan-out on write: every post goes into each follower's inbox of capacity K."""

    def __init__(self, model: OpinionModel, index: int, x: float) -> None:
        super().__init__(model, index, x)
        self.inbox: list[Post] = []  # min-heap by key

    def publish(self, post: Post) -> None:
        # Posts of a round arrive in shuffle order, not key order, so the inbox is a heap
        # that drops its *oldest* post when full (a plain append-only deque would not).
        for reader in self.followers:
            if len(reader.inbox) < K:
                heapq.heappush(reader.inbox, post)
            else:
                heapq.heappushpop(reader.inbox, post)

    def followee_feed(self) -> list[Post]:
        return list(self.inbox)


class OpinionModel(mesa.Model):
    """Bounded-confidence opinions driven by a following feed (workload W)."""

    def __init__(
        self,
        x0: np.ndarray,
        follows: np.ndarray,
        seed: int,
        feed: str = "pull",
        post_mask: np.ndarray | None = None,
    ) -> None:
        super().__init__(rng=seed)  # an int rng also seeds self.random = Random(seed)
        self.n = len(x0)
        self.post_mask: list[list[bool]] | None = (
            post_mask.tolist() if post_mask is not None else None
        )
        self.posts: list[Post] = []  # every post, in key order (for the global fallback)
        self.new_posts: list[Post] = []
        self.fallback_reads = 0
        cls = PushPerson if feed == "push" else PullPerson
        self.people = [cls(self, i, x) for i, x in enumerate(x0.tolist())]
        for person, row in zip(self.people, follows.tolist(), strict=True):
            person.follows = [self.people[j] for j in row]
            for followee in person.follows:
                followee.followers.append(person)
        self.datacollector = mesa.DataCollector(
            model_reporters={"mean_x": lambda m: m.agents.agg("x", statistics.fmean)}
        )

    def step(self) -> None:
        self.new_posts = []
        self.agents.shuffle_do("post")
        self.posts.extend(sorted(self.new_posts))  # shuffle order -> key order
        self.agents.shuffle_do("read")
        self.datacollector.collect(self)


def run(args: Args) -> Run:
    x0, follows, _ = initial_state(args.n, args.seed)
    mask = shared_post_mask(args.n, args.rounds, args.seed) if args.shared_draws else None
    model = OpinionModel(x0, follows, args.seed, args.feed, mask)
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        model.step()
    seconds = time.perf_counter() - t0
    x = np.array([p.x for p in model.people])
    return Run(seconds, x, model.fallback_reads / (args.n * args.rounds))


if __name__ == "__main__":
    main("mesa", run, __doc__.splitlines()[0])
