"""The policy interface: what decides for the rule-driven agents of a shard.

A policy is registered in `POLICIES` (sim/core/registry.py) under the name its config's
`kind` field carries; the built-in one is `rule` (agents/rule_policy.py). A shard builds
it as `impl(cfg.policy, cfg.topics, rng, interests, usernames)` and calls `decide` once per
platform per round for its acting agents. LLM agents are decided by the LLM policy, which
falls back to this one's decision when a reply is missing or invalid. A policy that writes
texts finds each acting agent's language on the view (`PlatformView.language` and
`languages`; None when everyone's is English).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from shoal.agents.actions import ActionBatch
from shoal.agents.observation import PlatformView
from shoal.config import Config
from shoal.core.counter_rng import CounterRNG
from shoal.core.registry import POLICIES, PluginError
from shoal.core.vocabulary import ActionType


class Policy(ABC):
    """Vectorised decisions of many agents on one platform. A shard builds it as
    `Policy(cfg, topics, rng, interests, usernames)`: its config section, the run's topics,
    the counter RNG, the agents' topic interests [N, T] and usernames."""

    # Whether `decide` keeps no state while deciding, so that a shard may call it for
    # ranges of a view's agents from several threads at once (shoal.core.workers).
    by_agent: bool = False

    @classmethod
    def reads_feed_features(cls, cfg: Any) -> bool:
        """Whether, with config `cfg`, it reads the features of feed items (`PlatformView`'s
        arrays besides `feed`: author, kind, stance, votes, follows, trust): the driver
        computes them every round only if a policy or the belief rule says it reads them
        (without, they hold their defaults: -1, NaN, 0, False, the initial trust)."""
        return True

    @abstractmethod
    def decide(self, view: PlatformView, position: np.ndarray, confidence: np.ndarray,
               round_: int, max_actions: int) -> ActionBatch:
        """Decisions of `view.agents` (positions and confidences [A, T], aligned with the
        view's rows), at most `max_actions` slots each. Every random draw must come from
        the counter RNG keyed by (round, agent, purpose), so that the result does not
        depend on shards or order."""


def build_policy(cfg: Config, rng: CounterRNG, interests: np.ndarray,
                 usernames: list[str]) -> Policy:
    """The policy `cfg.policy` names, built for a shard."""
    return POLICIES.create(cfg.policy, cfg.topics, rng, interests, usernames)


def reads_social_features(cfg: Config) -> bool:
    """Whether the config's policy reads follows, votes and trust of feed items (building
    them costs time), as the policy declares."""
    return POLICIES.get(cfg.policy.kind).impl.reads_feed_features(cfg.policy)


def check_decisions(batch: object, view: PlatformView, max_actions: int, n_topics: int,
                    what: str, round_: int) -> ActionBatch:
    """A plug-in policy's decisions are what the engine reads them as: an ActionBatch
    whose columns have one row per action, each of an agent of the view, on the view's
    platform, with a known action code, a slot below `max_actions` (none twice for an
    agent) and stances in [-1, 1] or NaN (a topic not addressed). Anything else would be
    applied and logged as it stands."""
    def wrong(problem: str) -> PluginError:
        return PluginError(f"round {round_}: the {what} decided {problem}. Nothing of round "
                           f"{round_} was kept.")

    if not isinstance(batch, ActionBatch):
        raise wrong(f"with a {type(batch).__name__}, not an ActionBatch")
    n = len(batch.agent)
    columns = {"platform": batch.platform, "action": batch.action, "target_post":
               batch.target_post, "target_agent": batch.target_agent, "slot": batch.slot,
               "stance": batch.stance}
    for name, values in {"agent": batch.agent, **columns}.items():
        if not isinstance(values, np.ndarray) or values.dtype.kind not in (
                "f" if name == "stance" else "iu"):
            raise wrong(f"a column `{name}` that is not a numpy array of "
                        + ("floats" if name == "stance" else "integers"))
        if len(values) != n:
            raise wrong(f"columns of different lengths (`agent` {n}, `{name}` "
                        f"{len(values)})")
    if not isinstance(batch.text, list) or len(batch.text) != n or not all(
            isinstance(t, str) for t in batch.text):
        raise wrong(f"a `text` that is not a list of {n} strings")
    if batch.stance.shape != (n, n_topics):
        raise wrong(f"stances of shape {list(batch.stance.shape)}, not [actions, topics] = "
                    f"[{n}, {n_topics}]")
    if not n:
        return batch
    if (stray := np.setdiff1d(batch.agent, view.agents)).size:
        raise wrong(f"for agent {int(stray[0])}, who is not among the agents it was asked "
                    "about")
    elsewhere = batch.platform[batch.platform != view.platform]
    if elsewhere.size:
        raise wrong(f"actions on platform code {int(elsewhere[0])}, asked about platform "
                    f"code {view.platform}")
    known = np.isin(batch.action, [int(a) for a in ActionType])
    if not known.all():
        raise wrong(f"action code {int(batch.action[~known][0])}, which is no action")
    beyond = batch.slot[(batch.slot < 0) | (batch.slot >= max_actions)]
    if beyond.size:
        raise wrong(f"slot {int(beyond[0])}; an agent has slots 0..{max_actions - 1} on "
                    "this platform")
    keys = batch.agent.astype(np.int64) * 256 + batch.slot
    if len(np.unique(keys)) != n:
        raise wrong("two actions for one agent in one slot")
    stance = batch.stance[~np.isnan(batch.stance)]
    if stance.size and not (np.isfinite(stance).all() and np.abs(stance).max() <= 1.0):
        raise wrong(f"a stance outside [-1, 1]: {float(stance[~(np.abs(stance) <= 1)][0])!r}")
    return batch
