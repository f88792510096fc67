"""Reading a run's prediction markets: resolutions, and how good the forecasts were.

Scores, per market that resolved, for every trader (their probabilities when the market
closed, `forecasts`) and for the market itself (its prices then, agent −1):

- Brier score: Σ_i (p_i − o_i)², o_i = 1 for the outcome that happened, else 0 (0 is
  perfect, 2 the worst; 0.5 for even odds on a yes/no market);
- log score: ln p_o of the outcome that happened (0 is perfect; ln 0.5 for even odds),
  p_o floored at 1e-12 (a forecast that gave it no chance scores ln 1e-12 ≈ −27.6, not
  −∞, so means over agents stay finite).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from shoal.analysis.metrics import TEXT


def resolutions(payouts: pd.DataFrame) -> pd.DataFrame:
    """One row per resolved market: market, round, outcome, rule_value, paid (total)."""
    maker = payouts[payouts["agent"] == -1]
    return maker.rename(columns={"payout": "paid"})[
        ["market", "round", "outcome", "rule_value", "paid"]].reset_index(drop=True)


def scores(forecasts: pd.DataFrame, payouts: pd.DataFrame) -> pd.DataFrame:
    """Brier and log score per (market, agent) of resolved markets; agent −1 is the
    market (its closing prices)."""
    resolved = resolutions(payouts)[["market", "outcome"]].rename(
        columns={"outcome": "happened"})
    f = forecasts.merge(resolved, on="market")
    if f.empty:
        return pd.DataFrame({"market": pd.Series(dtype=TEXT),
                             "agent": pd.Series(dtype="int32"),
                             "brier": pd.Series(dtype=float),
                             "log_score": pd.Series(dtype=float)})
    hit = (f["outcome"] == f["happened"]).astype(float)
    f = f.assign(sq=(f["probability"] - hit) ** 2,
                 log=np.where(hit == 1, np.log(f["probability"].clip(lower=1e-12)), 0.0))
    out = f.groupby(["market", "agent"], sort=True).agg(brier=("sq", "sum"),
                                                        log_score=("log", "sum"))
    return out.reset_index()
