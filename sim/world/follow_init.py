"""Initial follow graphs from the `graph` config: generators, edge-list files, networkx."""

from __future__ import annotations

import random
import re
from pathlib import Path

import networkx as nx
import numpy as np

from shoal.agents.population import Population
from shoal.config.model import (
    EdgeListGraph,
    GraphConfig,
    NetworkxGraph,
    OutDegreeGraph,
    PreferentialAttachmentGraph,
    RandomGraph,
    SmallWorldGraph,
)
from shoal.core.errors import InputError
from shoal.core.text_files import read_user_text


def initial_edges(cfg: GraphConfig, pop: Population, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(follower, followee) arrays for the configured initial graph, self-loops removed."""
    n = pop.size
    if isinstance(cfg, RandomGraph):
        src, dst = _random(n, cfg.mean_degree, rng)
    elif isinstance(cfg, OutDegreeGraph):
        src, dst = _out_degree(n, cfg.degree, rng)
    elif isinstance(cfg, PreferentialAttachmentGraph):
        if cfg.m >= n:
            raise InputError(f"graph.m: must be < population size ({n}), got {cfg.m}")
        seed = int(rng.integers(2**31))
        src, dst = _barabasi_albert(n, cfg.m, seed, cfg.mutual)
    elif isinstance(cfg, SmallWorldGraph):
        if cfg.k >= n:
            raise InputError(f"graph.k: must be < population size ({n}), got {cfg.k}")
        seed = int(rng.integers(2**31))
        src, dst = _undirected(nx.watts_strogatz_graph(n, cfg.k, cfg.p, seed=seed), cfg.mutual)
    elif isinstance(cfg, EdgeListGraph):
        src, dst = _edge_list(Path(cfg.file), n)
    elif isinstance(cfg, NetworkxGraph):
        src, dst = _networkx(cfg.name, n, cfg.mutual)
    elif cfg.kind == "profiles":
        if pop.following is None:
            raise InputError("graph.kind: 'profiles' needs a profile file with following lists")
        src = np.repeat(np.arange(n), [len(f) for f in pop.following])
        dst = np.asarray([j for f in pop.following for j in f], dtype=np.int64)
    else:  # none
        src = dst = np.empty(0, dtype=np.int64)
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    keep = src != dst
    return src[keep], dst[keep]


def _random(n: int, mean_degree: float, rng: np.random.Generator):
    """Directed G(n, p) with p = mean_degree / (n - 1), drawn as a binomial edge count."""
    if n < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    p = min(1.0, mean_degree / (n - 1))
    m = int(rng.binomial(n * (n - 1), p))
    keys = np.empty(0, dtype=np.int64)
    while len(keys) < m:  # redraw until m distinct ordered pairs
        need = m - len(keys)
        src = rng.integers(0, n, need)
        dst = rng.integers(0, n - 1, need)
        dst = dst + (dst >= src)  # skip self
        keys = np.union1d(keys, src.astype(np.int64) * n + dst)
    return keys // n, keys % n


def _out_degree(n: int, d: int, rng: np.random.Generator):
    """Each agent follows min(d, n-1) distinct others, uniformly (benchmark W's graph)."""
    d = min(d, n - 1)
    if d <= 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    rows = np.arange(n)[:, None]
    if n - 1 > 4 * d:
        targets = rng.integers(0, n - 1, (n, d))
        while True:
            s = np.sort(targets, axis=1)
            bad = np.nonzero((s[:, 1:] == s[:, :-1]).any(axis=1))[0]
            if not len(bad):
                break
            targets[bad] = rng.integers(0, n - 1, (len(bad), d))
    else:
        targets = np.stack([rng.choice(n - 1, d, replace=False) for _ in range(n)])
    targets = targets + (targets >= rows)
    return np.repeat(np.arange(n), d), targets.ravel()


def _barabasi_albert(n: int, m: int, seed: int, mutual: bool):
    """The edges of `networkx.barabasi_albert_graph(n, m, seed=seed)`, the same graph
    draw for draw, without building a networkx graph (at 100,000 agents networkx took 6.5 s
    of a 12.8 s setup, growing its dict-of-dicts graph). Each new node links to m distinct
    existing nodes chosen with probability proportional to degree, starting from a star
    on m + 1 nodes; the newer node follows the older one (both ways if `mutual`).

    networkx draws with `random.Random(seed).choice`, i.e. `_randbelow(len)`: one 32-bit
    Mersenne Twister word per attempt, shifted to len's bit length, rejected if >= len.
    The same words come from numpy's MT19937 started in the same state, in bulk."""
    words = _python_random_words(seed)
    repeated = [0] * m + list(range(1, m + 1))  # each node once per incident edge
    new = np.empty(max(n - m - 1, 0) * m, dtype=np.int64)  # targets of the new nodes
    at = 0
    for source in range(m + 1, n):
        size = len(repeated)
        shift = 32 - size.bit_length()
        targets: set[int] = set()
        while len(targets) < m:  # networkx's _random_subset
            r = words() >> shift
            while r >= size:
                r = words() >> shift
            targets.add(repeated[r])
        repeated.extend(targets)  # set order, as networkx extends it
        repeated.extend([source] * m)
        new[at:at + m] = list(targets)
        at += m
    older = np.concatenate([np.zeros(m, np.int64), new])
    newer = np.concatenate([np.arange(1, m + 1), np.repeat(np.arange(m + 1, n), m)])
    if mutual:
        return np.concatenate([older, newer]), np.concatenate([newer, older])
    return newer, older


def _python_random_words(seed: int):
    """A function returning, call by call, the 32-bit words `random.Random(seed)` would
    use (its `getrandbits(k)`, k <= 32, is the next word >> (32 - k))."""
    state = random.Random(seed).getstate()[1]
    bits = np.random.MT19937()
    bits.state = {"bit_generator": "MT19937",
                  "state": {"key": np.asarray(state[:624], dtype=np.uint32),
                            "pos": int(state[624])}}

    def chunks():
        while True:
            yield from bits.random_raw(1 << 16).tolist()
    return chunks().__next__


def _undirected(g: nx.Graph, mutual: bool):
    """Edges of an undirected graph: both ways if mutual, else lower id follows higher."""
    e = np.asarray(list(g.edges()), dtype=np.int64).reshape(-1, 2)
    a, b = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
    if mutual:
        return np.concatenate([a, b]), np.concatenate([b, a])
    return b, a  # newer (higher id) follows older, as in attachment growth


_SEPARATOR = re.compile(r"\s*,\s*|\s+")


def _edge_list(path: Path, n: int):
    """Read `follower followee` pairs (comma or whitespace separated, further columns
    ignored, `#` comments and blank lines skipped, an optional header). Read line by line,
    so every problem names the line of the file it is on."""
    text = read_user_text(path, "edge list", "an edge list is a text file of follower, "
                                              "followee pairs")
    src: list[int] = []
    dst: list[int] = []
    first = True
    for number, line in enumerate(text.splitlines(), 1):
        cells = _SEPARATOR.split(line.split("#", 1)[0].strip())
        if cells == [""]:
            continue
        if len(cells) < 2:
            raise InputError(f"{path}:{number}: expected two agent ids (follower, followee), "
                             f"got {line.strip()!r}")
        ids = [_agent_id(c) for c in cells[:2]]
        # a header row: neither of its first two cells is an integer (one that is is a
        # typo in an edge, `0 1O`, reported as such below)
        if first and all(v is None for v in ids):
            first = False
            continue
        first = False
        for cell, value in zip(cells, ids, strict=False):
            if value is None or not 0 <= value < n:
                raise InputError(f"{path}:{number}: agent id must be an integer in "
                                 f"[0, {n - 1}], got {cell!r}")
        src.append(ids[0])
        dst.append(ids[1])
    if first:
        raise InputError(f"{path}: the edge list is empty; give follower, followee pairs "
                         "(or use graph: none)")
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


def _agent_id(cell: str) -> int | None:
    """An id cell as an integer (`3` or `3.0`), or None when it is not one."""
    try:
        return int(cell)
    except ValueError:
        try:
            value = float(cell)
        except ValueError:
            return None
        return int(value) if value.is_integer() else None


def _networkx(name: str, n: int, mutual: bool):
    """A zero-argument networkx generator (one of NETWORKX_BUILTINS: the config checks the
    name); node labels become agent ids in sorted order. Its size is checked here for a
    population read from a file (a generated one's, by the config)."""
    g = getattr(nx, name)()
    if g.number_of_nodes() != n:
        raise InputError(
            f"graph.name: {name} has {g.number_of_nodes()} nodes but population.size is {n}"
        )
    g = nx.convert_node_labels_to_integers(g, ordering="sorted")
    if g.is_directed():
        e = np.asarray(list(g.edges()), dtype=np.int64).reshape(-1, 2)
        return e[:, 0], e[:, 1]
    return _undirected(nx.Graph(g), mutual)
