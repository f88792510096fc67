"""Counter-based random numbers keyed by (seed, round, agent, purpose).

Determinism across executors and shard counts (invariant 1, docs/architecture.md) needs
draws that do not depend on the order in which agents are processed. A counter-based
generator gives that: each draw is a pure function of its key. We use Philox4x32-10
(Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), vectorised in
numpy and checked against the Random123 known-answer vectors in the tests.

Counter layout: (agent, round, purpose, block); key: the 64-bit seed. Each block gives four
32-bit words, i.e. two doubles with 53 random bits.

Purposes keep streams apart: Shoal's own are `Purpose` (offset by 100·platform code and
1000·slot where a draw is per platform or slot, so below 2**20); a plug-in claims a named
stream with `stream("my_package.what")`, a number of its own above 2**20 with room for
offsets below 2**16, the same for the same name in every process.
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import numpy as np

from shoal.core.errors import InputError

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = 0x9E3779B9
_W1 = 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)


class Purpose(IntEnum):
    """What a draw is for; part of the counter so purposes never share numbers."""

    SCHEDULE = 1
    PARTICIPATE = 2
    POST = 3
    ENGAGE = 4
    ENGAGE_PICK = 5
    TOPIC = 6
    EXPRESSION = 7
    TEXT = 8
    FEED = 9
    MEMBERSHIP = 10
    POPULATION = 11
    INTERVENTION = 12
    LLM = 13
    MARKET = 14
    SURVEY = 15


# Counters per pass: the six work arrays (1.5 MB) stay in a core's cache, and each numpy
# call is long enough that ranges drawing on several threads do not queue for the GIL
# between calls: at 1M draws split over two threads, 16k a pass ran 1.12-1.16x faster
# than one thread, 32k 1.57-1.74x (one thread alone: the same time for both;
# bench/README.md, "Fewer GIL hand-offs").
_CHUNK = 1 << 15


def philox4x32(
    c0: np.ndarray | int, c1: np.ndarray | int, c2: np.ndarray | int, c3: np.ndarray | int,
    k0: int, k1: int, rounds: int = 10,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32 on 32-bit counters (arrays held in uint64, or scalars, broadcast);
    returns four uint64 words. It runs in chunks of `_CHUNK` counters with every
    operation in place: the ten rounds then work in cache instead of allocating ~80
    temporaries of the whole length (about ten times faster at a million counters)."""
    arrays = [np.asarray(c, dtype=np.uint64) for c in (c0, c1, c2, c3)]
    (n,) = np.broadcast_shapes(*(a.shape for a in arrays), (1,))
    counters = [np.broadcast_to(a, (n,)) for a in arrays]
    keys = []
    key0, key1 = k0 & 0xFFFFFFFF, k1 & 0xFFFFFFFF
    for i in range(rounds):
        if i:
            key0 = (key0 + _W0) & 0xFFFFFFFF
            key1 = (key1 + _W1) & 0xFFFFFFFF
        keys.append((np.uint64(key0), np.uint64(key1)))
    words = (np.empty(n, np.uint64), np.empty(n, np.uint64), np.empty(n, np.uint64),
             np.empty(n, np.uint64))
    p0_, p1_ = np.empty(min(n, _CHUNK), np.uint64), np.empty(min(n, _CHUNK), np.uint64)
    for start in range(0, n, _CHUNK):
        end = min(start + _CHUNK, n)
        x0, x1, x2, x3 = (w[start:end] for w in words)
        for c, x in zip(counters, (x0, x1, x2, x3), strict=True):
            np.bitwise_and(c[start:end], _MASK32, out=x)
        p0, p1 = p0_[: end - start], p1_[: end - start]
        for key0_, key1_ in keys:
            np.multiply(x0, _M0, out=p0)
            np.multiply(x2, _M1, out=p1)
            # (x0, x1, x2, x3) <- (hi(p1) ^ x1 ^ key0, lo(p1), hi(p0) ^ x3 ^ key1, lo(p0))
            np.right_shift(p1, _SHIFT32, out=x0)
            np.bitwise_xor(x0, x1, out=x0)
            np.bitwise_xor(x0, key0_, out=x0)
            np.bitwise_and(p1, _MASK32, out=x1)
            np.right_shift(p0, _SHIFT32, out=x2)
            np.bitwise_xor(x2, x3, out=x2)
            np.bitwise_xor(x2, key1_, out=x2)
            np.bitwise_and(p0, _MASK32, out=x3)
    return words


_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53


_STREAM_UNIT = 2**16  # a plug-in stream's room for offsets (platform, slot, ...)
_CLAIMED: dict[int, str] = {}


def stream(name: str) -> int:
    """The purpose number of the named random stream `name` (a plug-in's: claim it once,
    at import, e.g. `TALLY = stream("shoal_toy_plugin.tally")`). It depends on the name
    only, so a run draws the same numbers whatever else is installed; it lies above every
    purpose of Shoal's own and leaves offsets below 2**16 to the claimer. Two names that
    would share a number are an error naming both."""
    if not name or name != name.strip():
        raise InputError(f"random stream {name!r}: give a non-empty name, e.g. "
                         "'my_package.purpose'")
    slot = 16 + zlib.crc32(name.encode("utf-8")) % (2**15 - 16)
    number = slot * _STREAM_UNIT
    other = _CLAIMED.setdefault(number, name)
    if other != name:
        raise InputError(f"random streams {other!r} and {name!r} would share the purpose "
                         f"number {number}; rename one")
    return number



class CounterRNG:
    """Keyed draws: `uniform(round, purpose, agents, n)` is the same for an agent wherever
    and whenever it is computed."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._k0 = self.seed & 0xFFFFFFFF
        self._k1 = (self.seed >> 32) & 0xFFFFFFFF

    def uniform(self, round_: int, purpose: int, agents: np.ndarray, n: int = 1) -> np.ndarray:
        """Doubles in [0, 1), shape (len(agents), n)."""
        agents = np.asarray(agents, dtype=np.uint64)
        blocks = (n + 1) // 2
        a: np.ndarray = agents
        b: np.ndarray | int = 0
        if blocks > 1:
            a = np.repeat(agents, blocks)
            b = np.tile(np.arange(blocks, dtype=np.uint64), len(agents))
        w0, w1, w2, w3 = philox4x32(a, round_ & 0xFFFFFFFF, int(purpose) & 0xFFFFFFFF, b,
                                    self._k0, self._k1)
        out = np.empty((len(agents), blocks * 2), dtype=np.float64)
        # 53 bits from each pair of words, scaled to [0, 1)
        for hi, lo, col in ((w0, w1, 0), (w2, w3, 1)):
            np.left_shift(hi, _SHIFT32, out=hi)
            np.bitwise_or(hi, lo, out=hi)
            np.right_shift(hi, np.uint64(11), out=hi)
            np.multiply(hi.reshape(len(agents), blocks), _TO_UNIT, out=out[:, col::2])
        return out[:, :n]

    def uniform1(self, round_: int, purpose: int, agents: np.ndarray) -> np.ndarray:
        """One double in [0, 1) per agent."""
        return self.uniform(round_, purpose, agents, 1)[:, 0]

    def normal(self, round_: int, purpose: int, agents: np.ndarray, n: int = 1) -> np.ndarray:
        """Standard normals (Box–Muller), shape (len(agents), n)."""
        u = self.uniform(round_, purpose, agents, 2 * n)
        u1 = 1.0 - u[:, 0::2]  # in (0, 1], so log is finite
        return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u[:, 1::2])

    def generator(self, *key: int) -> np.random.Generator:
        """A numpy Generator for driver-side work keyed by `key` (e.g. initial conditions)."""
        return np.random.default_rng([self.seed, *key])
