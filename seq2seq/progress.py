"""Progress bars on long work: training steps, encoding a corpus, translating a file.

tqdm's bars on standard error, drawn only where a person watches (standard error is a terminal)
and by one process of a multi-process job, so that logs and pipes get none: there, work that
asks for them (``lines``) logs a line a minute instead. While a bar is drawn, log lines print
above it instead of across it. Work that reports progress takes a ``Progress``: a function told
how many more items are done.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator

from tqdm import tqdm

Progress = Callable[[int], object]  # told how many more items are done (tqdm's ``update``)

logger = logging.getLogger(__name__)

LINE_EVERY_SECONDS = 60.0  # where no bar is drawn, how often ``bar(lines=True)`` logs a line


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: 45 s, 12 min, 3.4 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Lines:
    """A hidden bar's stand-in that logs where the work stands every ``LINE_EVERY_SECONDS``
    (none for work shorter than that): long work in a log file or a pipe, where no bar is
    drawn, said nothing for minutes (``eval.py`` decoding a test set: 138 s)."""

    def __init__(self, total: int, unit: str, description: str | None, initial: int):
        self.total, self.unit, self.description = total, unit, description or "progress"
        self.n = self.initial = initial
        self.start = self.last = time.monotonic()

    def update(self, count: int = 1) -> None:
        self.n += count
        now = time.monotonic()
        if now - self.last < LINE_EVERY_SECONDS or self.n >= self.total:
            return
        self.last = now
        pace = (self.n - self.initial) / (now - self.start)
        to_go = f", about {duration((self.total - self.n) / pace)} to go" if pace > 0 else ""
        logger.info(
            "%s: %s of %s %ss (%.0f%%)%s",
            self.description,
            f"{self.n:,}",
            f"{self.total:,}",
            self.unit,
            100 * self.n / self.total,
            to_go,
        )


def shown() -> bool:
    """Whether bars are drawn here: a terminal watches standard error, and this is the first
    process (the others' bars would write over its line)."""
    import jax  # here: seq2seq.training.logs takes ``duration`` from this module before JAX loads

    return sys.stderr.isatty() and jax.process_index() == 0


@contextlib.contextmanager
def bar(
    total: int,
    unit: str,
    description: str | None = None,
    *,
    initial: int = 0,
    draw: bool = True,
    lines: bool = False,
) -> Iterator[tqdm | _Lines]:
    """A bar of ``total`` ``unit``s (items done, rate and time to go) while the block runs, or a
    silent one where bars are not shown (``shown``) or ``draw`` is false (work too short to
    watch). The console's log lines go above it. ``lines``: where no bar is shown, the first
    process logs a line a minute instead (for work that logs nothing else while it runs)."""
    import jax

    hidden = not (draw and shown())
    if hidden and lines and draw and jax.process_index() == 0:
        yield _Lines(total, unit, description, initial)
        return
    with tqdm(total=total, initial=initial, unit=unit, desc=description, disable=hidden) as drawn:
        if drawn.disable:
            yield drawn
            return
        # Here, not at the top: tqdm.contrib imports tqdm.auto, which in a notebook without
        # ipywidgets warns in red on the first cell of every notebook that imports this module.
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm():
            yield drawn


def ignored(count: int) -> None:
    """The ``Progress`` of work nobody watches."""
    del count
