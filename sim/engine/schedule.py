"""Step 1 of a round: which agents act (seeded by agent, so shard-independent).

P(active) = clip(activity_i · hourly[hour], 0, 1), where `hourly` is the config's 24-value
curve (or the agent's own, from its profile). Then `max_active` keeps the most eager (lowest
u/P) and `min_active` adds the next most eager. On each platform an active member acts with
probability `participation`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from shoal.config import Config
from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.core.workers import SERIAL, Workers


def round_start(cfg: Config, round_: int) -> datetime:
    """Simulated time at which round `round_` (1-based) begins."""
    return cfg.start_time + timedelta(minutes=cfg.minutes_per_round * (round_ - 1))


class Scheduler:
    """Draws the active set of each round."""

    def __init__(self, cfg: Config, activity: np.ndarray, hourly: np.ndarray | None = None,
                 workers: Workers = SERIAL):
        self.cfg = cfg
        self.workers = workers  # the draws are per agent: a range of agents per worker
        self.rng = CounterRNG(cfg.seed)
        self.activity = activity
        self.curve = np.asarray(cfg.activity.hourly_curve(), dtype=np.float64)
        # Optional per-agent curves [N, 24]; rows of nan mean "use the config's curve".
        self.hourly = None
        if hourly is not None:
            self.hourly = np.where(np.isnan(hourly), self.curve[None, :], hourly)

    def probability(self, round_: int, rows: slice = slice(None)) -> np.ndarray:
        """The chance of agents `rows` (all by default) to be active in this round."""
        hour = round_start(self.cfg, round_).hour
        mult = self.hourly[rows, hour] if self.hourly is not None else self.curve[hour]
        return np.clip(self.activity[rows] * mult, 0.0, 1.0)

    def active(self, round_: int, eligible: np.ndarray | None = None) -> np.ndarray:
        """Boolean mask of active agents (only `eligible` ones, if given)."""
        n = len(self.activity)
        u, p, active = np.empty(n), np.empty(n), np.empty(n, bool)

        def draw(rows: slice) -> None:  # (draws, chances and the mask of a range of agents)
            u[rows] = self.rng.uniform1(round_, Purpose.SCHEDULE,
                                        np.arange(rows.start, rows.stop))
            p[rows] = self.probability(round_, rows)
            np.less(u[rows], p[rows], out=active[rows])
            if eligible is not None:
                active[rows] &= eligible[rows]

        self.workers.over(n, draw)
        a = self.cfg.activity
        if a.max_active is not None or a.min_active:
            eagerness = u / np.maximum(p, 1e-12)
            if eligible is not None:
                eagerness = np.where(eligible, eagerness, np.inf)
            order = np.lexsort((np.arange(n), eagerness))  # ties broken by id
            count = int(active.sum())
            if a.max_active is not None and count > a.max_active:
                active = np.zeros(n, dtype=bool)
                active[order[: a.max_active]] = True
            elif count < a.min_active:
                n_ok = n if eligible is None else int(eligible.sum())
                active = np.zeros(n, dtype=bool)
                active[order[: min(a.min_active, n_ok)]] = True
        return active

    def participates(self, round_: int, platform: int, agents: np.ndarray,
                     participation: float) -> np.ndarray:
        """Mask over `agents`: does each act on this platform this round?"""
        if participation >= 1.0:
            return np.ones(len(agents), dtype=bool)
        u = self.rng.uniform1(round_, Purpose.PARTICIPATE + 100 * platform, agents)
        return u < participation
