"""Property-based tests (hypothesis) of the automated market makers in `shoal.market.makers`.

Every property runs on random markets (2–5 outcomes, initial prices each >= 0.02, random
depth) after random sequences of buys and sells by a few accounts, where a sell never
exceeds what its account holds. Depths and trade sizes keep every price representable
(no price rounds to exactly 0 or 1 in float64), so the checks can be strict.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shoal.market.makers import (
    LMSR,
    ConstantProduct,
    ConstantProductConfig,
    LMSRConfig,
    MarketMaker,
)

FACTORIES: dict[str, Callable[[np.ndarray, float], MarketMaker]] = {
    "lmsr": lambda p, depth: LMSR(LMSRConfig(b=depth), p),
    "constant_product": lambda p, depth: ConstantProduct(ConstantProductConfig(liquidity=depth),
                                                         p),
}
KINDS = pytest.mark.parametrize("kind", list(FACTORIES))
FAST = settings(max_examples=150, deadline=None)

depths = st.floats(200.0, 2000.0)
cash_amounts = st.floats(0.01, 500.0)
# (account, is_buy, outcome (taken mod n), cash if buying, fraction of holdings if selling)
Op = tuple[int, bool, int, float, float]
ops = st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 4), cash_amounts,
                         st.floats(0.01, 1.0)), max_size=8)


@st.composite
def initial_prices(draw: st.DrawFn) -> np.ndarray:
    """2–5 positive prices summing to 1, each at least 0.02."""
    n = draw(st.integers(2, 5))
    w = np.asarray(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    share = w / w.sum() if w.sum() > 0 else np.full(n, 1.0 / n)
    p = 0.02 + (1.0 - 0.02 * n) * share
    return p / p.sum()


def play(m: MarketMaker, trades: list[Op]) -> tuple[dict[int, np.ndarray], dict[int, float]]:
    """Apply `trades` to `m`; each account's shares per outcome and its net cash change."""
    shares: dict[int, np.ndarray] = {}
    cash: dict[int, float] = {}
    for account, is_buy, outcome, amount, fraction in trades:
        o = outcome % m.n
        held = shares.setdefault(account, np.zeros(m.n))
        cash.setdefault(account, 0.0)
        if is_buy:
            held[o] += m.buy(o, amount)
            cash[account] -= amount
        elif held[o] > 0:
            s = held[o] * fraction
            cash[account] += m.sell(o, s)
            held[o] -= s
    return shares, cash


def assert_valid_prices(p: np.ndarray) -> None:
    assert ((p > 0) & (p < 1)).all(), p
    assert abs(p.sum() - 1.0) <= 1e-9, p


@KINDS
@FAST
@given(prices=initial_prices(), depth=depths, trades=ops)
def test_prices_stay_a_distribution(kind: str, prices: np.ndarray, depth: float,
                                    trades: list[Op]) -> None:
    m = FACTORIES[kind](prices, depth)
    np.testing.assert_allclose(m.prices(), prices, rtol=0, atol=1e-12)
    for k in range(len(trades)):
        play(m, trades[k:k + 1])
        assert_valid_prices(m.prices())


@KINDS
@FAST
@given(prices=initial_prices(), depth=depths, trades=ops, outcome=st.integers(0, 4),
       cash=cash_amounts)
def test_no_round_trip_arbitrage(kind: str, prices: np.ndarray, depth: float, trades: list[Op],
                                 outcome: int, cash: float) -> None:
    m = FACTORIES[kind](prices, depth)
    play(m, trades)
    o, before, collected = outcome % m.n, m.prices(), m.collected
    back = m.sell(o, m.buy(o, cash))
    assert math.isclose(back, cash, rel_tol=1e-7), (back, cash)
    np.testing.assert_allclose(m.prices(), before, rtol=0, atol=1e-9)
    assert math.isclose(m.collected, collected, rel_tol=0, abs_tol=1e-6)


@settings(max_examples=250, deadline=None)
@given(prices=initial_prices(), b=depths, data=st.data(),
       buys=st.lists(st.tuples(st.integers(0, 4), cash_amounts), min_size=2, max_size=6))
def test_lmsr_path_independence(prices: np.ndarray, b: float, data: st.DataObject,
                                buys: list[tuple[int, float]]) -> None:
    """Cash paid from q0 to q1 is C(q1) − C(q0), in whatever order the shares are bought,
    and selling them back in any order returns it."""
    a = LMSR(LMSRConfig(b=b), prices)
    c0 = a.cost()
    got = [(o % a.n, a.buy(o % a.n, c)) for o, c in buys]
    paid = math.fsum(c for _, c in buys)
    assert math.isclose(a.cost() - c0, paid, rel_tol=1e-9)

    other = LMSR(LMSRConfig(b=b), prices)
    total = 0.0
    for k in data.draw(st.permutations(range(len(got))), label="buy order"):
        o, s = got[k]
        target = list(other.q)
        target[o] += s
        c = other.cost(target) - other.cost()
        assert math.isclose(other.buy(o, c), s, rel_tol=1e-7)
        total += c
    assert math.isclose(total, paid, rel_tol=1e-9)
    np.testing.assert_allclose(other.q, a.q, rtol=1e-9, atol=1e-7)

    back = math.fsum(a.sell(*got[k])
                     for k in data.draw(st.permutations(range(len(got))), label="sell order"))
    assert math.isclose(back, paid, rel_tol=1e-7)
    np.testing.assert_allclose(a.prices(), prices, rtol=0, atol=1e-9)


@settings(max_examples=250, deadline=None)
@given(n=st.integers(2, 5), b=depths,
       buys=st.lists(st.tuples(st.integers(0, 4), cash_amounts), max_size=10))
def test_lmsr_loss_bounded_by_b_ln_n(n: int, b: float, buys: list[tuple[int, float]]) -> None:
    m = LMSR(LMSRConfig(b=b), np.full(n, 1.0 / n))
    assert math.isclose(m.worst_case_loss(), b * math.log(n), rel_tol=1e-12)
    for o, c in buys:
        m.buy(o % n, c)
        for k in range(n):
            assert m.loss_if(k) <= b * math.log(n) + 1e-6
            assert m.loss_if(k) <= m.worst_case_loss() + 1e-6


@KINDS
@FAST
@given(prices=initial_prices(), depth=depths, trades=ops)
def test_loss_bounded_by_worst_case(kind: str, prices: np.ndarray, depth: float,
                                    trades: list[Op]) -> None:
    m = FACTORIES[kind](prices, depth)
    for k in range(len(trades)):
        play(m, trades[k:k + 1])
        assert max(m.loss_if(o) for o in range(m.n)) <= m.worst_case_loss() + 1e-6


@KINDS
@FAST
@given(prices=initial_prices(), depth=depths, trades=ops)
def test_conservation(kind: str, prices: np.ndarray, depth: float, trades: list[Op]) -> None:
    """Shares held by the accounts are what the maker issued; their cash is its takings."""
    m = FACTORIES[kind](prices, depth)
    shares, cash = play(m, trades)
    held = sum(shares.values(), np.zeros(m.n))
    np.testing.assert_allclose(m.issued(), held, rtol=0, atol=1e-6)
    assert math.isclose(-math.fsum(cash.values()), m.collected, rel_tol=1e-9, abs_tol=1e-6)


@KINDS
@FAST
@given(prices=initial_prices(), depth=depths, trades=ops, outcome=st.integers(0, 4),
       cash=cash_amounts, u=st.floats(0.001, 0.999))
def test_cash_to_price_fills_up_to_the_limit(kind: str, prices: np.ndarray, depth: float,
                                             trades: list[Op], outcome: int, cash: float,
                                             u: float) -> None:
    m = FACTORIES[kind](prices, depth)
    play(m, trades)
    o = outcome % m.n
    p = float(m.prices()[o])
    limit = p + u * (1.0 - p)
    assume(limit > p)
    fill = m.cash_to_price(o, limit, cash)
    assert 0.0 <= fill <= cash
    m.buy(o, fill)
    after = float(m.prices()[o])
    assert after <= limit + 1e-9
    if fill < cash:
        assert after >= limit - 1e-6, (after, limit)


@KINDS
@FAST
@given(prices=initial_prices(), depth=depths, trades=ops, outcome=st.integers(0, 4),
       cash=cash_amounts, u=st.floats(0.001, 0.999))
def test_shares_to_price_fills_down_to_the_limit(kind: str, prices: np.ndarray, depth: float,
                                                 trades: list[Op], outcome: int, cash: float,
                                                 u: float) -> None:
    m = FACTORIES[kind](prices, depth)
    play(m, trades)
    o = outcome % m.n
    held = m.buy(o, cash)
    p = float(m.prices()[o])
    limit = p * (1.0 - u)
    fill = m.shares_to_price(o, limit, held)
    assert 0.0 <= fill <= held
    m.sell(o, fill)
    after = float(m.prices()[o])
    assert after >= limit - 1e-9
    if fill < held:
        assert after <= limit + 1e-6, (after, limit)


@KINDS
@FAST
@given(prices=initial_prices(), depth=depths, trades=ops, more=ops)
def test_state_round_trip(kind: str, prices: np.ndarray, depth: float, trades: list[Op],
                          more: list[Op]) -> None:
    """A saved state, restored into a fresh maker or the traded-on original, gives back the
    same prices, takings and issued shares exactly."""
    m = FACTORIES[kind](prices, depth)
    play(m, trades)
    state = m.get_state()
    p, collected, issued = m.prices(), m.collected, m.issued()
    play(m, more)  # the saved state is a copy: later trades leave it alone
    for target in (FACTORIES[kind](prices, depth), m):
        target.set_state(state)
        assert np.array_equal(target.prices(), p)
        assert target.collected == collected
        assert np.array_equal(target.issued(), issued)
