"""Distributions for initial conditions (stances, confidence, activity), as config models.

Each model draws with a numpy Generator and clips to the range the caller asks for. A bare
number in YAML means a constant.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def sample(self, rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
        """Draw `n` values, clipped to [low, high]."""
        return np.clip(self._draw(rng, n, low, high), low, high)

    def _draw(self, rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
        raise NotImplementedError


class Constant(_Dist):
    """Every agent gets `value`."""

    dist: Literal["constant"] = "constant"
    value: float

    def _draw(self, rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
        return np.full(n, self.value, dtype=np.float64)


class Uniform(_Dist):
    """Uniform on [low, high] (defaults: the full range of the quantity)."""

    dist: Literal["uniform"]
    low: float | None = None
    high: float | None = None

    @model_validator(mode="after")
    def _order(self) -> Self:
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"low must be <= high, got low={self.low}, high={self.high}")
        return self

    def _draw(self, rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
        lo = low if self.low is None else self.low
        hi = high if self.high is None else self.high
        return rng.uniform(lo, hi, n)


class Normal(_Dist):
    """Normal(mean, std), clipped to the quantity's range."""

    dist: Literal["normal"]
    mean: float = 0.0
    std: float = Field(gt=0)

    def _draw(self, rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
        return rng.normal(self.mean, self.std, n)


class Beta(_Dist):
    """Beta(a, b) rescaled from [0, 1] to the quantity's range."""

    dist: Literal["beta"]
    a: float = Field(gt=0)
    b: float = Field(gt=0)

    def _draw(self, rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
        return low + (high - low) * rng.beta(self.a, self.b, n)


class Bimodal(_Dist):
    """A mixture of two normals at `modes` with a shared `std`; `weights` sum to 1."""

    dist: Literal["bimodal"]
    modes: tuple[float, float] = (-0.6, 0.6)
    std: float = Field(default=0.15, gt=0)
    weights: tuple[float, float] = (0.5, 0.5)

    @model_validator(mode="after")
    def _weights(self) -> Self:
        if min(self.weights) < 0 or abs(sum(self.weights) - 1.0) > 1e-9:
            raise ValueError(f"weights must be >= 0 and sum to 1, got {list(self.weights)}")
        return self

    def _draw(self, rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
        pick = rng.random(n) < self.weights[0]
        centres = np.where(pick, self.modes[0], self.modes[1])
        return centres + rng.normal(0.0, self.std, n)


Distribution = Annotated[
    Constant | Uniform | Normal | Beta | Bimodal, Field(discriminator="dist")
]


def as_distribution(value: object) -> object:
    """Let YAML say `0.3` for a constant; pass anything else through to validation."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"dist": "constant", "value": float(value)}
    return value
