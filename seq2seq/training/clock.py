"""The training clock: minutes of training across every session of a run, with what is not
training left out.

A time budget, minute-based validation and checkpoint intervals, the report's minutes axis and
a comparison's slices all read this clock. It counts training only: validation decoding,
compiling a new batch shape and writing a checkpoint are timed apart (``off_the_clock``), so a
model that validates more often, sees more batch shapes or is resumed more often loses no
training time to it. What was spent is saved with each checkpoint (``spent``) and taken back on
resume, so a budget continues where an interrupted run stopped.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import jax
import numpy as np
from jax.experimental import multihost_utils

OFF_THE_CLOCK = ("validation", "compile", "checkpoint")


class TrainingClock:
    """Seconds of training so far, and the seconds spent off the clock by kind.

    ``shared``: one clock for every process of a multi-process run (process 0's, broadcast),
    so that budgets, pauses and minute intervals end at the same step everywhere; a run whose
    schedule does not depend on time has no need of it and skips the collective.
    ``every_step``: the shared clock agrees at every tick, so a budget or a pause ends within
    one step of its time; False: only at the ticks told to (``tick(agree=True)``, the log
    steps), which minute intervals need, without a collective (and a wait) at every step.
    """

    def __init__(self, shared: bool = False, every_step: bool = True):
        self.shared = shared and jax.process_count() > 1
        self.every_step = every_step
        self.spent = {"elapsed_seconds": 0.0, **{f"{k}_seconds": 0.0 for k in OFF_THE_CLOCK}}
        self._start = self._interval_start = time.monotonic()
        self._session_base = 0.0  # elapsed seconds before this session
        self._excluded = 0.0  # this session's seconds off the clock

    @property
    def elapsed(self) -> float:
        """Training seconds across every session (as of the last ``tick``)."""
        return self.spent["elapsed_seconds"]

    def restore(self, saved: dict) -> None:
        """Takes back what a checkpoint saved (a fresh run passes {})."""
        self.spent.update({key: saved[key] for key in self.spent if key in saved})

    def start(self) -> None:
        """Starts this session's count from what earlier sessions spent."""
        self._start = self._interval_start = time.monotonic()
        self._session_base = self.elapsed
        self._excluded = 0.0

    def tick(self, agree: bool = True) -> tuple[float, float]:
        """Reads the clock after a step: (elapsed before it, elapsed now), in seconds. A shared
        clock that agrees only when told keeps, between agreements, the last reading every
        process shares: (before, before)."""
        before = self.elapsed
        if self.shared and not (self.every_step or agree):
            return before, before
        session = time.monotonic() - self._start - self._excluded
        if self.shared:
            session = float(multihost_utils.broadcast_one_to_all(np.float32(session)))
        self.spent["elapsed_seconds"] = self._session_base + session
        return before, self.elapsed

    def session_seconds(self) -> float:
        """This session's training seconds so far."""
        return time.monotonic() - self._start - self._excluded

    def exclude(self, kind: str, seconds: float) -> None:
        """Leaves ``seconds`` spent on ``kind`` (one of OFF_THE_CLOCK) out of the training time
        and out of the current log interval, and records them."""
        self._excluded += seconds
        self._interval_start += seconds
        self.spent[f"{kind}_seconds"] += seconds

    @contextlib.contextmanager
    def off_the_clock(self, kind: str) -> Iterator[None]:
        """Times the block as ``kind`` rather than training."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.exclude(kind, time.monotonic() - start)

    def interval(self) -> float:
        """Training seconds since the last call (or ``start``): one log line's."""
        now = time.monotonic()
        seconds, self._interval_start = now - self._interval_start, now
        return seconds
