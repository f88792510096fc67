"""A toy plug-in: each part registers itself when this module is imported, and the tally
platform's engine declares its own table."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from shoal.agents.actions import ActionBatch
from shoal.agents.observation import PlatformView
from shoal.agents.policy import Policy
from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.state import BeliefState
from shoal.config.base import Strict, part
from shoal.config.platforms import PlatformConfig
from shoal.config.selector import Selector
from shoal.core.counter_rng import CounterRNG, stream
from shoal.core.posts import PostKind
from shoal.core.registry import BELIEF_RULES, POLICIES, RECOMMENDERS
from shoal.core.state import State
from shoal.core.vocabulary import ActionType as A
from shoal.engine.recommenders import FeedContext, Recommender
from shoal.platforms.spec import PlatformSpec, register
from shoal.store.tables import TABLES, TableSpec
from shoal.world.platform_engine import PlatformEngine


class Drift(Strict):
    """Every living agent moves a fraction `rate` of the way towards `target`."""

    rule: Literal["drift"]
    target: float = Field(default=0.0, ge=-1, le=1)
    rate: float = Field(default=0.1, gt=0, le=1)


@BELIEF_RULES.register("drift", config=Drift)
class DriftRule(UpdateRule):
    def __init__(self, cfg: Drift):
        self.cfg = cfg

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        live = ctx.alive if ctx.alive is not None else slice(None)
        x = beliefs.position[live]
        beliefs.position[live] = x + self.cfg.rate * (self.cfg.target - x)


class Echo(Strict):
    """The newest posts of the window whose stance is closest to the reader's."""

    kind: Literal["echo"]
    window_rounds: int = Field(default=12, gt=0)


@RECOMMENDERS.register("echo", config=Echo, feed_order="closest to your views")
class EchoFeed(Recommender):
    """Keeps state: a post it has shown often ranks lower (fatigue), so its feeds depend
    on every feed it built before, and a resume must restore what it counted."""

    def __init__(self, cfg: Echo):
        self.cfg = cfg
        self.shown = np.zeros(0, np.int64)  # times each post id was in a feed

    def feeds(self, ctx: FeedContext, agents: np.ndarray) -> np.ndarray:
        k = ctx.platform.k
        out = np.full((len(agents), k), -1, dtype=np.int64)
        pool = ctx.window(self.cfg.window_rounds)
        if not len(pool):
            return out
        if len(self.shown) < ctx.posts.n:
            self.shown = np.concatenate([self.shown, np.zeros(ctx.posts.n - len(self.shown),
                                                              np.int64)])
        stance = np.nan_to_num(ctx.posts.stance[pool], nan=0.0)  # [C, T]
        gap = np.abs(ctx.position[agents][:, None, :] - stance[None]).sum(axis=2)
        gap = gap + 0.01 * self.shown[pool][None, :]
        gap[ctx.posts.author[pool][None, :] == agents[:, None]] = np.inf
        order = np.argsort(gap, axis=1, kind="stable")[:, :k]
        picked = pool[order]
        picked[np.take_along_axis(gap, order, axis=1) == np.inf] = -1
        out[:, :picked.shape[1]] = picked
        np.add.at(self.shown, picked[picked >= 0], 1)
        return out

    def get_state(self) -> State:
        return State(arrays={"shown": self.shown.copy()})

    def set_state(self, state: State) -> None:
        self.shown = state.arrays["shown"].astype(np.int64)


class TootConfig(PlatformConfig):
    """A small microblog: posts and likes, fed by the echo recommender."""

    enabled: bool = True
    recommender: part(RECOMMENDERS) = Field(default="echo", validate_default=True)


TOOT = register(PlatformSpec(
    name="toot", code=3, label="Toot",
    actions=(A.POST, A.LIKE, A.FOLLOW, A.DO_NOTHING),
    engagements=(A.LIKE, A.FOLLOW),
    feed_kinds=(PostKind.POST,),
    action_help=("post (write a toot)", "like (like a toot)", "follow (follow its author)",
                 "do_nothing"),
), TootConfig)


class Shout(Strict):
    """Every acting agent posts its own position on every topic, in every slot."""

    kind: Literal["shout"]
    text: str = "hear me"


@POLICIES.register("shout", config=Shout)
class ShoutPolicy(Policy):
    @classmethod
    def reads_feed_features(cls, cfg: Shout) -> bool:
        return False  # it never looks at its feed

    def __init__(self, cfg: Shout, topics, rng, interests, usernames):
        self.cfg = cfg

    def decide(self, view: PlatformView, position: np.ndarray, confidence: np.ndarray,
               round_: int, max_actions: int) -> ActionBatch:
        n = len(view.agents)
        return ActionBatch(
            agent=view.agents.astype(np.int32), platform=np.full(n, view.platform, np.int8),
            action=np.full(n, A.POST, np.int8), target_post=np.full(n, -1, np.int64),
            target_agent=np.full(n, -1, np.int32), stance=position.copy(),
            text=[self.cfg.text] * n, slot=np.zeros(n, np.int8))


# A platform with its own engine and its own table: the tally keeps a running sum of its
# members' mean position on the first topic and logs it every round to `toy_tally`.

TALLY_STREAM = stream("shoal_toy_plugin.tally")  # the tally's own random draws
TALLY = TABLES.declare(TableSpec(
    "toy_tally", "round INTEGER, members INTEGER, mean_position DOUBLE, running_total DOUBLE",
    owner="toy", doc="The tally's members and their running mean position, per round."))


class TallyConfig(Strict):
    """The tally: who is counted (every living agent by default)."""

    mutable_fields: ClassVar[tuple[str, ...]] = ("participation",)

    enabled: bool = True
    members: Selector = Field(default_factory=Selector)
    participation: float = Field(default=1.0, ge=0, le=1)
    max_actions_per_round: int = Field(default=1, ge=1, le=10)


class TallyEngine(PlatformEngine):
    """Counts; its members never act on it (every turn there is do_nothing). Only the
    hooks it needs: the others keep `PlatformEngine`'s defaults."""

    def __init__(self, cfg: TallyConfig, world):
        self.cfg = cfg
        self.code = TALLY_PLATFORM.code
        self.members = world.alive.copy()
        self.running_total = 0.0
        self.row: dict | None = None
        self.rng = CounterRNG(world.cfg.seed)

    def begin_round(self, world, r: int, publish) -> None:
        self.row = None

    def decide(self, world, r: int, agents: np.ndarray, llm_agents: np.ndarray) -> ActionBatch:
        return ActionBatch.empty(len(world.topics))

    def apply(self, world, r: int, actions: ActionBatch) -> np.ndarray:
        return np.zeros(len(actions), np.int8)

    def end_round(self, world, r: int, shown: np.ndarray) -> None:
        counted = self.members & world.alive
        # a sample of the members is counted each round, drawn from the tally's own stream
        ids = np.flatnonzero(counted)
        sampled = ids[self.rng.uniform1(r, TALLY_STREAM, ids) < 0.5] if len(ids) else ids
        mean = float(world.beliefs.position[sampled, 0].mean()) if len(sampled) else 0.0
        self.running_total += mean
        self.row = {"members": len(sampled), "mean": mean}

    def tables(self, world, r: int) -> dict[str, pa.Table]:
        if self.row is None:  # round 0: the initial state, counted as nothing yet
            self.row = {"members": int(self.members.sum()), "mean": 0.0}
        return {"toy_tally": pa.table({
            "round": pa.array([r], pa.int32()), "members": pa.array([self.row["members"]],
                                                                    pa.int32()),
            "mean_position": [self.row["mean"]], "running_total": [self.running_total]})}

    def get_state(self) -> State:
        return State(arrays={"members": self.members.copy()},
                     meta={"running_total": self.running_total})

    def set_state(self, state: State) -> None:
        self.members = state.arrays["members"].astype(bool)
        self.running_total = float(state.meta["running_total"])


TALLY_PLATFORM = register(PlatformSpec(
    name="tally", code=4, label="Tally", actions=(A.DO_NOTHING,), engagements=(),
    feed_kinds=(), action_help=("do_nothing",), social=False,
    engine="shoal_toy_plugin:TallyEngine"), TallyConfig)
