"""Progress bars on long work: training steps, encoding a corpus, translating a file.

tqdm's bars on standard error, drawn only where a person watches (standard error is a terminal)
and by one process of a multi-process job, so that logs and pipes get none. While a bar is
drawn, log lines print above it instead of across it. Work that reports progress takes a
``Progress``: a function told how many more items are done.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import jax
from tqdm import tqdm

Progress = Callable[[int], object]  # told how many more items are done (tqdm's ``update``)


def shown() -> bool:
    """Whether bars are drawn here: a terminal watches standard error, and this is the first
    process (the others' bars would write over its line)."""
    return sys.stderr.isatty() and jax.process_index() == 0


@contextlib.contextmanager
def bar(
    total: int, unit: str, description: str | None = None, *, initial: int = 0, draw: bool = True
) -> Iterator[tqdm]:
    """A bar of ``total`` ``unit``s (items done, rate and time to go) while the block runs, or a
    silent one where bars are not shown (``shown``) or ``draw`` is false (work too short to
    watch). The console's log lines go above it."""
    hidden = not (draw and shown())
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
