"""Seconds JAX spends tracing and compiling, so that a speed can leave them out.

The first call of a jitted function with new shapes traces it, lowers it and compiles it (or
loads it from the persistent cache) before it runs. A figure such as decoded sentences per second
over a cold start would count that work as decoding: on 2 CPU cores the quickstart's test set
took 56 s to decode cold and 15 s warm. JAX reports each of those stages' durations to its
monitoring listeners; ``compiling`` adds them up while its block runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import jax.monitoring

# Tracing to a jaxpr, lowering it to MLIR and compiling it (or loading it from the cache).
STAGES = "/jax/core/compile/"


@dataclasses.dataclass
class CompileTime:
    seconds: float = 0.0
    events: int = 0

    def add(self, event: str, seconds: float, **_) -> None:
        if event.startswith(STAGES):
            self.seconds += seconds
            self.events += 1


@contextlib.contextmanager
def compiling() -> Iterator[CompileTime]:
    """``with compiling() as spent:`` ``spent.seconds`` is the block's tracing and compiling."""
    spent = CompileTime()
    jax.monitoring.register_event_duration_secs_listener(spent.add)
    try:
        yield spent
    finally:
        jax.monitoring.unregister_event_duration_listener(spent.add)
