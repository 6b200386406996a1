"""Evaluation work split over the processes of a multi-host job, and the results gathered.

With one process every function here is the identity (or close to it). With several, each
process decodes every ``P``-th sentence (``share``) on its own devices, with a full copy of the
parameters (``local_copy``), and the translations and loss sums are gathered so every process
returns what one process would have: ``P`` times less decoding per process, and scores equal to
one process's.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from seq2seq.progress import Progress


def share(count: int) -> list[int]:
    """Indices of the ``count`` items this process handles: every ``P``-th, from its index
    (interleaved, so sorted inputs give each process a like mix of lengths)."""
    return list(range(jax.process_index(), count, jax.process_count()))


def whole_progress(progress: Progress, mine: int, count: int) -> Progress:
    """``progress`` of all ``count`` items, told of this process's ``mine`` of them (its
    ``share``): each stands for ``count / mine`` items, the shares being like mixes, and the
    last of them completes the whole."""
    if mine == count:
        return progress
    done = told = 0

    def update(items: int) -> None:
        nonlocal done, told
        done += items
        whole = count if done >= mine else done * count // mine
        progress(whole - told)
        told = whole

    return update


def local_copy(tree):
    """``tree`` with every array that spans several processes gathered whole onto this one (as
    a host array); arrays this process holds whole already are left as they are.

    Parameters split over devices of several processes cannot feed a computation of one
    process's devices; gathered, they can.
    """
    leaves, treedef = jax.tree.flatten(tree)
    spread = [
        i for i, x in enumerate(leaves) if isinstance(x, jax.Array) and not x.is_fully_addressable
    ]
    if spread:  # one collective for all of them
        gathered = multihost_utils.process_allgather([leaves[i] for i in spread], tiled=True)
        for i, whole in zip(spread, gathered, strict=True):
            leaves[i] = whole
    return jax.tree.unflatten(treedef, leaves)


def sum_over_processes(values: np.ndarray) -> np.ndarray:
    """The element-wise sum of ``values`` (same shape on every process) over all processes."""
    if jax.process_count() == 1:
        return np.asarray(values)
    gathered = multihost_utils.process_allgather(np.asarray(values))  # [P, ...]
    return np.asarray(gathered).sum(axis=0)


def slowest(seconds: float) -> float:
    """The most of ``seconds`` over all processes: a time every process decides on alike (the
    size of the next piece of a translation, which all of them search together)."""
    if jax.process_count() == 1:
        return seconds
    return float(np.max(multihost_utils.process_allgather(np.asarray(seconds, np.float64))))


def gather_texts(mine: Sequence[str], count: int) -> list[str]:
    """All ``count`` texts in order, from each process's ``mine`` (its ``share(count)``).

    Texts travel as UTF-8 bytes in one padded [P, rows, width] array: every process must give
    arrays of one shape, so the rows and width are agreed first (the largest of any process).
    """
    processes = jax.process_count()
    if processes == 1:
        return list(mine)
    rows = -(-count // processes)  # the most items any process has
    encoded = [text.encode("utf-8") for text in mine]
    lengths = np.full((rows,), -1, np.int32)  # -1: no item in this row
    lengths[: len(encoded)] = [len(data) for data in encoded]
    all_lengths = np.asarray(multihost_utils.process_allgather(lengths))  # [P, rows]
    width = max(1, int(all_lengths.max()))
    buffer = np.zeros((rows, width), np.uint8)
    for row, data in enumerate(encoded):
        buffer[row, : len(data)] = np.frombuffer(data, np.uint8)
    all_buffers = np.asarray(multihost_utils.process_allgather(buffer))  # [P, rows, width]
    texts = [""] * count
    for process in range(processes):
        for row, index in enumerate(range(process, count, processes)):
            length = all_lengths[process, row]
            texts[index] = all_buffers[process, row, :length].tobytes().decode("utf-8")
    return texts
