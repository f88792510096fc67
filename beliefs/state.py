"""Per-agent, per-topic belief state: a position in [-1, 1] and a confidence in [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

    def state_dict(self) -> dict[str, np.ndarray]:
        """Checkpoint form."""
        return {"position": self.position, "confidence": self.confidence}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> BeliefState:
        """Rebuild from `state_dict()`."""
        return cls(np.array(state["position"], dtype=np.float64),
                   np.array(state["confidence"], dtype=np.float64))
