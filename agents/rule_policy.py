"""The rule-based policy: vectorised decisions for all acting agents of a shard.

Each acting agent takes `max_actions_per_round` decisions per platform. A decision is, in
order: post (probability from the post rate and confidence); otherwise engage with one feed
item (probability `engage_rate`, target and kind drawn in proportion to weights driven by
stance agreement, trust, confidence, social proof and crowd correction); otherwise do
nothing. The formulas are written down in docs/rule_policy.md; keep the two in step.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from shoal.agents.actions import ActionBatch
from shoal.agents.observation import PlatformView
from shoal.agents.policy import Policy
from shoal.agents.post_text import PostWriter
from shoal.config import TopicSpec
from shoal.config.base import Strict
from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.core.registry import POLICIES
from shoal.core.vocabulary import ActionType
from shoal.platforms.spec import spec

_RESPONSE = {ActionType.QUOTE: "quote", ActionType.REPLY: "reply", ActionType.COMMENT: "comment"}


def alignment(position: np.ndarray, stance: np.ndarray) -> np.ndarray:
    """Agreement in [0, 1] between each agent [A, T] and its feed items [A, K, T]:
    1 − |x − s|/2 averaged over the topics a post addresses (0.5 if it addresses none)."""
    addressed = ~np.isnan(stance)
    n = addressed.sum(axis=2)
    dist = np.where(addressed, np.abs(position[:, None, :] - np.nan_to_num(stance)), 0.0)
    mean = dist.sum(axis=2) / np.maximum(n, 1)
    return np.where(n > 0, 1.0 - mean / 2.0, 0.5)


class RulePolicyConfig(Strict):
    """Parameters of the rule-based policy (formulas in docs/rule_policy.md)."""

    kind: Literal["rule"] = "rule"

    post_rate: float = Field(default=0.15, ge=0, le=1)
    post_confidence_boost: float = Field(default=1.0, ge=0)
    engage_rate: float = Field(default=0.6, ge=0, le=1)
    agreement_exponent: float = Field(default=2.0, ge=0)
    like_weight: float = Field(default=1.0, ge=0)
    repost_weight: float = Field(default=0.35, ge=0)
    quote_weight: float = Field(default=0.15, ge=0)
    reply_weight: float = Field(default=0.3, ge=0)
    downvote_weight: float = Field(default=0.6, ge=0)
    follow_weight: float = Field(default=0.2, ge=0)
    unfollow_weight: float = Field(default=0.1, ge=0)
    social_proof: float = Field(default=0.3, ge=0)
    correction: float = Field(default=0.0, ge=0)
    expression_noise: float = Field(default=0.05, ge=0)
    second_topic_prob: float = Field(default=0.2, ge=0, le=1)


@POLICIES.register("rule", config=RulePolicyConfig)
class RulePolicy(Policy):
    """Decides for many agents at once; every draw is keyed by (round, agent, purpose)."""

    by_agent = True

    @classmethod
    def reads_feed_features(cls, cfg: RulePolicyConfig) -> bool:
        """Engagement weights read follows, votes and trust; without engaging, nothing."""
        return cfg.engage_rate > 0

    def __init__(self, cfg: RulePolicyConfig, topics: list[TopicSpec], rng: CounterRNG,
                 interests: np.ndarray, usernames: list[str]):
        self.cfg = cfg
        self.labels = [t.label or t.name for t in topics]
        self.writer = PostWriter(self.labels)
        self.writers = {self.writer.language: self.writer}  # by templates' tag
        self.rng = rng
        self.interests = interests
        self.usernames = usernames

    def weights(self, view: PlatformView, position: np.ndarray, confidence: np.ndarray
                ) -> tuple[tuple[ActionType, ...], np.ndarray]:
        """Engagement weights [A, types, K] for the platform's engagement actions."""
        c = self.cfg
        a = alignment(position, view.stance)
        g = c.agreement_exponent
        agree, disagree = a**g, (1.0 - a) ** g
        tau = view.trust
        conf = confidence.mean(axis=1)[:, None]
        valid = (view.feed >= 0) & (view.author != view.agents[:, None])
        social = 1.0 + c.social_proof * np.log1p(np.maximum(view.up, 0))
        # Herding works both ways: visible downvotes attract more downvotes.
        social_down = 1.0 + c.social_proof * np.log1p(np.maximum(view.down, 0))
        if c.correction:  # (0: the weights as they were, bit for bit)
            # Crowd correction (Muchnik, Aral & Taylor 2013): a post voted below zero draws
            # corrective upvotes from those who agree with it and see it unfairly low.
            social = social * (1.0 + c.correction
                               * np.log1p(np.maximum(view.down - view.up, 0)))
        by_type = {
            ActionType.LIKE: c.like_weight * agree * (0.5 + tau) * social * ~view.voted,
            ActionType.UPVOTE: c.like_weight * agree * (0.5 + tau) * social * ~view.voted,
            ActionType.REPOST: c.repost_weight * agree * conf * (0.5 + tau) * ~view.reposted,
            ActionType.QUOTE: c.quote_weight * np.abs(2.0 * a - 1.0) * conf,
            ActionType.REPLY: c.reply_weight * (1.25 - a) * conf,
            ActionType.COMMENT: c.reply_weight * (1.25 - a) * conf,
            ActionType.DOWNVOTE: (c.downvote_weight * disagree * (1.5 - tau) * social_down
                                  * ~view.voted),
            ActionType.FOLLOW: c.follow_weight * agree * tau * ~view.follows_author,
            ActionType.UNFOLLOW: c.unfollow_weight * disagree * (1.0 - tau) * view.follows_author,
        }
        types = spec(view.name).engagements
        w = np.stack([np.where(valid, by_type[t], 0.0) for t in types], axis=1)
        return types, w

    def decide(self, view: PlatformView, position: np.ndarray, confidence: np.ndarray,
               round_: int, max_actions: int) -> ActionBatch:
        """Decisions of `view.agents` on one platform (`max_actions` slots each)."""
        n_topics = len(self.labels)
        if not len(view.agents):
            return ActionBatch.empty(n_topics)
        if self.cfg.engage_rate > 0:
            types, w = self.weights(view, position, confidence)
        else:  # nobody engages: skip the weight matrix (benchmark W, post-only models)
            types, w = spec(view.name).engagements, np.zeros((len(view.agents), 1, 1))
        n_agents, n_types, k = w.shape
        flat = w.reshape(n_agents, n_types * k)
        total = flat.sum(axis=1)
        cum = np.cumsum(flat, axis=1)
        p_post = np.clip(
            self.cfg.post_rate * (1.0 + self.cfg.post_confidence_boost
                                  * (confidence.mean(axis=1) - 0.5)), 0.0, 1.0)
        batches = []
        base = 100 * view.platform
        engages = self.cfg.engage_rate > 0
        for slot in range(max_actions):
            key = base + 1000 * slot
            # (keyed draws: an agent's first number is the same whether 1 or 3 are drawn,
            # so without engaging only the posting draw is made)
            u = self.rng.uniform(round_, Purpose.POST + key, view.agents, 3 if engages else 1)
            posting = u[:, 0] < p_post
            if engages:
                engaging = ~posting & (u[:, 1] < self.cfg.engage_rate) & (total > 0)
                pick = np.minimum((cum < (u[:, 2] * total)[:, None]).sum(axis=1),
                                  n_types * k - 1)
            else:
                engaging, pick = np.zeros(n_agents, bool), np.zeros(n_agents, np.int64)
            action = np.full(n_agents, ActionType.DO_NOTHING, dtype=np.int8)
            action[posting] = ActionType.POST
            chosen = np.asarray(types, dtype=np.int8)[pick // k]
            action[engaging] = chosen[engaging]
            item = pick % k
            batches.append(self._rows(view, position, round_, slot, action, item, engaging))
        return ActionBatch.concat(batches, n_topics)

    def _rows(self, view: PlatformView, position: np.ndarray, round_: int, slot: int,
              action: np.ndarray, item: np.ndarray, engaging: np.ndarray) -> ActionBatch:
        """Materialise one slot's decisions as action rows with targets, stances, texts."""
        n_agents, n_topics = position.shape
        # the engaging rows' targets (the others' are never read: a gather per agent saved)
        eng = np.flatnonzero(engaging)
        target_post = np.full(n_agents, -1, np.int64)
        target_post[eng] = view.feed[eng, item[eng]]
        target_author = np.full(n_agents, -1, np.int64)
        target_author[eng] = view.author[eng, item[eng]]
        is_graph = np.isin(action, [ActionType.FOLLOW, ActionType.UNFOLLOW])
        target_agent = np.where(is_graph, target_author, -1).astype(np.int32)
        target_post = np.where(is_graph, -1, target_post)
        key = 100 * view.platform + 1000 * slot
        posting = action == ActionType.POST
        responding = np.isin(action, [ActionType.QUOTE, ActionType.REPLY, ActionType.COMMENT])
        # Expression noise and topic choice matter only to the agents who write this slot;
        # draws are keyed per agent, so drawing for those alone gives them the same numbers.
        writers = np.nonzero(posting | responding)[0]
        who = view.agents[writers]
        expressed = np.full((n_agents, n_topics), np.nan)
        noise = (self.cfg.expression_noise
                 * self.rng.normal(round_, Purpose.EXPRESSION + key, who, n_topics)
                 if self.cfg.expression_noise else 0.0)
        expressed[writers] = np.clip(position[writers] + noise, -1.0, 1.0)
        stance = np.full((n_agents, n_topics), np.nan)

        # New posts: one topic by interest, sometimes a second one.
        u = self.rng.uniform(round_, Purpose.TOPIC + key, who, 3)
        interests = self.interests[who]
        first = np.zeros(n_agents, np.int64)
        first[writers] = _draw_index(interests, u[:, 0])
        second_w = interests.copy()
        second_w[np.arange(len(writers)), first[writers]] = 0.0
        second = np.zeros(n_agents, np.int64)
        second[writers] = _draw_index(second_w, u[:, 1])
        two = np.zeros(n_agents, bool)
        two[writers] = (u[:, 2] < self.cfg.second_topic_prob) & (second_w.sum(1) > 0)
        two &= posting
        stance[posting, first[posting]] = expressed[posting, first[posting]]
        stance[two, second[two]] = expressed[two, second[two]]

        # Responses take a stance on the topics of the post they respond to.
        target_stance = np.full((n_agents, n_topics), np.nan)  # [A, T]
        target_stance[eng] = view.stance[eng, item[eng]]
        on_topic = ~np.isnan(target_stance)
        no_topic = responding & ~on_topic.any(axis=1)
        resp_mask = responding[:, None] & on_topic
        stance[resp_mask] = expressed[resp_mask]
        stance[no_topic, first[no_topic]] = expressed[no_topic, first[no_topic]]
        reposting = action == ActionType.REPOST
        stance[reposting] = target_stance[reposting]

        texts = self._texts(view, round_, key, action, stance, target_stance, target_author)
        return ActionBatch(
            agent=view.agents.astype(np.int32), platform=np.full(n_agents, view.platform, np.int8),
            action=action, target_post=target_post.astype(np.int64), target_agent=target_agent,
            stance=stance, text=texts, slot=np.full(n_agents, slot, np.int8),
        )

    def _texts(self, view: PlatformView, round_: int, key: int, action: np.ndarray,
               stance: np.ndarray, target_stance: np.ndarray, target_author: np.ndarray
               ) -> list[str]:
        posts = np.nonzero(action == ActionType.POST)[0]
        responses = np.nonzero(np.isin(action, [ActionType.QUOTE, ActionType.REPLY,
                                                ActionType.COMMENT]))[0]
        writes = np.concatenate([posts, responses])
        if not len(writes):
            return [""] * len(action)
        u = self.rng.uniform(round_, Purpose.TEXT + key, view.agents[writes], 3)
        # Each agent writes in its language, from the same draws (a batch per language).
        texts = [""] * len(action)
        writers, which = self._writers(view, writes)
        for k, writer in enumerate(writers):
            mine = np.nonzero(which[: len(posts)] == k)[0]
            if len(mine):  # (over lists: a numpy scalar index costs twice a Python int)
                for i, text in zip(posts[mine].tolist(),
                                   writer.post_texts(stance[posts[mine]], u[mine]).tolist(),
                                   strict=True):
                    texts[i] = text
        for j, i in enumerate(responses, start=len(posts)):
            topics = np.nonzero(~np.isnan(stance[i]))[0]
            theirs = target_stance[i, topics]
            agree = (bool(np.nanmean(np.abs(theirs - stance[i, topics])) < 0.5)
                     if np.isfinite(theirs).any() else True)
            texts[i] = writers[which[j]].response(
                _RESPONSE[ActionType(int(action[i]))], self.usernames[int(target_author[i])],
                agree, topics.tolist(), stance[i, topics].tolist(), u[j])
        return texts

    def _writers(self, view: PlatformView, rows: np.ndarray
                 ) -> tuple[list[PostWriter], np.ndarray]:
        """Writers, and for each of the view's `rows` the index of its agent's (the view's
        `language`; English for everyone when it has none)."""
        if view.language is None:
            return [self.writer], np.zeros(len(rows), np.int64)
        return [self._writer(tag) for tag in view.languages], view.language[rows]

    def _writer(self, tag: str) -> PostWriter:
        """The writer for the language `tag` (one per templates' language, made once)."""
        found = self.writers.get(tag)
        if found is None:
            made = PostWriter(self.labels, tag)
            found = self.writers[tag] = self.writers.setdefault(made.language, made)
        return found


def _draw_index(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Per row, an index drawn in proportion to non-negative weights (0 if all zero)."""
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    idx = (cum < (u * total)[:, None]).sum(axis=1)
    return np.minimum(idx, weights.shape[1] - 1)
