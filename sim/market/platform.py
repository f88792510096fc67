"""The prediction market as a platform: its spec and config section. Its round behaviour
is `shoal.market.engine.MarketEngine`, which the spec names (nothing in the driver knows
about markets)."""

from __future__ import annotations

import shoal.market.tables  # noqa: F401  (the market declares its tables with its platform)
from shoal.core.vocabulary import ActionType as A
from shoal.market.config import MarketPlatformConfig
from shoal.platforms.spec import PlatformSpec, register

MARKET = register(PlatformSpec(
    name="market", code=2, label="the prediction market",
    actions=(A.BUY, A.SELL, A.DO_NOTHING), engagements=(), feed_kinds=(),
    action_help=("buy (spend cash on shares of an outcome you think is underpriced)",
                 "sell (sell shares you hold)", "do_nothing"),
    social=False, engine="shoal.market.engine:MarketEngine",
), MarketPlatformConfig, example={"members": {"fraction": 0.5}, "markets": [{
    "id": "levy_passes", "question": "Will the levy pass?", "topic": "carbon_tax",
    "outcomes": ["yes", "no"], "resolution": {"rule": {
        "topic": "carbon_tax", "metric": "mean_position", "op": ">", "value": 0}}}]})
