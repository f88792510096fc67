"""The market's books: every trader's cash, shares and cost basis, every market's maker,
and the application of trades (one at a time, in canonical order, each validated against
the books as the earlier trades of the round left them).

Accounting: a buy moves cash from the trader to the maker and shares from the maker to
the trader; a sell the reverse. At resolution every share of the outcome that happened
pays 1 (from the maker), the others pay 0. Cash and shares are conserved: at any time,
Σ traders' cash + Σ makers' collected cash − Σ payouts = Σ starting budgets, and for
every outcome Σ traders' shares = the maker's issued shares (`check_conservation`).
Realised P&L is cash received minus the cost basis of the shares given up (average
cost), payouts included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from shoal.core.errors import InputError
from shoal.core.registry import PluginError, calling, from_shoal
from shoal.core.state import State
from shoal.core.vocabulary import ActionType, Reason
from shoal.market.config import MarketConfig
from shoal.market.makers import MarketMaker, make_maker

TOLERANCE = 1e-9  # cash or shares a trade may exceed the holding by (floating point)


@dataclass
class Market:
    """One market: its config, maker, and what happened to it."""

    index: int
    cfg: MarketConfig
    maker: MarketMaker
    closes: int
    resolved: str | None = None  # the outcome, once resolved
    resolved_round: int | None = None
    last_prices: np.ndarray | None = None  # at the end of the previous round
    prices_before: np.ndarray | None = None  # at the start of the previous round

    @property
    def outcomes(self) -> list[str]:
        """Outcome names."""
        return self.cfg.outcome_names()

    def is_open(self, r: int) -> bool:
        """Does it trade in round r?"""
        return self.cfg.opens <= r <= self.closes and self.resolved is None


@dataclass
class Trade:
    """One applied trade (a row of the `trades` table)."""

    market: int
    agent: int
    side: str  # "buy" or "sell"
    outcome: int
    cash: float  # paid (buy) or received (sell)
    shares: float
    price_before: float
    price_after: float
    source: int  # decision source code (rule, llm, ...)


@dataclass
class Books:
    """Cash per agent; shares and cost basis per market; the makers."""

    markets: list[Market]
    cash: np.ndarray  # float64 [N]
    members: np.ndarray  # bool [N]: traders
    budget: float
    shares: list[np.ndarray] = field(default_factory=list)  # per market [N, outcomes]
    cost: list[np.ndarray] = field(default_factory=list)  # per market [N, outcomes]
    realised: np.ndarray | None = None  # float64 [N]
    paid_out: float = 0.0  # total payouts so far

    def __post_init__(self) -> None:
        n = len(self.cash)
        if not self.shares:
            self.shares = [np.zeros((n, len(m.outcomes))) for m in self.markets]
            self.cost = [np.zeros((n, len(m.outcomes))) for m in self.markets]
        if self.realised is None:
            self.realised = np.zeros(n)

    @classmethod
    def create(cls, configs: list[MarketConfig], members: np.ndarray, budget: float,
               rounds: int) -> Books:
        """Fresh books: each trader holds `budget` in cash, each maker its initial prices."""
        markets = [Market(i, m, make_maker(m.maker, np.asarray(m.prices0())),
                          m.closes or rounds) for i, m in enumerate(configs)]
        for m in markets:
            m.last_prices = m.maker.prices()
        return cls(markets, np.where(members, budget, 0.0), members.copy(), budget)

    @property
    def n_agents(self) -> int:
        """Agents the books have rows for."""
        return len(self.cash)

    def grow(self, n: int) -> None:
        """Rows for agents up to id n − 1 (newcomers join without cash, not as traders)."""
        extra = n - self.n_agents
        if extra <= 0:
            return
        self.cash = np.concatenate([self.cash, np.zeros(extra)])
        self.members = np.concatenate([self.members, np.zeros(extra, bool)])
        self.realised = np.concatenate([self.realised, np.zeros(extra)])
        self.shares = [np.concatenate([s, np.zeros((extra, s.shape[1]))]) for s in self.shares]
        self.cost = [np.concatenate([c, np.zeros((extra, c.shape[1]))]) for c in self.cost]

    # ---------------------------------------------------------------- trading

    def check(self, r: int, agent: int, action: int, market: int, outcome: int,
              amount: float, limit: float = math.nan) -> Reason:
        """Why this trade cannot happen now (OK if it can). `limit`: the highest price a
        buy may pay, the lowest a sell may take (nan: none)."""
        if not 0 <= market < len(self.markets):
            return Reason.UNKNOWN_MARKET
        m = self.markets[market]
        if not 0 <= outcome < len(m.outcomes):
            return Reason.UNKNOWN_MARKET
        if not m.is_open(r):
            return Reason.MARKET_CLOSED
        if not (math.isfinite(amount) and amount > 0):
            return Reason.BAD_AMOUNT
        if not (0 <= agent < self.n_agents and self.members[agent]):
            return Reason.NOT_MEMBER
        if action == ActionType.BUY and amount > self.cash[agent] + TOLERANCE:
            return Reason.NO_CASH
        if action == ActionType.SELL and amount > self.shares[market][agent, outcome] + TOLERANCE:
            return Reason.NO_SHARES
        if math.isfinite(limit):
            price = m.maker.price(outcome)
            if (price >= limit) if action == ActionType.BUY else (price <= limit):
                return Reason.PRICE_LIMIT
        return Reason.OK

    def trade(self, agent: int, action: int, market: int, outcome: int, amount: float,
              source: int, limit: float = math.nan) -> Trade:
        """Apply a trade `check` passed; a limit order fills only up to its limit."""
        m = self.markets[market]
        what = f"market maker {m.cfg.maker.kind!r} of market {m.cfg.id!r}"
        with calling(what, m.maker):
            before = m.maker.price(outcome)
            held = self.shares[market][agent, outcome]
            if action == ActionType.BUY:
                cash = min(amount, float(self.cash[agent]))
                if math.isfinite(limit):
                    cash = m.maker.cash_to_price(outcome, limit, cash)
                shares = m.maker.buy(outcome, cash)
                self.cash[agent] -= cash
                self.shares[market][agent, outcome] += shares
                self.cost[market][agent, outcome] += cash
                side = "buy"
            else:
                shares = min(amount, float(held))
                if math.isfinite(limit):
                    shares = m.maker.shares_to_price(outcome, limit, shares)
                cash = m.maker.sell(outcome, shares)
                basis = self.cost[market][agent, outcome] * (shares / held if held else 1.0)
                self.cash[agent] += cash
                self.shares[market][agent, outcome] -= shares
                self.cost[market][agent, outcome] -= basis
                self.realised[agent] += cash - basis
                side = "sell"
            after = m.maker.price(outcome)
        if not from_shoal(m.maker):
            _check_maker(m, what, cash, shares)  # (the round is dropped if not)
        return Trade(market, agent, side, outcome, cash, shares, before, after, source)

    def resolve(self, market: int, outcome: int, r: int) -> dict[str, np.ndarray]:
        """Pay 1 per share of `outcome` to its holders; close the market. Returns the
        payouts (agent, shares held per outcome, payout)."""
        m = self.markets[market]
        m.resolved, m.resolved_round = m.outcomes[outcome], r
        shares, cost = self.shares[market], self.cost[market]
        holders = np.nonzero((shares > 0).any(axis=1))[0]
        payout = shares[holders, outcome].copy()
        self.cash[holders] += payout
        self.realised[holders] += payout - cost[holders].sum(axis=1)
        self.paid_out += float(payout.sum())
        m.maker.collected -= float(payout.sum())  # the maker paid the winners
        out = {"agent": holders, "payout": payout, "shares": shares[holders].copy()}
        shares[holders] = 0.0
        cost[holders] = 0.0
        return out

    def check_conservation(self) -> dict[str, float]:
        """The largest imbalance of cash and of shares (both ~0 when the books are right)."""
        cash = float(self.cash.sum() + sum(m.maker.collected for m in self.markets)
                     - self.budget * float(self.members.sum()))
        worst = 0.0
        for m, s in zip(self.markets, self.shares, strict=True):
            if m.resolved is None:
                worst = max(worst, float(np.abs(s.sum(axis=0) - m.maker.issued()).max()))
        return {"cash": cash, "shares": worst}

    # ---------------------------------------------------------------- state

    def get_state(self) -> State:
        """Cash, P&L, membership, the non-zero positions, and each maker's state."""
        arrays = {"cash": self.cash.copy(), "members": self.members.copy(),
                  "realised": self.realised.copy()}
        meta: dict = {"paid_out": self.paid_out, "markets": [],
                      "ids": [m.cfg.id for m in self.markets]}
        for i, m in enumerate(self.markets):
            held = np.nonzero((self.shares[i] != 0).any(axis=1)
                              | (self.cost[i] != 0).any(axis=1))[0]
            arrays[f"held.{i}"] = held
            arrays[f"shares.{i}"] = self.shares[i][held].copy()
            arrays[f"cost.{i}"] = self.cost[i][held].copy()
            arrays[f"last_prices.{i}"] = m.last_prices.copy()
            ms = m.maker.get_state()
            arrays.update({f"maker.{i}.{k}": v for k, v in ms.arrays.items()})
            meta["markets"].append({"maker": ms.meta, "resolved": m.resolved,
                                    "resolved_round": m.resolved_round})
        return State(arrays=arrays, meta=meta)

    def set_state(self, state: State) -> None:
        """Take a state `get_state` returned (the markets must be configured alike)."""
        a, meta = state.arrays, state.meta
        ids = [m.cfg.id for m in self.markets]
        if meta.get("ids", ids) != ids:
            raise InputError(f"platforms.market.markets: the saved run has the markets "
                             f"{meta['ids']}, this config {ids}; the markets cannot change "
                             "during a run or in a fork")
        self.cash = a["cash"].astype(np.float64).copy()
        self.members = a["members"].astype(bool).copy()
        self.realised = a["realised"].astype(np.float64).copy()
        self.paid_out = float(meta["paid_out"])
        n = len(self.cash)
        for i, m in enumerate(self.markets):
            k = len(m.outcomes)
            self.shares[i], self.cost[i] = np.zeros((n, k)), np.zeros((n, k))
            held = a[f"held.{i}"].astype(np.int64)
            self.shares[i][held] = a[f"shares.{i}"]
            self.cost[i][held] = a[f"cost.{i}"]
            m.last_prices = a[f"last_prices.{i}"].astype(np.float64).copy()
            prefix = f"maker.{i}."
            m.maker.set_state(State(arrays={k2[len(prefix):]: v for k2, v in a.items()
                                            if k2.startswith(prefix)},
                                    meta=meta["markets"][i]["maker"]))
            m.resolved = meta["markets"][i]["resolved"]
            m.resolved_round = meta["markets"][i]["resolved_round"]


def _check_maker(m: Market, what: str, cash: float, shares: float) -> None:
    """A plug-in maker's trade is what the books record: a finite, non-negative amount of
    cash and shares, and prices after it that are positive and sum to 1."""
    prices = np.asarray(m.maker.prices(), dtype=np.float64)
    problem = None
    if not (math.isfinite(cash) and math.isfinite(shares) and cash >= 0 and shares >= 0):
        problem = f"traded {shares!r} shares for {cash!r} cash (both must be finite, >= 0)"
    elif prices.shape != (len(m.outcomes),) or not np.isfinite(prices).all() or (
            prices <= 0).any() or abs(prices.sum() - 1) > 1e-6:
        problem = f"priced its outcomes at {prices.tolist()} (positive, summing to 1)"
    if problem is not None:
        raise PluginError(f"the {what} {problem}. Nothing of this round was kept")

