"""Automated market makers: who is on the other side of every trade.

A maker quotes a price for each outcome of one market (prices are positive and sum to 1;
an LMSR price underflows to 0.0 when its q trails the leader's by more than ~745·b),
sells shares for cash and buys them back. A share of the outcome that happens pays 1 at
resolution, so a price reads as the market's probability. Two makers, behind one
interface, registered in `shoal.core.registry.MARKET_MAKERS` with their config models:

- `lmsr`: Hanson's logarithmic market scoring rule. Cost C(q) = b·ln Σ exp(q_i / b) of the
  outstanding shares q; buying moves q and costs the difference of C. Prices are the
  softmax of q / b; the cost of a trade depends only on where it starts and ends (path
  independence), and the maker can lose at most b·ln(1 / min initial price), b·ln n from
  even prices. `b` is the liquidity: the larger, the less a trade moves the price.
- `constant_product`: the pool maker of Polymarket-style AMMs (Gnosis's fixed-product
  maker, as MiroShark runs it): the pool holds reserves y_i of each outcome and keeps
  Π y_i constant. Cash buys complete sets (one share of every outcome) that go into the
  pool, and the pool pays out the bought outcome; selling is the reverse. Prices are
  (1/y_i) / Σ (1/y_j). `liquidity` is the pool's starting depth.

Trades are sized in cash for buying (spend c, receive shares) and in shares for selling
(sell s, receive cash); a buy of c followed by a sell of the shares it gave returns c
(no round-trip gain, up to floating point). Everything here is scalar `math`: trades
apply one at a time, in canonical order, and n is small.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Literal

import numpy as np
from pydantic import Field

from shoal.config.base import Strict
from shoal.core.errors import InputError
from shoal.core.registry import MARKET_MAKERS
from shoal.core.state import State


class MarketMaker(ABC):
    """One market's maker: its prices, trades against it, and the totals that conservation
    checks read (`collected`: net cash taken in; `issued()`: shares of each outcome held by
    traders)."""

    def __init__(self, initial_prices: np.ndarray):
        p = np.asarray(initial_prices, dtype=np.float64)
        if p.ndim != 1 or len(p) < 2 or (p <= 0).any() or abs(p.sum() - 1) > 1e-9:
            raise InputError(f"initial prices must be positive and sum to 1, got {p.tolist()}")
        self.initial = p / p.sum()
        self.n = len(p)
        self.collected = 0.0

    @abstractmethod
    def prices(self) -> np.ndarray:
        """Current price of every outcome (positive, summing to 1)."""

    def price(self, outcome: int) -> float:
        """The current price of one outcome."""
        return float(self.prices()[outcome])

    @abstractmethod
    def quote_buy(self, outcome: int, cash: float) -> float:
        """Shares of `outcome` that `cash` buys now (no change)."""

    @abstractmethod
    def quote_sell(self, outcome: int, shares: float) -> float:
        """Cash that selling `shares` of `outcome` gives now (no change)."""

    @abstractmethod
    def _move(self, outcome: int, cash: float, shares: float) -> None:
        """Take `cash` in (negative: pay out) and issue `shares` (negative: take back)."""

    @abstractmethod
    def issued(self) -> np.ndarray:
        """Shares of each outcome the maker has sold, net of those bought back."""

    @abstractmethod
    def worst_case_loss(self) -> float:
        """The most the maker can lose, whatever happens (inf if unbounded)."""

    @abstractmethod
    def price_after(self, outcome: int, cash: float, shares: float) -> float:
        """The price of `outcome` were the maker to take `cash` and issue `shares` of it
        (a quote's result; no change)."""

    def cash_to_price(self, outcome: int, limit: float, cash: float) -> float:
        """The most, up to `cash`, a buy of `outcome` may spend before its price passes
        `limit` (a limit order's fill)."""
        if self.price_after(outcome, cash, self.quote_buy(outcome, cash)) <= limit:
            return cash
        return _bisect(lambda c: self.price_after(outcome, c, self.quote_buy(outcome, c))
                       <= limit, 0.0, cash)

    def shares_to_price(self, outcome: int, limit: float, shares: float) -> float:
        """The most, up to `shares`, a sell of `outcome` may sell before its price falls
        below `limit`."""
        def ok(s: float) -> bool:
            return self.price_after(outcome, -self.quote_sell(outcome, s), -s) >= limit
        return shares if ok(shares) else _bisect(ok, 0.0, shares)

    def buy(self, outcome: int, cash: float) -> float:
        """Spend `cash` on `outcome`; the shares received."""
        shares = self.quote_buy(outcome, cash)
        self._move(outcome, cash, shares)
        return shares

    def sell(self, outcome: int, shares: float) -> float:
        """Sell `shares` of `outcome` back; the cash received."""
        cash = self.quote_sell(outcome, shares)
        self._move(outcome, -cash, -shares)
        return cash

    def loss_if(self, outcome: int) -> float:
        """What the maker loses (negative: gains) if `outcome` happens now."""
        return float(self.issued()[outcome] - self.collected)

    @abstractmethod
    def get_state(self) -> State:
        """The maker's state (copies)."""

    @abstractmethod
    def set_state(self, state: State) -> None:
        """Take a state `get_state` returned."""


def _bisect(ok, lo: float, hi: float) -> float:
    """The largest x in [lo, hi] with ok(x), ok being true at lo and false at hi."""
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi) or hi - lo <= 1e-12 * (1.0 + abs(hi)):
            break
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _lse(values) -> float:
    """log Σ exp(v), stable."""
    m = max(values)
    return m + math.log(sum([math.exp(v - m) for v in values]))


def _log_expm1(x: float) -> float:
    """log(exp(x) − 1) for x > 0, accurate for tiny x (no 1 − 1) and huge x (no overflow)."""
    return x + math.log(-math.expm1(-x))


def _log1p_exp(z: float) -> float:
    """log(1 + exp(z)), stable for any z."""
    return max(z, 0.0) + math.log1p(math.exp(-abs(z)))


class LMSRConfig(Strict):
    """The logarithmic market scoring rule, with liquidity `b` (in cash units)."""

    kind: Literal["lmsr"] = "lmsr"
    b: float = Field(default=100.0, gt=0)


@MARKET_MAKERS.register("lmsr", config=LMSRConfig)
class LMSR(MarketMaker):
    """Hanson's LMSR; the state is the outstanding shares q (q_i = b·ln p_i at the start,
    so that C starts at 0)."""

    def __init__(self, config: LMSRConfig, initial_prices: np.ndarray):
        super().__init__(initial_prices)
        self.b = float(config.b)
        self.q0 = [self.b * math.log(p) for p in self.initial]
        self.q = list(self.q0)

    def cost(self, q=None) -> float:
        """C(q) = b·ln Σ exp(q_i / b)."""
        return self.b * _lse([x / self.b for x in (self.q if q is None else q)])

    def prices(self) -> np.ndarray:
        z = [x / self.b for x in self.q]
        m = max(z)
        e = np.exp(np.asarray(z) - m)
        return e / e.sum()

    def _log_price(self, outcome: int) -> tuple[float, float]:
        """(ln p_i, ln(1 − p_i)), each from log-sum-exps (no 1 − p_i rounding)."""
        m = max(self.q) / self.b  # shifted before summing: z − m is exact-ish, so the
        z = [x / self.b - m for x in self.q]  # logs keep their digits at large q/b
        total = _lse(z)
        rest = _lse([v for j, v in enumerate(z) if j != outcome])
        return z[outcome] - total, rest - total

    def quote_buy(self, outcome: int, cash: float) -> float:
        # C(q + s·e_i) − C(q) = c  ⇔  s = b·ln(1 + (e^{c/b} − 1)/p_i), in logs: no
        # difference of two near-equal numbers, however small c/b or p_i, however large q/b.
        if not cash > 0:
            return 0.0
        log_p, _ = self._log_price(outcome)
        return self.b * _log1p_exp(_log_expm1(cash / self.b) - log_p)

    def quote_sell(self, outcome: int, shares: float) -> float:
        # C(q) − C(q − s·e_i) = −b·ln(1 − p_i + p_i·e^{−s/b}), evaluated without
        # cancellation (a difference of two costs loses the digits of a small sale when
        # q/b is large).
        if not shares > 0:
            return 0.0
        x = shares / self.b
        log_p, log_q = self._log_price(outcome)
        if log_p <= -math.log(2.0):
            ratio = math.log1p(math.exp(log_p) * math.expm1(-x))
        elif x < 1.0:
            ratio = -x + math.log1p(math.exp(log_q) * math.expm1(x))
        else:  # ln(p + (1 − p)·e^x) − x
            ratio = log_p + _log1p_exp(log_q + x - log_p) - x
        return -self.b * ratio

    def price(self, outcome: int) -> float:
        return math.exp(self._log_price(outcome)[0])

    def price_after(self, outcome: int, cash: float, shares: float) -> float:
        z = [x / self.b for x in self.q]
        z[outcome] += shares / self.b
        return math.exp(z[outcome] - _lse(z))

    def _q_at(self, outcome: int, limit: float) -> float:
        """The outstanding shares of `outcome` at which its price is `limit`:
        exp(q_i/b) = limit/(1 − limit)·Σ_{j≠i} exp(q_j/b)."""
        rest = _lse([x / self.b for j, x in enumerate(self.q) if j != outcome])
        return self.b * (math.log(limit) - math.log1p(-limit) + rest)

    def cash_to_price(self, outcome: int, limit: float, cash: float) -> float:
        # Closed form: the cost of moving q_i to where the price is `limit`.
        if self.price(outcome) >= limit:
            return 0.0
        # C(target) − C(q) = b·ln((1 − p_i)/(1 − limit))
        _, log_q = self._log_price(outcome)
        return min(cash, max(self.b * (log_q - math.log1p(-limit)), 0.0))

    def shares_to_price(self, outcome: int, limit: float, shares: float) -> float:
        if self.price(outcome) <= limit:
            return 0.0
        return min(shares, max(self.q[outcome] - self._q_at(outcome, limit), 0.0))

    def _move(self, outcome: int, cash: float, shares: float) -> None:
        self.q[outcome] += shares
        self.collected += cash

    def issued(self) -> np.ndarray:
        return np.asarray([x - x0 for x, x0 in zip(self.q, self.q0, strict=True)])

    def worst_case_loss(self) -> float:
        return self.b * math.log(1.0 / float(self.initial.min()))

    def get_state(self) -> State:
        return State(arrays={"q": np.asarray(self.q)}, meta={"collected": self.collected})

    def set_state(self, state: State) -> None:
        self.q = [float(x) for x in state.arrays["q"]]
        self.collected = float(state.meta["collected"])


class ConstantProductConfig(Strict):
    """A constant-product pool; `liquidity`: the reserve of each outcome at even prices."""

    kind: Literal["constant_product"] = "constant_product"
    liquidity: float = Field(default=1000.0, gt=0)


@MARKET_MAKERS.register("constant_product", config=ConstantProductConfig)
class ConstantProduct(MarketMaker):
    """A fixed-product pool; the state is the reserves y (Π y is invariant)."""

    def __init__(self, config: ConstantProductConfig, initial_prices: np.ndarray):
        super().__init__(initial_prices)
        inv = 1.0 / self.initial
        self.y0 = [float(config.liquidity * v * self.n / inv.sum()) for v in inv]
        self.y = list(self.y0)

    def _log_k(self) -> float:
        return math.fsum(math.log(v) for v in self.y)

    def prices(self) -> np.ndarray:
        inv = 1.0 / np.asarray(self.y)
        return inv / inv.sum()

    def price(self, outcome: int) -> float:
        return (1.0 / self.y[outcome]) / sum([1.0 / v for v in self.y])

    def _other(self, outcome: int) -> float:
        """The reserve of the other outcome of a two-outcome pool."""
        return self.y[1 - outcome]

    def _reserve_after_buy(self, outcome: int, cash: float) -> float:
        """The bought outcome's reserve after a buy: k / Π_{j≠i}(y_j + c)."""
        log_rest = math.fsum(math.log(v + cash) for j, v in enumerate(self.y) if j != outcome)
        return math.exp(self._log_k() - log_rest)

    def quote_buy(self, outcome: int, cash: float) -> float:
        return self.y[outcome] + cash - self._reserve_after_buy(outcome, cash)

    def buy(self, outcome: int, cash: float) -> float:
        # The new reserve is set from the invariant, not as y_i + c − shares: when it is
        # tiny beside the others, that difference would lose every digit.
        after = self._reserve_after_buy(outcome, cash)
        shares = self.y[outcome] + cash - after
        self.y = [v + cash for v in self.y]
        self.y[outcome] = after
        self.collected += cash
        return shares

    def quote_sell(self, outcome: int, shares: float) -> float:
        # The cash c burns c complete sets: (y_i + s − c)·Π_{j≠i}(y_j − c) = k. The left side
        # falls as c grows; bisect between 0 and where a reserve would hit zero.
        y, log_k = self.y, self._log_k()
        if self.n == 2:  # (y_i + s − c)(y_j − c) = k: the smaller root of a quadratic
            yi, yj = y[outcome] + shares, self._other(outcome)
            b, c0 = yi + yj, yi * yj - math.exp(log_k)
            return 2.0 * c0 / (b + math.sqrt(max(b * b - 4.0 * c0, 0.0)))
        hi = min([v for j, v in enumerate(y) if j != outcome] + [y[outcome] + shares])

        def excess(c: float) -> float:
            return (math.log(y[outcome] + shares - c)
                    + math.fsum(math.log(v - c) for j, v in enumerate(y) if j != outcome)
                    - log_k)

        lo = 0.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            if excess(mid) > 0:
                lo = mid
            else:
                hi = mid
        return lo

    def price_after(self, outcome: int, cash: float, shares: float) -> float:
        y = [v + cash for v in self.y]
        y[outcome] -= shares
        return (1.0 / y[outcome]) / math.fsum(1.0 / v for v in y)

    def _other_at(self, limit: float) -> float:
        """Two outcomes: the other reserve at which this outcome's price is `limit`
        (p_i = y_j² / (k + y_j²), since y_i·y_j = k)."""
        return math.sqrt(limit * math.exp(self._log_k()) / (1.0 - limit))

    def cash_to_price(self, outcome: int, limit: float, cash: float) -> float:
        if self.n != 2:
            return super().cash_to_price(outcome, limit, cash)
        if self.price(outcome) >= limit:  # buying adds c to the other reserve
            return 0.0
        return min(cash, max(self._other_at(limit) - self._other(outcome), 0.0))

    def shares_to_price(self, outcome: int, limit: float, shares: float) -> float:
        if self.n != 2:
            return super().shares_to_price(outcome, limit, shares)
        if self.price(outcome) <= limit:
            return 0.0
        other = self._other_at(limit)  # selling burns c = y_j − y_j' sets
        burned = self._other(outcome) - other
        sold = math.exp(self._log_k()) / other - self.y[outcome] + burned
        return min(shares, max(sold, 0.0))

    def _move(self, outcome: int, cash: float, shares: float) -> None:
        self.y = [v + cash for v in self.y]
        self.y[outcome] -= shares
        self.collected += cash

    def issued(self) -> np.ndarray:
        # Sets minted net = cash collected; what is not in the pool is with traders.
        return np.asarray([y0 + self.collected - y
                           for y, y0 in zip(self.y, self.y0, strict=True)])

    def worst_case_loss(self) -> float:
        # The pool pays winners from reserves: at most its starting reserve of the outcome.
        return float(max(self.y0))

    def get_state(self) -> State:
        return State(arrays={"y": np.asarray(self.y)}, meta={"collected": self.collected})

    def set_state(self, state: State) -> None:
        self.y = [float(v) for v in state.arrays["y"]]
        self.collected = float(state.meta["collected"])


def make_maker(config, initial_prices: np.ndarray) -> MarketMaker:
    """The maker a market's `maker:` section names."""
    return MARKET_MAKERS.create(config, initial_prices)
