"""Executors run the shards: in-process, or as Ray async actors.

Either way the driver makes one call per shard per round with that shard's
`DecisionRequest`; agents are assigned to shards by `agent_id % n_shards`. Because every
random draw is keyed by agent, the result does not depend on the executor, the shard count
or where the shards run.

On Ray the shards are placed on the cluster's nodes by `executor.placement` (`spread`:
round-robin over the nodes, pinned with a NodeAffinitySchedulingStrategy; `pack`: wherever
Ray's default scheduler puts them). The read-only world (the population, the config) is
put in the object store once and every actor gets the reference. docs/cluster.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from abc import ABC, abstractmethod
from collections import Counter
from pathlib import Path

import numpy as np

from shoal.agents.observation import DecisionRequest
from shoal.agents.population import Population
from shoal.agents.shard import AgentShard, ShardResult
from shoal.config import Config
from shoal.core.errors import InputError
from shoal.core.loop_thread import SETTLE_S, LoopThread, gather_or_cancel
from shoal.core.workers import Workers, resolve_workers
from shoal.llm.cache import CacheSpec

log = logging.getLogger(__name__)
PLACEMENTS = ("spread", "pack")


def shard_request(request: DecisionRequest, n_shards: int, s: int) -> DecisionRequest:
    """Shard `s`'s part of the request: only its agents (`agent % n_shards == s`; with one
    shard the request itself, not a copy of every feed array)."""
    if n_shards == 1:
        return request
    mine = request.agents % n_shards == s
    views = [v.take(np.nonzero(v.agents % n_shards == s)[0]) for v in request.views]
    return DecisionRequest(
        round=request.round, views=views, agents=request.agents[mine],
        position=request.position[mine], confidence=request.confidence[mine],
        extras=request.extras, json_only=request.json_only, outputs=request.outputs,
        budget=request.budget, model_tokens=request.model_tokens,
        contexts=None if request.contexts is None else [request.contexts[s]],
    )


def split_request(request: DecisionRequest, n_shards: int) -> list[DecisionRequest]:
    """One request per shard, holding only that shard's agents."""
    return [shard_request(request, n_shards, s) for s in range(n_shards)]


class Executor(ABC):
    """Runs `n_shards` agent shards and collects their decisions."""

    n_shards: int
    kind: str

    @abstractmethod
    def decide(self, request: DecisionRequest) -> list[ShardResult]:
        """Split the request by shard, run every shard once, return their results."""

    @abstractmethod
    def update(self, cfg: Config, population: Population) -> None:
        """Give every shard a new effective config and population (after interventions)."""

    @abstractmethod
    def close(self) -> None:
        """Release shards (and the Ray connection if we opened it)."""

    def thread_ids(self) -> tuple[int, ...]:
        """Threads of this process the shards decide on, besides the caller's (their CPU
        is the round's: shoal.core.workers.CpuMark)."""
        return ()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop for the shards' LLM calls: uvloop's when it is installed (measured:
    about a tenth less CPU per call, bench/README.md) unless SHOAL_EVENT_LOOP=asyncio,
    else asyncio's own."""
    if os.environ.get("SHOAL_EVENT_LOOP", "") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LocalExecutor(Executor):
    """Shards as plain objects in this process, run on a private asyncio loop in its own
    thread: the caller may itself be inside a running loop (a Jupyter kernel is), where
    `run_until_complete` is refused. A `decide` interrupted (Ctrl-C) cancels the shards'
    LLM calls and waits for them to wind down; `close` closes the shards' connections on
    that loop before it is closed (shoal.core.loop_thread)."""

    kind = "local"

    def __init__(self, cfg: Config, population: Population, n_shards: int = 1,
                 llm_urls: dict[str, list[str]] | None = None,
                 llm_cache: CacheSpec | None = None):
        self.n_shards = n_shards
        # the shards take turns on one thread, so each may use every worker thread
        workers = Workers(resolve_workers(cfg.executor.workers), cfg.executor.worker_rows)
        self.shards = [AgentShard(s, n_shards, cfg, population, llm_urls, llm_cache, workers)
                       for s in range(n_shards)]
        self._loop = LoopThread("shoal-shards", new_event_loop())

    def update(self, cfg: Config, population: Population) -> None:
        for shard in self.shards:
            shard.update(cfg, population)

    def decide(self, request: DecisionRequest) -> list[ShardResult]:
        parts = split_request(request, self.n_shards)
        return self._loop.run(gather_or_cancel(*(shard.decide(part) for shard, part
                                                 in zip(self.shards, parts, strict=True))))

    def thread_ids(self) -> tuple[int, ...]:
        ident = self._loop.ident
        return (ident,) if ident is not None else ()

    def close(self) -> None:
        async def close_shards() -> None:
            for shard in self.shards:
                if shard.llm is not None:
                    await shard.llm.close()

        self._loop.close(close_shards)


PROBE_TIMEOUT_S = 3.0  # a GCS that exists answers a TCP connect at once
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _no_cluster(address: str, why: str) -> InputError:
    return InputError(f"--address {address}: no Ray cluster answers there ({why}); start "
                      "one with `ray start --head` (then pass the address it prints, or "
                      "'auto'), or leave --address out to run on this machine alone")


def probe_ray_address(address: str) -> None:
    """Fail fast (InputError) unless a Ray cluster can be reached at `address`: Ray itself
    retries a GCS that is not there for minutes. 'auto' is resolved the way `ray.init`
    does (RAY_ADDRESS, then local clusters); host:port gets a plain TCP connect."""
    from ray._private.services import canonicalize_bootstrap_address

    target = address.removeprefix("ray://")  # Ray Client: its server port is probed
    try:
        # the address ray.init will dial (it turns localhost into the node's own IP)
        resolved = (target if address.startswith("ray://")
                    else canonicalize_bootstrap_address(target))
    except ConnectionError:  # 'auto' and no cluster found on this machine
        raise _no_cluster(address, "none is running on this machine") from None
    except ValueError as exc:
        raise InputError(f"--address {address}: not a Ray address ({exc}); expected "
                         "HOST:PORT or 'auto'") from None
    if resolved is None:  # 'local': ray.init starts one
        return
    host, _, port = resolved.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--address {address}: not a Ray address; expected HOST:PORT or "
                         "'auto'")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        raise _no_cluster(address, f"cannot connect to {resolved}: "
                          f"{exc.strerror or type(exc).__name__}") from None


def ensure_ray(address: str | None) -> bool:
    """Connect to Ray: join the cluster at `address`, or start a local instance on all
    CPUs, unless this process is already connected. True if this call connected (so the
    caller shuts it down). An address where no cluster answers is an InputError within
    seconds."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        probe_ray_address(address)
    # Ray's notices about itself are not Shoal's output: its INFO lines ("Started a local
    # Ray instance") go (logging_level), and so does the notice that token authentication
    # is on (a warning about a default, on every start); its other warnings and its errors
    # still show.
    logging.getLogger(RAY_AUTH_LOGGER).setLevel(logging.ERROR)
    quiet = {"include_dashboard": False, "log_to_driver": False,
             "logging_level": logging.WARNING}
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            # a local instance serves this machine only: its node address is loopback.
            # 'local': a new instance even if this machine runs a cluster (`ray start`
            # leaves its address where a bare ray.init would join it, num_cpus refused)
            ray.init(address="local", num_cpus=os.cpu_count() or 1,
                     _node_ip_address="127.0.0.1", **quiet)
    except ConnectionError as exc:
        if not address:
            raise InputError(f"cannot start a local Ray instance: {exc}") from None
        # the probe reached it: something does answer there, but Ray could not join it
        # (another Ray version, a cluster with token authentication, not a Ray GCS, ...)
        raise InputError(f"--address {address}: something answers there, but joining it as "
                         f"a Ray cluster failed ({exc}); check that it is the address "
                         "`ray start --head` printed, with the same Ray version and "
                         "authentication as this machine's, or leave --address out to run "
                         "on this machine alone") from None
    return True


class RayExecutor(Executor):
    """Shards as Ray async actors, placed on the cluster's nodes by `placement`; one remote
    call per shard per round. `nodes`: the id of the node each shard runs on (as the actor
    itself reports it)."""

    kind = "ray"

    def __init__(self, cfg: Config, population: Population, shards: int | str,
                 address: str | None = None, llm_urls: dict[str, list[str]] | None = None,
                 llm_cache: CacheSpec | None = None, placement: str = "spread"):
        import ray  # imported here: the local executor must not pay Ray's import time

        if placement not in PLACEMENTS:
            raise InputError(f"executor.placement: must be one of {', '.join(PLACEMENTS)}, "
                             f"got {placement!r}")
        self._ray = ray
        self._owns_ray = ensure_ray(address)
        self.actors = []
        self._in_flight: list = []  # the object refs of the round's shard calls
        self._up = False  # every actor answered its ping
        try:
            self._start(cfg, population, shards, llm_urls, llm_cache, placement)
        except BaseException:
            self.close()
            raise

    def _start(self, cfg, population, shards, llm_urls, llm_cache, placement) -> None:
        ray = self._ray
        nodes = worker_nodes(ray.nodes())
        self.n_shards = resolve_shards("ray", shards, nodes)
        self.placement = placement
        actor_cls = ray.remote(num_cpus=0)(_ShardActor)
        # the read-only world goes to the object store once; every actor gets the reference
        cfg_ref, pop_ref = ray.put(cfg), ray.put(population)
        # the cache's folders as absolute paths: a worker's working directory is not ours
        cache = absolute_cache(llm_cache)
        targets = (spread_over(nodes, self.n_shards, _driver_node(ray))
                   if placement == "spread" else [None] * self.n_shards)
        for s, node in enumerate(targets):
            options = {}
            if node is not None:
                # hard: with soft=True Ray moves shards off a node it finds busy
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            self.actors.append(actor_cls.options(**options).remote(
                s, self.n_shards, cfg_ref, pop_ref, llm_urls, cache))
        self.nodes: list[str] = ray.get([a.ping.remote() for a in self.actors])
        self._up = True
        log.info("%d shards (%s) on %d node(s): %s", self.n_shards, placement,
                 len(set(self.nodes)), self.describe_placement())

    def describe_placement(self) -> str:
        """How many shards run on each node, e.g. `3f2a…: 2, 91bc…: 1` (node ids cut)."""
        return ", ".join(f"{node[:8]}: {n}" for node, n in Counter(self.nodes).items())

    def decide(self, request: DecisionRequest) -> list[ShardResult]:
        parts = split_request(request, self.n_shards)
        # kept until every shard has answered: `close` cancels what an interrupted round
        # (Ctrl-C, a shard's error) left running
        self._in_flight = [a.decide.remote(p) for a, p in zip(self.actors, parts, strict=True)]
        try:
            results = self._ray.get(self._in_flight)
        except self._ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, InputError):  # (a replay's miss): said as it was raised
                raise exc.cause from None
            raise
        self._in_flight = []
        return results

    def update(self, cfg: Config, population: Population) -> None:
        # put once, shared by every actor (not shipped once per actor)
        cfg_ref, pop_ref = self._ray.put(cfg), self._ray.put(population)
        self._ray.get([a.update.remote(cfg_ref, pop_ref) for a in self.actors])

    def close(self) -> None:
        try:
            if self._up:
                self._wind_down()
        finally:
            for actor in self.actors:
                self._ray.kill(actor)
            self.actors = []
            self._up = False
            if self._owns_ray:
                self._owns_ray = False
                self._ray.shutdown()

    def _wind_down(self) -> None:
        """Before the actors are killed: cancel the shard calls still in flight (on an
        async actor `ray.cancel` cancels the call's asyncio task, and the shard cancels and
        awaits its LLM calls), then close each shard's connections on its actor's loop.
        Each step waits at most `SETTLE_S`: the actors are killed after it either way."""
        ray = self._ray
        refs, self._in_flight = self._in_flight, []
        try:
            for ref in refs:
                ray.cancel(ref)
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=SETTLE_S)
            closing = [a.close.remote() for a in self.actors]
            ray.wait(closing, num_returns=len(closing), timeout=SETTLE_S)
        except Exception as exc:  # (a lost actor or node): killing them is what is left
            log.debug("winding the shards down: %s", exc)


class _ShardActor:
    """The Ray actor body: an AgentShard behind async methods. (Object references passed
    as arguments arrive resolved: `population` is the object itself.)"""

    def __init__(self, shard_id: int, n_shards: int, cfg: Config, population: Population,
                 llm_urls: dict[str, list[str]] | None = None,
                 llm_cache: CacheSpec | None = None):
        self.shard = AgentShard(shard_id, n_shards, cfg, population, llm_urls, llm_cache)

    async def decide(self, request: DecisionRequest) -> ShardResult:
        return await self.shard.decide(request)

    async def update(self, cfg: Config, population: Population) -> None:
        self.shard.update(cfg, population)

    async def close(self) -> None:
        """Close the shard's LLM connections (and its response cache), on this actor's
        event loop, where they were opened."""
        if self.shard.llm is not None:
            await self.shard.llm.close()

    async def ping(self) -> str:
        """The id of the node this shard runs on (the shard answering: it is up)."""
        import ray

        await self.shard.ping()
        return ray.get_runtime_context().get_node_id()


def worker_nodes(nodes: list[dict]) -> list[dict]:
    """The nodes shards go to: the alive ones with CPUs (a node started with
    `--num-cpus 0`, often the head, is kept free of work), or every alive one if none
    has CPUs. `nodes`: `ray.nodes()`."""
    alive = [n for n in nodes if n.get("Alive")]
    return [n for n in alive if n.get("Resources", {}).get("CPU", 0) > 0] or alive


def spread_over(nodes: list[dict], n_shards: int, first: str | None = None) -> list[str]:
    """The node id of each shard: round-robin over `nodes` in passes, pass k visiting the
    nodes with more than k CPUs, then over again. So as many shards as CPUs give each node
    as many as it has CPUs, and shards up to the node count are on distinct nodes. Order:
    the driver's node `first`, then the others by address and id (the same cluster gives
    the same placement)."""
    order = sorted(nodes, key=lambda n: (n["NodeID"] != first, n.get("NodeManagerAddress", ""),
                                         n["NodeID"]))
    cpus = [max(1, int(n.get("Resources", {}).get("CPU", 0))) for n in order]
    slots = [n["NodeID"] for k in range(max(cpus)) for n, c in zip(order, cpus, strict=True)
             if c > k]
    return [slots[s % len(slots)] for s in range(n_shards)]


def _driver_node(ray) -> str | None:
    """The id of the node this process runs on (None if there is none: Ray Client)."""
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # (only an ordering preference)
        return None


def absolute_cache(spec: CacheSpec | None) -> CacheSpec | None:
    """The cache spec with absolute folders: shards resolve paths in their own working
    directory, which on Ray is not the driver's."""
    if spec is None:
        return None
    return dataclasses.replace(
        spec, write_dir=spec.write_dir and Path(spec.write_dir).absolute(),
        read_dirs=tuple(Path(d).absolute() for d in spec.read_dirs))


def resolve_shards(kind: str, shards: int | str, nodes: list[dict] | None = None) -> int:
    """The shard count: as configured; 'auto': 1 in-process, on Ray one per CPU of the
    cluster's `worker_nodes`; 'per_node': 1 in-process, on Ray one per worker node."""
    if shards not in ("auto", "per_node"):
        return int(shards)
    if kind == "local":
        return 1
    if not nodes:  # (not connected: this machine's CPUs)
        return max(1, os.cpu_count() or 1)
    if shards == "per_node":
        return len(nodes)
    return max(1, int(sum(n.get("Resources", {}).get("CPU", 0) for n in nodes)))


def make_executor(cfg: Config, population: Population,
                  llm_urls: dict[str, list[str]] | None = None,
                  llm_cache: CacheSpec | None = None) -> Executor:
    """The executor the config asks for (`llm_urls`: providers' resolved base URLs;
    `llm_cache`: the run's LLM response cache, if it has one)."""
    ex = cfg.executor
    if ex.kind == "ray":
        return RayExecutor(cfg, population, ex.shards, ex.address, llm_urls, llm_cache,
                           ex.placement)
    return LocalExecutor(cfg, population, resolve_shards("local", ex.shards), llm_urls,
                         llm_cache)
