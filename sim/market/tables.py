"""The prediction market's tables, declared by the market itself (sim/store/tables.py):
every row carries the round whose transaction wrote it, so a resume cuts them and a fork
inherits them like the engine's own tables (docs/markets.md)."""

from __future__ import annotations

from shoal.store.tables import TABLES, TableSpec


def _declare(name: str, columns: str, doc: str) -> TableSpec:
    return TABLES.declare(TableSpec(name, " ".join(columns.split()), "market", doc))


_declare("markets", """
    round INTEGER, market VARCHAR, question VARCHAR, topic VARCHAR, outcomes VARCHAR[],
    maker JSON, opens INTEGER, closes INTEGER, resolution JSON, worst_case_loss DOUBLE""",
    "The markets of the run, as configured (round 0).")
_declare("prices", """
    round INTEGER, market VARCHAR, outcome VARCHAR, price DOUBLE, volume DOUBLE,
    n_trades INTEGER""", "Every market outcome's price per round.")
_declare("trades", """
    round INTEGER, market VARCHAR, agent INTEGER, side VARCHAR, outcome VARCHAR,
    cash DOUBLE, shares DOUBLE, price_before DOUBLE, price_after DOUBLE, source TINYINT""",
    "Every applied trade.")
_declare("positions", """
    round INTEGER, market VARCHAR, agent INTEGER, outcome VARCHAR, shares DOUBLE,
    cost DOUBLE, cash DOUBLE, realised DOUBLE""",
    "Holdings after the round's trades of every trader that traded in it.")
_declare("market_bridge", """
    round INTEGER, direction VARCHAR, market VARCHAR, kind VARCHAR, value DOUBLE,
    post_ids BIGINT[], detail VARCHAR""",
    "What passed between the markets and the social platforms.")
_declare("market_books", """
    round INTEGER, traders INTEGER, cash DOUBLE, maker_cash DOUBLE, paid_out DOUBLE,
    cash_imbalance DOUBLE, share_imbalance DOUBLE""",
    "The books' totals per round, with their conservation checks.")
_declare("forecasts", """
    round INTEGER, market VARCHAR, agent INTEGER, outcome VARCHAR, probability DOUBLE""",
    "At a market's close, each trader's probability per outcome.")
_declare("payouts", """
    round INTEGER, market VARCHAR, agent INTEGER, outcome VARCHAR, payout DOUBLE,
    rule_value DOUBLE""", "What each resolved market paid.")
