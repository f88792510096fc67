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
from shoal.core.registry import POLICIES


class Policy(ABC):
    """Vectorised decisions of many agents on one platform. A shard builds it as
    `Policy(cfg, topics, rng, interests, usernames)`: its config section, the run's topics,
    the counter RNG, the agents' topic interests [N, T] and usernames."""

    # Whether `decide` keeps no state while deciding, so that a shard may call it for
    # ranges of a view's agents from several threads at once (shoal.core.workers).
    by_agent: bool = False

    @classmethod
    def reads_feed_features(cls, cfg: Any) -> bool:
        """Whether, with config `cfg`, it reads the follows, votes and trust of feed items
        (`PlatformView`'s feature arrays): the driver computes them every round only if a
        policy or the belief rule says it reads them."""
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
