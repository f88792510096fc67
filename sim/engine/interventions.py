"""Interventions: the config's schedule, fired exactly once each, as part of world state.

Entries due at round r fire at the start of round r, before scheduling (so agents added or
removed at r act, or not, from r on), and everything they change is visible to the agents
of round r. Posts they inject are stamped with round r − 1 ("created just before round
r"), which keeps the snapshot rule: every post an agent sees predates its round. Round-0
entries fire while the run is set up. What fired is saved with every checkpoint, so a
resume never fires an entry twice and never skips one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from shoal.agents.population import generate_population
from shoal.config import Config, apply_overrides, parse_config, resolved_dict
from shoal.config.interventions import (
    AddAgents,
    BeliefIntervention,
    EventIntervention,
    InterventionSpec,
    PostIntervention,
    PostsIntervention,
    PostSpec,
    RemoveAgents,
    SetParams,
)
from shoal.config.selector import Selector
from shoal.config.yaml_text import dump_yaml
from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.core.errors import ConfigError, InputError
from shoal.core.posts import NewPosts, PostKind
from shoal.core.registry import INTERVENTIONS, PluginError, calling, from_shoal
from shoal.core.state import json_default
from shoal.engine.update import belief_problem
from shoal.platforms.spec import spec as platform_spec
from shoal.world.interventions import NEWS_AUTHOR, ActiveEvent
from shoal.world.selection import select
from shoal.world.world import World, initial_beliefs


@dataclass
class Fired:
    """What the entries fired at one round did (for the logs and the checkpoint)."""

    rows: list[dict[str, Any]] = field(default_factory=list)  # the interventions table
    post_ids: list[int] = field(default_factory=list)
    counters: dict[str, list[int]] = field(default_factory=lambda: {"up": [], "down": []})
    follows: dict[str, list[int]] = field(default_factory=lambda: {
        "platform": [], "follower": [], "followee": [], "op": []})
    joined: Any = None  # Population of agents added this round
    config_changed: bool = False

    def follow_arrays(self) -> dict[str, np.ndarray]:
        """Follow ops as arrays (delta and table form)."""
        f = self.follows
        return {"platform": np.asarray(f["platform"], np.int8),
                "follower": np.asarray(f["follower"], np.int64),
                "followee": np.asarray(f["followee"], np.int64),
                "op": np.asarray(f["op"], np.int8)}


@dataclass
class InterventionContext:
    """What an intervention kind's function is given besides its entry (`fire(ctx,
    spec) -> effect`): the world it changes, the round it fires at (the start of
    `round`, before anyone acts), its index in the schedule, what this round's entries
    did so far (`fired`: posts injected, follows, agents added) and the schedule (its
    pinned events). The effect it returns (a JSON-able dict) is the `effect` column."""

    world: Any
    round: int
    index: int
    fired: Fired
    schedule: Any

    @property
    def where(self) -> str:
        """The entry's config path, for error messages (`interventions.3`)."""
        return f"interventions.{self.index}"

    def target(self, selector: Selector) -> np.ndarray:
        """Boolean mask [N] of the agents `selector` picks (its seeded fraction drawn from
        this entry's own stream)."""
        return resolve_target(selector, self.world, self.index, self.where)

    def generator(self) -> np.random.Generator:
        """This entry's own random generator (the same on a resume or in a fork)."""
        return CounterRNG(self.world.cfg.seed).generator(Purpose.INTERVENTION, self.index)


def fire_due(world: World, round_: int) -> Fired:
    """Fire every entry due at `round_` (in config order) on `world`; then forget the
    events whose pinning ended before it."""
    schedule = world.interventions
    assert schedule is not None  # World.__post_init__ makes the schedule
    fired = Fired()
    for i in schedule.due(round_):
        spec = schedule.cfg.interventions[i]
        ctx = InterventionContext(world, round_, i, fired, schedule)
        impl = INTERVENTIONS.get(spec.kind).impl
        what = f"intervention interventions.{i} (kind {spec.kind!r})"
        with calling(what, impl, round_):
            effect = impl(ctx, spec)
        if not from_shoal(impl):
            effect = _plugin_effect(world, effect, what, round_)
        schedule.fired.add(i)
        fired.rows.append({"round": round_, "index": i, "kind": spec.kind,
                           "spec": json.dumps(spec_json(spec)),
                           "effect": json.dumps(effect)})
    schedule.expire(round_)
    return fired


def _plugin_effect(world: World, effect: Any, what: str, round_: int) -> dict[str, Any]:
    """A plug-in intervention's effect as the `effect` column holds it (a JSON object;
    numpy numbers as numbers), after checking the beliefs it may have set."""
    def wrong(problem: str) -> PluginError:
        return PluginError(f"round {round_}: the {what} {problem}. Nothing of round "
                           f"{round_} was kept.")

    problem = belief_problem(world)
    if problem is not None:
        raise wrong(f"left {problem}")
    if not isinstance(effect, dict):
        raise wrong(f"returned {type(effect).__name__}, not a dict (its effect, logged "
                    "in the interventions table)")
    try:
        return json.loads(json.dumps(effect, default=json_default, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise wrong(f"returned an effect JSON cannot hold: {exc}") from None


def begin_round(world: World, round_: int) -> Fired:
    """What happens at the boundary before round `round_`, before anyone acts: the
    interventions due fire, and round memory takes its finished compaction. The driver
    does this each round; so does anything that rebuilds a round (inspect, diagnostics)."""
    fired = fire_due(world, round_)
    assert world.memory is not None  # World.__post_init__ makes round memory
    world.memory.boundary(round_)
    return fired


def resolve_target(target: Selector, world: World, rng_key: int, where: str) -> np.ndarray:
    """Boolean mask [N] of the agents an entry's target picks (InputError for unknown ids
    or groups, naming `where`.target)."""
    seed = world.cfg.seed
    return select(target, world.population,
                  lambda: CounterRNG(seed).generator(Purpose.INTERVENTION, rng_key),
                  f"{where}.target")


def spec_json(spec: InterventionSpec) -> dict[str, Any]:
    """An entry as logged in the `interventions` table (its name only when it has one)."""
    return spec.model_dump(mode="json", exclude=None if spec.name else {"name"})


def _stance_vector(stance: dict[str, float], topics: list[str]) -> np.ndarray:
    vec = np.full(len(topics), np.nan)
    for topic, value in stance.items():
        vec[topics.index(topic)] = value
    return vec


def _inject(world: World, round_: int, specs: list[PostSpec], kind: PostKind, fired: Fired
            ) -> list[int]:
    """Append posts (by agents or the news account) stamped round_ − 1 and index them."""
    stamp = max(round_ - 1, 0)
    ids = world.posts.append(NewPosts(
        platform=np.array([platform_spec(s.platform).code for s in specs], np.int8),
        author=np.array([NEWS_AUTHOR if s.author is None else s.author for s in specs],
                        np.int32),
        kind=np.full(len(specs), kind, np.int8), parent=np.full(len(specs), -1, np.int64),
        stance=np.stack([_stance_vector(s.stance, world.topics) for s in specs]),
        text=[s.text for s in specs],
    ), stamp)
    for post_id, s in zip(ids.tolist(), specs, strict=True):
        fired.counters["up"] += [post_id] * s.votes.up
        fired.counters["down"] += [post_id] * s.votes.down
        world.posts.increment({"up": np.asarray([post_id] * s.votes.up, np.int64),
                               "down": np.asarray([post_id] * s.votes.down, np.int64)})
        if s.author is not None and kind == PostKind.POST:
            plat = world.platforms[s.platform]
            plat.index_new_posts(np.array([post_id]), np.array([s.author]),
                                 np.empty(0, np.int64))
    fired.post_ids += ids.tolist()
    return ids.tolist()


_Fire = TypeVar("_Fire", bound=Callable[..., dict[str, Any]])


def _kind(name: str, config: type, **meta: Any) -> Callable[[_Fire], _Fire]:
    """`INTERVENTIONS.register` as a decorator that keeps the function's type (the
    registry's `register` is typed to return Any)."""
    return INTERVENTIONS.register(name, config=config, **meta)


def _no_draws() -> np.random.Generator:
    """The generator of a selector whose fraction is dropped: `select` never asks for it."""
    raise AssertionError("a selector without a fraction draws nothing")


def _check_platform(world: World, platform: str, where: str) -> None:
    if platform not in world.platforms:
        raise InputError(f"{where}.platform: {platform} is not enabled in this run")


@_kind("post", config=PostIntervention, example={
    "platform": "twitter", "text": "A leaked memo.", "stance": {"carbon_tax": 0.5}})
def _fire_post(ctx: InterventionContext, spec: PostIntervention) -> dict[str, Any]:
    _check_platform(ctx.world, spec.platform, ctx.where)
    return {"post_ids": _inject(ctx.world, ctx.round, [spec], PostKind.POST, ctx.fired)}


@_kind("posts", config=PostsIntervention, example={"items": [
    {"platform": "twitter", "text": "One view.", "votes": {"up": 3}},
    {"platform": "reddit", "text": "Another view.", "author": 1}]})
def _fire_posts(ctx: InterventionContext, spec: PostsIntervention) -> dict[str, Any]:
    for j, item in enumerate(spec.items):
        _check_platform(ctx.world, item.platform, f"{ctx.where}.items.{j}")
    return {"post_ids": _inject(ctx.world, ctx.round, spec.items, PostKind.POST, ctx.fired)}


@_kind("event", config=EventIntervention, example={
    "text": "Breaking: the levy doubles.", "stance": {"carbon_tax": -0.6}, "duration": 2})
def _fire_event(ctx: InterventionContext, spec: EventIntervention) -> dict[str, Any]:
    world, round_ = ctx.world, ctx.round
    platforms = spec.platforms or list(world.platforms)
    for name in platforms:
        _check_platform(world, name, ctx.where)
    specs = [PostSpec(platform=name, text=spec.text, stance=spec.stance) for name in platforms]
    ids = _inject(world, round_, specs, PostKind.EVENT, ctx.fired)
    target = None if spec.target.everyone else ctx.target(spec.target)
    ctx.schedule.events.append(ActiveEvent(index=ctx.index, post_ids=dict(zip(
        [platform_spec(p).code for p in platforms], ids, strict=True)),
        until=round_ + spec.duration - 1, target=target))
    return {"post_ids": ids, "until_round": round_ + spec.duration - 1,
            "targeted": int(target.sum()) if target is not None else world.n_agents}


@_kind("beliefs", config=BeliefIntervention, example={
    "topic": "carbon_tax", "shift": 0.2, "target": {"fraction": 0.5}})
def _fire_beliefs(ctx: InterventionContext, spec: BeliefIntervention) -> dict[str, Any]:
    world = ctx.world
    mask = ctx.target(spec.target)
    t = world.topics.index(spec.topic)
    if spec.set is not None:  # a new predisposition: rules anchored to x0 keep it
        world.beliefs.position[mask, t] = spec.set
        world.initial_position[mask, t] = spec.set
    if spec.shift is not None:
        world.beliefs.position[mask, t] = np.clip(world.beliefs.position[mask, t]
                                                  + spec.shift, -1.0, 1.0)
    if spec.confidence is not None:
        world.beliefs.confidence[mask, t] = spec.confidence
    return {"agents": int(mask.sum())}


@_kind("remove_agents", config=RemoveAgents, example={
    "target": {"groups": ["activists"]}})
def _fire_remove(ctx: InterventionContext, spec: RemoveAgents) -> dict[str, Any]:
    mask = ctx.target(spec.target)
    newly = mask & ctx.world.alive
    ctx.world.alive[mask] = False
    return {"agents": int(newly.sum())}


@_kind("add_agents", config=AddAgents, example={
    "count": 10, "follow": 2})
def _fire_add(ctx: InterventionContext, spec: AddAgents) -> dict[str, Any]:
    world, round_, fired = ctx.world, ctx.round, ctx.fired
    cfg = world.cfg
    n0 = world.n_agents
    rng = ctx.generator()
    # Newcomers speak their group's language when it has one, else the population's.
    language = next((g.language for g in cfg.population.groups
                     if g.name == spec.group and g.language), cfg.population.language)
    gen_cfg = cfg.model_copy(update={"population": cfg.population.model_copy(
        update={"size": spec.count, "file": None, "groups": [], "language": language})})
    newcomers = generate_population(gen_cfg, rng, first_id=n0)
    if spec.group is not None:
        if spec.group not in world.population.group_names:
            world.population.group_names.append(spec.group)
        newcomers.group_names = list(world.population.group_names)
        newcomers.group = np.full(spec.count, newcomers.group_names.index(spec.group), np.int16)
    else:
        newcomers.group_names = list(world.population.group_names)
    beliefs = initial_beliefs(gen_cfg, newcomers, rng, use_file=False)
    world.population.extend(newcomers)
    world.beliefs.grow(beliefs.position, beliefs.confidence)
    world.initial_position = np.concatenate([world.initial_position, beliefs.position])
    world.alive = np.concatenate([world.alive, np.ones(spec.count, bool)])
    world.joined = np.concatenate([world.joined, np.full(spec.count, round_, np.int32)])
    joined = spec.platforms or list(world.platforms)
    new_ids = np.arange(n0, n0 + spec.count, dtype=np.int64)
    for name, plat in world.platforms.items():
        plat.grow(world.n_agents)
        if name not in joined:
            continue
        plat.add_members(new_ids)
        existing = np.nonzero(plat.members[:n0] & world.alive[:n0])[0]
        k = min(spec.follow, len(existing))
        if k:
            picks = np.stack([rng.choice(existing, k, replace=False) for _ in new_ids])
            src = np.repeat(new_ids, k)
            dst = picks.ravel().astype(np.int64)
            plat.graph.follow(src, dst)
            plat.inbox[new_ids] = plat.pull_inbox(new_ids)
            fired.follows["platform"] += [plat.code] * len(src)
            fired.follows["follower"] += src.tolist()
            fired.follows["followee"] += dst.tolist()
            fired.follows["op"] += [1] * len(src)
    for engine in world.engines.values():  # newcomers join no market
        engine.grow(world.n_agents)
    if fired.joined is None:
        fired.joined = newcomers
    else:  # two add_agents entries in one round: one population delta
        fired.joined.extend(newcomers)
    fired.config_changed = True
    return {"agent_ids": [n0, n0 + spec.count - 1]}


@_kind("set", config=SetParams, example={
    "values": {"policy.post_rate": 0.4}})
def _fire_set(ctx: InterventionContext, spec: SetParams) -> dict[str, Any]:
    ctx.world.cfg = apply_settings(ctx.world.cfg, spec.values, f"{ctx.where}.values")
    ctx.schedule.cfg = ctx.world.cfg
    ctx.fired.config_changed = True
    return {"values": spec.values}


def apply_settings(cfg: Config, values: dict[str, Any], where: str) -> Config:
    """A new Config with dotted-path `values` applied (validated like a config file)."""
    data = resolved_dict(cfg)
    overrides = [f"{key}={dump_yaml(value, default_flow_style=True).strip()}"
                 for key, value in values.items()]
    try:
        return parse_config(apply_overrides(data, overrides))
    except ConfigError as exc:
        raise InputError(f"{where}: {exc}") from None


def check_settings(cfg: Config) -> None:
    """Validate every `set` entry by applying it to the config (raises ConfigError)."""
    for i, spec in enumerate(cfg.interventions):
        if isinstance(spec, SetParams):
            try:
                apply_settings(cfg, spec.values, f"interventions.{i}.values")
            except InputError as exc:
                raise ConfigError([str(exc)]) from None


def check_against_population(cfg: Config, world: World) -> None:
    """Ids and groups named by interventions and by `llm.agents` exist, posts' authors
    too, and their platforms are enabled (InputError otherwise); run before anything is
    written."""
    n = world.n_agents
    if cfg.llm is not None:  # (else an unknown id stops the run at round 1, its directory made)
        select(cfg.llm.agents.model_copy(update={"fraction": None}), world.population,
               _no_draws, "llm.agents")
    _check_growth(cfg, n)
    for i, spec in enumerate(cfg.interventions):
        where = f"interventions.{i}"
        for path, selector in spec.selectors(where):
            # ids and groups only: the seeded fraction is drawn when the entry fires
            select(selector.model_copy(update={"fraction": None}), world.population,
                   _no_draws, path)
        for path, post in getattr(spec, "posts", lambda _: [])(where):
            if post.author is not None and post.author >= n:
                raise InputError(f"{path}.author: no agent {post.author} (the population "
                                 f"has {n} agents, ids 0..{n - 1})")
            if post.platform not in world.platforms:
                raise InputError(f"{path}.platform: {post.platform} is not enabled in this run")


def _check_growth(cfg: Config, n: int) -> None:
    """The agents `add_agents` entries bring fit: ids are 32-bit and the machine must hold
    them (else the entry fails with a MemoryError mid-run, its directory made)."""
    from shoal.world.world import available_memory, memory_needed

    total, have = n, available_memory()
    for i, spec in enumerate(cfg.interventions):
        if not isinstance(spec, AddAgents):
            continue
        total += spec.count
        if total >= 2**31:
            raise InputError(f"interventions.{i}.count: the population would grow to "
                             f"{total:,} agents; agent ids are 32-bit (at most "
                             f"{2**31 - 1:,} agents)")
        need = memory_needed(cfg, total)
        if have is not None and need > have:
            raise InputError(f"interventions.{i}.count: {total:,} agents need at least "
                             f"{need / 1e9:,.1f} GB of memory; this machine has "
                             f"{have / 1e9:,.1f} GB available")


def publish_news(world: World, round_: int, fired: Fired, text: str, stance: dict[str, float],
                 rounds: int, key: int) -> list[int]:
    """A news post a platform engine publishes (the market's news of a large price move):
    an event on every social platform, stamped like an intervention's posts and pinned to
    every feed for `rounds` rounds. Its pinning is keyed −1000 − `key`, out of the range
    of the schedule's entries. Returns the post ids (platform order)."""
    platforms = list(world.platforms)
    specs = [PostSpec(platform=name, text=text, stance=stance) for name in platforms]
    ids = _inject(world, round_, specs, PostKind.EVENT, fired)
    assert world.interventions is not None  # World.__post_init__ makes the schedule
    world.interventions.events.append(ActiveEvent(
        index=-1000 - key, post_ids=dict(zip([platform_spec(p).code for p in platforms], ids,
                                             strict=True)),
        until=round_ + rounds - 1, target=None))
    return ids
