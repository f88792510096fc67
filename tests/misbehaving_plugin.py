"""Misbehaving parts, as a careless plug-in would register them on import (used by
tests/test_misbehaving_parts.py, in a process of its own: a plug-in is registered before
the config models first build, as an installed one's entry point is). `MODE` picks the
misbehaviour; `main` runs cases and prints what each did, as JSON."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import yaml

from shoal.agents.actions import ActionBatch
from shoal.agents.policy import Policy
from shoal.beliefs.rules.base import UpdateRule
from shoal.config.base import Strict
from shoal.config.interventions import InterventionSpec
from shoal.core.registry import (
    BELIEF_RULES,
    INTERVENTIONS,
    MARKET_MAKERS,
    POLICIES,
    RECOMMENDERS,
)
from shoal.core.vocabulary import ActionType as A
from shoal.engine.recommenders import Recommender
from shoal.market.makers import LMSR, LMSRConfig

BAD_ROUND = 2  # the round each part misbehaves in (round 1 goes well)
MODE: dict[str, str] = {}  # the misbehaviour the running test asked for


def _now(round_: int) -> bool:
    return round_ == BAD_ROUND


class RuleCfg(Strict):
    rule: Literal["misbehaving_rule"]


class MisbehavingRule(UpdateRule):
    def __init__(self, cfg: RuleCfg):
        self.cfg = cfg

    def update(self, beliefs, exposures, ctx) -> None:
        if not _now(ctx.round):
            return
        mode = MODE["rule"]
        if mode == "raise":
            raise RuntimeError("boom")
        if mode == "exit":
            sys.exit(0)
        if mode == "range":
            beliefs.position[0, 0] = 3.0
        if mode == "confidence":
            beliefs.confidence[1, 0] = -0.5


class FeedCfg(Strict):
    kind: Literal["misbehaving_feed"]


class MisbehavingFeed(Recommender):
    def __init__(self, cfg: FeedCfg):
        self.cfg = cfg

    def feeds(self, ctx, agents: np.ndarray) -> np.ndarray:
        k = ctx.platform.k
        out = np.full((len(agents), k), -1, dtype=np.int64)
        mine = ctx.posts.platform_ids(ctx.platform.code)[-k:][::-1]
        out[:, :len(mine)] = mine
        if not _now(ctx.round):
            return out
        mode = MODE["feed"]
        if mode == "missing":
            out[0, 0] = ctx.posts.n
        elif mode == "other_platform":
            other = np.flatnonzero(ctx.posts.platform[:ctx.posts.n] != ctx.platform.code)
            out[0, 0] = other[0]
        elif mode == "twice":
            out[0, 1] = out[0, 0]
        elif mode == "floats":
            return out.astype(np.float64)
        elif mode == "write_position":
            ctx.position[agents] = 0.0
        return out


class ShoutCfg(Strict):
    kind: Literal["misbehaving_policy"]


class MisbehavingPolicy(Policy):
    def __init__(self, cfg, topics, rng, interests, usernames):
        self.n_topics = len(topics)

    @classmethod
    def reads_feed_features(cls, cfg) -> bool:
        return False

    def decide(self, view, position, confidence, round_, max_actions) -> ActionBatch:
        n = len(view.agents)
        batch = ActionBatch(
            agent=view.agents.astype(np.int32), platform=np.full(n, view.platform, np.int8),
            action=np.full(n, A.POST, np.int8), target_post=np.full(n, -1, np.int64),
            target_agent=np.full(n, -1, np.int32), stance=position.copy(),
            text=["a post"] * n, slot=np.zeros(n, np.int8))
        if not _now(round_) or not n:
            return batch
        mode = MODE["policy"]
        if mode == "stranger":
            batch.agent[0] = -1000
        elif mode == "slot":
            batch.slot[0] = max_actions
        elif mode == "stance":
            batch.stance[0, 0] = 42.0
        elif mode == "code":
            batch.action[0] = 99
        elif mode == "none":
            return None  # type: ignore[return-value]
        return batch


class NudgeCfg(InterventionSpec):
    kind: Literal["misbehaving_intervention"]


def misbehaving_intervention(ctx, spec):
    mode = MODE["intervention"]
    if mode == "list":
        return [1, 2]
    if mode == "nan":
        return {"x": float("nan")}
    if mode == "range":
        ctx.world.beliefs.position[0, 0] = 2.5
        return {}
    return {"calls": np.int64(3), "weight": np.float32(0.5)}


class MakerCfg(LMSRConfig):
    kind: Literal["misbehaving_maker"] = "misbehaving_maker"  # type: ignore[assignment]


class MisbehavingMaker(LMSR):
    """LMSR whose quotes go wrong: NaN shares, or a price above 1 after a buy."""

    def quote_buy(self, outcome: int, cash: float) -> float:
        if MODE["maker"] == "nan":
            return float("nan")
        return super().quote_buy(outcome, cash)

    def prices(self) -> np.ndarray:
        p = super().prices()
        return p * 2 if MODE["maker"] == "prices" and self.collected else p


BELIEF_RULES.register("misbehaving_rule", RuleCfg, MisbehavingRule)
MARKET_MAKERS.register("misbehaving_maker", MakerCfg, MisbehavingMaker)
RECOMMENDERS.register("misbehaving_feed", FeedCfg, MisbehavingFeed, feed_order="newest first")
POLICIES.register("misbehaving_policy", ShoutCfg, MisbehavingPolicy)
INTERVENTIONS.register("misbehaving_intervention", NudgeCfg, misbehaving_intervention)

FINE = {"rule": "fine", "feed": "fine", "policy": "fine", "intervention": "fine",
        "maker": "fine"}


def _cli(args: list[str]) -> tuple[int, str]:
    from shoal.cli.main import main as shoal

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = shoal(args)
    return code, " ".join(out.getvalue().split())


def _max_round(run: Path) -> int | None:
    import duckdb

    with duckdb.connect(str(run / "trajectory.duckdb"), read_only=True) as con:
        return con.execute("SELECT max(round) FROM beliefs").fetchone()[0]


def run_case(folder: Path, part: str, mode: str, changes: dict) -> dict:
    """Run the config with `part` misbehaving as `mode`; then, the part behaving, resume
    it. What each step said and which rounds the file held."""
    MODE.clear()
    MODE.update(FINE)
    MODE[part] = mode
    folder.mkdir(parents=True)
    if "base" in changes:  # a config of the repository's, changed
        data = yaml.safe_load(Path(changes.pop("base")).read_text())
        for dotted, value in changes.pop("set").items():
            *path, last = dotted.split(".")
            node = data
            for key in path:
                node = node[int(key)] if isinstance(node, list) else node[key]
            node[last] = value
    else:
        data = {"name": "misbehaving", "seed": 5, "rounds": 3, "population": {"size": 60},
                "topics": ["carbon_tax"], "activity": {"level": 0.9},
                "executor": {"kind": "local"}, "platforms": {"twitter": {}, "reddit": {}}}
    data.update(changes)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    code, said = _cli(["run", str(config), "--out", str(folder / "runs"), "--quiet"])
    runs = list((folder / "runs").iterdir()) if (folder / "runs").exists() else []
    case = {"code": code, "said": said, "rounds": _max_round(runs[0]) if runs else None}
    if runs and code != 0:
        MODE.update(FINE)
        case["resume_code"], case["resume_said"] = _cli(["resume", str(runs[0]), "--quiet"])
        case["rounds_resumed"] = _max_round(runs[0])
    if runs:
        import duckdb

        with duckdb.connect(str(runs[0] / "trajectory.duckdb"), read_only=True) as con:
            case["effects"] = [r[0] for r in con.execute(
                "SELECT effect FROM interventions ORDER BY round, idx").fetchall()]
    return case


def notebook_case(folder: Path) -> dict:
    """In a notebook: a step after the part's error, then a resume."""
    from shoal.config import load_config
    from shoal.runs.simulation import Simulation

    MODE.clear()
    MODE.update(FINE, rule="raise")
    folder.mkdir(parents=True)
    data = {"name": "notebook", "seed": 5, "rounds": 3, "population": {"size": 60},
            "topics": ["carbon_tax"], "executor": {"kind": "local"},
            "beliefs": {"update": {"rule": "misbehaving_rule"}}}
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    sim = Simulation.create(load_config(folder / "config.yaml"), out=folder / "runs")
    out: dict = {}
    try:
        sim.step()
        for key in ("first", "second"):
            try:
                sim.step()
                out[key] = "stepped"
            except Exception as exc:  # (what the notebook sees)
                out[key] = f"{type(exc).__name__}: {exc}"
            MODE["rule"] = "fine"
    finally:
        sim.close()
    resumed = Simulation.resume(sim.dir.root)
    try:
        resumed.run()
        out["resumed_round"] = resumed.round
    finally:
        resumed.close()
    return out


def main(cases_json: str, folder: str) -> None:
    """Run every case of the JSON list [[id, part, mode, changes], ...]; print results."""
    root = Path(folder)
    results = {cid: run_case(root / cid, part, mode, changes)
               for cid, part, mode, changes in json.loads(cases_json)}
    results["notebook"] = notebook_case(root / "notebook")
    print(json.dumps(results))

