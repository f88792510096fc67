"""The prediction market: a non-social platform (docs/markets.md)."""
