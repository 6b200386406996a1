"""Early stopping on validation BLEU: a run has converged when ``patience`` validation points in
a row bring no new best.

The state is two numbers (the best BLEU so far and the points since it), saved with every
checkpoint, so an interrupted run resumes with the same count and stops at the same point as an
uninterrupted one. Patience is counted in validation points, not steps or minutes: the question
"has validation stopped improving?" is asked once per point whatever the model's step speed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

# Why a run ended, as metrics.jsonl's "stop" record and the report say it.
CONVERGED = "converged"  # validation BLEU stopped improving (early stopping)
CAPPED = "cap"  # its budget (steps or training minutes) ran out first


@dataclasses.dataclass
class EarlyStopping:
    """Counts validation points since the best BLEU.

    Attributes:
      patience: points without a new best after which the run has converged; 0 never stops.
      min_delta: how much BLEU a point must gain over the best to count as a new best.
      best: the best validation BLEU so far (-inf before the first point).
      since_best: validation points since ``best`` was reached.
      best_step: the step of ``best`` (-1 before the first point).
    """

    patience: int
    min_delta: float = 0.0
    best: float = -math.inf
    since_best: int = 0
    best_step: int = -1

    def update(self, bleu: float, step: int = -1) -> bool:
        """Takes the validation point of ``step``; returns whether the run has now converged."""
        if bleu > self.best + self.min_delta or self.best == -math.inf:
            self.best, self.since_best, self.best_step = bleu, 0, step
        else:
            self.since_best += 1
        return self.converged

    @property
    def converged(self) -> bool:
        return self.patience > 0 and self.since_best >= self.patience

    def state(self) -> dict:
        """What a checkpoint keeps (JSON: no infinities)."""
        return {
            "best_bleu": None if self.best == -math.inf else self.best,
            "best_step": self.best_step,
            "points_since_best": self.since_best,
        }

    def restore(self, saved: dict) -> None:
        """Takes back ``state()`` from a checkpoint (keys missing in older runs: a fresh count)."""
        best = saved.get("best_bleu")
        self.best = -math.inf if best is None else float(best)
        self.since_best = int(saved.get("points_since_best", 0))
        self.best_step = int(saved.get("best_step", -1))


def stopping_point(bleus: Iterable[float], patience: int, min_delta: float = 0.0) -> int | None:
    """The index of the validation point at which a run of curve ``bleus`` stops, or None if the
    curve ends first (the run would hit its cap)."""
    stopping = EarlyStopping(patience, min_delta)
    for index, bleu in enumerate(bleus):
        if stopping.update(bleu):
            return index
    return None
