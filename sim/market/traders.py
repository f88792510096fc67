"""Rule-based traders: from beliefs to a subjective probability, from the edge over the
price to a trade (docs/markets.md, "Rule-based traders").

The mapping, per trader and market (topic t, outcomes with anchor positions a_i):

1. Belief input x: the trader's position on t; with the social → market bridge on, blended
   with the round's social sentiment s on t (the mean stance of the posts of the previous
   round): x = (1 − w)·x + w·s. Plus noise: x += noise·z, z ~ N(0, 1) from the run's
   counter RNG keyed by (round, trader, market), so it does not depend on who else trades.
2. Belief: b_i ∝ exp(−(x − a_i)² / (2·width²)); for a yes/no market (anchors +1, −1) this
   is the logistic b_yes = 1 / (1 + exp(−2x / width²)).
3. Subjective probability q = c·b + (1 − c)/n, c the trader's confidence on t and n the
   number of outcomes: an unsure trader stays near even odds. (Not blended with the
   market's price: a limit that moved with the price would chase it.)
4. Trade, at the price when the order applies: if the trader holds an outcome whose
   price exceeds its belief by more than `min_edge`, sell the fraction
   kelly_fraction·(p_i − q_i)/p_i of those shares (the same bet as buying another
   outcome, without tying up more cash); else the outcome with the largest edge
   q_i − p_i, if above `min_edge`: buy it, spending
   the Kelly fraction f = kelly_fraction·(q_i − p_i)/(1 − p_i) of the cash set aside for
   this market (cash / number of open markets).
5. Each trade is a limit order at q_i: it fills only while the price is on the trader's
   side of q_i.

A rule trader decides q (steps 1–3) from the snapshot, like every decision; its side and
size (steps 4–5) are set when its order applies, against the price the earlier orders of
the round left. Sized on the snapshot's price instead, the round's orders all fall on the
side the stale price favours and the price overshoots, back and forth, every round.

Steps 1–3 are vectorised over traders; step 4 runs per order, in canonical order.
"""

from __future__ import annotations

import numpy as np

from shoal.core.vocabulary import ActionType
from shoal.market.config import RuleTrading


def beliefs(x: np.ndarray, anchors: np.ndarray, width: float) -> np.ndarray:
    """Probabilities [A, K] over outcomes from positions x [A] (step 2)."""
    logits = -((x[:, None] - anchors[None, :]) ** 2) / (2.0 * width * width)
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def subjective(position: np.ndarray, confidence: np.ndarray, anchors: np.ndarray,
               t: RuleTrading, noise: np.ndarray,
               sentiment: float | None, weight: float) -> np.ndarray:
    """Subjective probabilities [A, K] (steps 1–3)."""
    x = position.astype(np.float64)
    if sentiment is not None and np.isfinite(sentiment):
        x = (1.0 - weight) * x + weight * sentiment
    x = np.clip(x + t.noise * noise, -1.5, 1.5)
    b = beliefs(x, anchors, t.belief_width)
    c = np.clip(confidence, 0.0, 1.0)[:, None]
    return c * b + (1.0 - c) / b.shape[1]


def order(q: list[float], prices: list[float], cash: float, shares: list[float],
          t: RuleTrading, n_open: int) -> tuple[int, int, float, float] | None:
    """A trader's trade at the market's current prices (step 4): (action, outcome, amount,
    limit), or None when no outcome is mispriced by more than `min_edge` for it. Plain
    Python: it runs once per order, on a handful of outcomes."""
    least = max(t.min_trade, 1e-12)
    over = [(p - b, k) for k, (b, p, s) in enumerate(zip(q, prices, shares, strict=True))
            if s > 0]
    if over:
        loss, worst = max(over)
        if loss > t.min_edge:
            amount = t.kelly_fraction * loss / prices[worst] * shares[worst]
            if amount >= least:
                return int(ActionType.SELL), worst, amount, q[worst]
    gain, best = max((b - p, k) for k, (b, p) in enumerate(zip(q, prices, strict=True)))
    if gain > t.min_edge:
        spend = t.kelly_fraction * gain / (1.0 - prices[best]) * cash / max(n_open, 1)
        if spend >= least:
            return int(ActionType.BUY), best, spend, q[best]
    return None
