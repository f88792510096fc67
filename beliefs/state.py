"""Per-agent, per-topic belief state: a position in [-1, 1] and a confidence in [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.core.state import State
from shoal.core.workers import SERIAL, Workers


@dataclass
class BeliefState:
    """Positions and confidences, float64 arrays of shape [N, T] (agent, topic)."""

    position: np.ndarray
    confidence: np.ndarray

    @property
    def n_agents(self) -> int:
        """Number of agents."""
        return self.position.shape[0]

    def clip(self) -> None:
        """Keep values in their ranges after an update."""
        np.clip(self.position, -1.0, 1.0, out=self.position)
        np.clip(self.confidence, 0.0, 1.0, out=self.confidence)

    def grow(self, position: np.ndarray, confidence: np.ndarray) -> None:
        """Append rows for new agents."""
        self.position = np.concatenate([self.position, position])
        self.confidence = np.concatenate([self.confidence, confidence])

    def get_state(self, workers: Workers = SERIAL) -> State:
        """Positions and confidences (copies: a range of agents per worker)."""
        return State(arrays={"position": workers.copy(self.position),
                             "confidence": workers.copy(self.confidence)})

    def set_state(self, state: State) -> None:
        """Take positions and confidences."""
        self.position = np.array(state.arrays["position"], dtype=np.float64)
        self.confidence = np.array(state.arrays["confidence"], dtype=np.float64)
