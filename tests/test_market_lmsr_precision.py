"""LMSR quotes against Hanson's cost function evaluated in 60-digit decimal arithmetic:
a trade's cash is C(q + Δ) − C(q), C(q) = b·ln Σ exp(q_i/b). Small trades at a tiny price
or at large q/b must not lose their digits to the difference of two near-equal numbers."""

from __future__ import annotations

from decimal import Decimal, getcontext

import numpy as np
import pytest

from shoal.market.makers import LMSR, LMSRConfig

getcontext().prec = 60


def _cost(q: list[float], b: float) -> Decimal:
    bd = Decimal(repr(b))
    return bd * sum((Decimal(repr(x)) / bd).exp() for x in q).ln()


def _shares_for(q: list[float], b: float, i: int, cash: float) -> float:
    """The s with C(q + s·e_i) − C(q) = cash, exactly."""
    bd = Decimal(repr(b))
    e = [(Decimal(repr(x)) / bd).exp() for x in q]
    total, rest = sum(e), sum(e) - e[i]
    return float(bd * (total * (Decimal(repr(cash)) / bd).exp() - rest).ln()
                 - Decimal(repr(q[i])))


def _maker(b: float, q: list[float]) -> LMSR:
    m = LMSR(LMSRConfig(b=b), np.full(len(q), 1.0 / len(q)))
    m.q = list(q)
    return m


@pytest.mark.parametrize("q0", [-2000.0, -3000.0, -3500.0])
@pytest.mark.parametrize("cash", [1e-9, 1e-6])
def test_small_buy_of_an_unlikely_outcome(q0: float, cash: float) -> None:
    q = [q0, 0.0]
    want = _shares_for(q, 100.0, 0, cash)
    got = _maker(100.0, q).quote_buy(0, cash)
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("shares", [1e-6, 1e-3])
def test_small_sale_at_large_q_over_b(shares: float) -> None:
    q = [1e6, 1e6 + 3.0]
    after = [q[0] - shares, q[1]]
    want = float(_cost(q, 1.0) - _cost(after, 1.0))
    got = _maker(1.0, q).quote_sell(0, shares)
    assert got == pytest.approx(want, rel=1e-9)


def test_cash_to_price_at_large_q_over_b() -> None:
    # moving p_i to L costs C(q') − C(q) = b·ln((1 − p_i)/(1 − L)), q' the shares at L
    q = [5e5, 5e5 + 2.0]
    m = _maker(1.0, q)
    limit = m.price(0) * (1 + 1e-7)
    e = [Decimal(repr(x)).exp() for x in q]
    want = float(((e[1] / sum(e)) / (1 - Decimal(repr(limit)))).ln())
    assert m.cash_to_price(0, limit, 1.0) == pytest.approx(want, rel=1e-6)
