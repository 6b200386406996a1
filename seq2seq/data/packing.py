"""Example packing: several short sentence pairs share one row, kept apart by segment ids.

Packing replaces most of the padding of bucketed batches with real tokens. Each row holds whole
examples, numbered 1, 2, ... by ``source_segments`` and ``target_segments`` (0 at padding); the
Transformer masks attention to equal segment ids and derives each token's position inside its
own example from the segments, and ``shift_right`` starts every packed target with its own BOS,
so no example sees another. Every batch has the same shape ``[rows, row_length]``.

A batch is planned from the pairs' lengths alone (``first_fit``): pairs are taken in the epoch's
shuffled order, each placed in the first row where both its sides fit, until the next pair would
bring the source or the target over ``tokens_per_batch`` real tokens, or fits no row. The row
count is fitted to the corpus once (``fit_rows``). As for bucketed batches, the plan depends on
the corpus, the budget and the seed only: every host plans the same global batches and collates
its own slice of the rows, padded with empty rows (which the loss ignores) to a multiple of the
devices, so a run packs the same batches on any mesh. The iterator's state, (epoch, pair), is
where the next batch starts in the epoch's order.
"""

from __future__ import annotations

import grain
import numpy as np

from seq2seq.data.batching import check_row_multiple, corpus_sides, padded_rows
from seq2seq.data.encoded import EncodedCorpus, token_spans
from seq2seq.vocabulary import PAD_ID

SIZING_PAIRS = 200_000  # pairs of the first epoch whose packing fixes the row count
CHUNK_PAIRS = 256  # pairs read from numpy at a time while packing (a batch reads one chunk more)


def first_fit(sides: np.ndarray, row_length: int, rows: int, tokens: int) -> list[int]:
    """The row of each pair of one packed batch, first-fit: the first pairs of ``sides``, each
    in the first row where both its sides fit, until the next pair would bring either side over
    ``tokens`` real tokens or fits none of the ``rows`` rows.

    Args:
      sides: [M, 2] real (source, target) tokens of the pairs, in order; each side at most
        ``row_length``.
      row_length: tokens per row and side.
      rows: rows of the batch, at most (``tokens``: no limit, as each row holds a token).
      tokens: real tokens per side of the batch, at most (one pair always fits).

    Returns:
      The rows of the first n pairs (n >= 1 when M >= 1): the batch holds ``sides[:n]``.
    """
    free_source: list[int] = []  # free tokens of each opened row, source side
    free_target: list[int] = []
    placed: list[int] = []
    total_source = total_target = 0
    for start in range(0, len(sides), CHUNK_PAIRS):
        for source, target in sides[start : start + CHUNK_PAIRS].tolist():
            total_source, total_target = total_source + source, total_target + target
            if placed and (total_source > tokens or total_target > tokens):
                return placed
            row = 0
            while row < len(free_source) and (
                source > free_source[row] or target > free_target[row]
            ):
                row += 1
            if row == len(free_source):  # fits no opened row: open one, if the batch has it
                if row == rows:
                    return placed
                free_source.append(row_length)
                free_target.append(row_length)
            free_source[row] -= source
            free_target[row] -= target
            placed.append(row)
    return placed


def fit_rows(ordered_sides: np.ndarray, row_length: int, tokens: int) -> int:
    """Rows of every packed batch: the most that one batch opens when the first
    ``SIZING_PAIRS`` pairs of ``ordered_sides`` (the first epoch) are packed without a limit.

    A batch of a later epoch that would open more stops at this many, a little short of the
    budget."""
    sample = ordered_sides[:SIZING_PAIRS]
    most, start = 1, 0
    while start < len(sample):
        placed = first_fit(sample[start:], row_length, tokens, tokens)
        most, start = max(most, max(placed) + 1), start + len(placed)
    return most


class PackedBatches(grain.IterDataset):
    """An endless, checkpointable stream of packed training batches.

    Args:
      corpus: the tokenized training pairs.
      indices: [N] corpus indices of the pairs to train on (each side at most ``row_length``).
      row_length: tokens per row and side.
      tokens_per_batch: real tokens per side of a global batch, at most.
      seed: seeds the order of each epoch (different every epoch).
      shard_index: this host (``jax.process_index()``): it collates its slice of each batch's
        rows.
      shard_count: hosts sharing each batch (``jax.process_count()``).
      row_multiple: a global batch's rows are padded up to a multiple of this (data-parallel
        devices x gradient-accumulation steps, and hosts).

    Batches are {"source", "target", "source_segments", "target_segments"}: [rows, row_length]
    int32 each, this host's rows.
    """

    def __init__(
        self,
        corpus: EncodedCorpus,
        indices: np.ndarray,
        *,
        row_length: int,
        tokens_per_batch: int,
        seed: int,
        shard_index: int = 0,
        shard_count: int = 1,
        row_multiple: int = 1,
    ):
        super().__init__()
        check_row_multiple(row_multiple, shard_count, 0)
        self.corpus = corpus
        self.indices = np.asarray(indices, np.int64)  # [N] corpus indices of the kept pairs
        self.sides = corpus_sides(corpus, self.indices).astype(np.int32)  # [N, 2]
        self.row_length = row_length
        self.tokens_per_batch = tokens_per_batch
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        first_epoch = self.sides[self.order(0)]
        self.rows = fit_rows(first_epoch, row_length, tokens_per_batch)  # of the plan
        self.host_rows = padded_rows(self.rows, row_multiple) // shard_count  # collated here

    def __iter__(self) -> PackedBatchIterator:
        return PackedBatchIterator(self)

    shapes = 1  # every batch has the same rows of the same length: one compile of the step

    def order(self, epoch: int) -> np.ndarray:
        """[N] the pairs of ``epoch`` in training order (indices into ``indices``)."""
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.indices))

    def batch(self, pairs: np.ndarray, rows: list[int]) -> dict[str, np.ndarray]:
        """This host's rows of a planned global batch: pair ``pairs[k]`` (an index into
        ``indices``) placed in row ``rows[k]``, after the pairs placed there before it."""
        shape = (self.host_rows, self.row_length)
        rows = np.asarray(rows, np.int64) - self.shard_index * self.host_rows
        mine = (rows >= 0) & (rows < self.host_rows)  # the others are another host's rows
        # The pairs of one row side by side, in the order they were placed there.
        order = np.argsort(rows[mine], kind="stable")
        rows, pairs = rows[mine][order], self.indices[np.asarray(pairs)[mine][order]]
        opens = np.searchsorted(rows, rows)  # [K] the first pair of each pair's row
        segments = np.arange(len(rows)) - opens + 1  # [K] 1, 2, ... along a row
        batch = {}
        for side in ("source", "target"):
            ids, lengths = self.corpus.gather(side, pairs)
            owners, _ = token_spans(lengths)
            row_starts = (np.cumsum(lengths) - lengths)[opens]  # [K] where its row begins in ids
            where = rows[owners], np.arange(len(ids)) - row_starts[owners]
            batch[side] = np.full(shape, PAD_ID, np.int32)
            batch[side][where] = ids
            batch[f"{side}_segments"] = np.zeros(shape, np.int32)
            batch[f"{side}_segments"][where] = segments[owners]
        return batch


class PackedBatchIterator(grain.DatasetIterator):
    """Iterator whose state, {"epoch", "pair"}, restores the exact stream."""

    def __init__(self, dataset: PackedBatches):
        super().__init__()
        self._dataset = dataset
        self._start(0, 0)

    def _start(self, epoch: int, pair: int) -> None:
        self._epoch, self._pair = epoch, pair
        self._order = self._dataset.order(epoch)
        self._ordered_sides = self._dataset.sides[self._order]  # [N, 2] in training order

    def __next__(self) -> dict[str, np.ndarray]:
        if self._pair >= len(self._order):
            self._start(self._epoch + 1, 0)
        dataset = self._dataset
        rows = first_fit(
            self._ordered_sides[self._pair :],
            dataset.row_length,
            dataset.rows,
            dataset.tokens_per_batch,
        )
        pairs = self._order[self._pair : self._pair + len(rows)]
        self._pair += len(rows)
        return dataset.batch(pairs, rows)

    def get_state(self) -> dict[str, int]:
        return {"epoch": self._epoch, "pair": self._pair}

    def set_state(self, state: dict[str, int]) -> None:
        if set(state) != {"epoch", "pair"}:
            raise ValueError(
                f"data iterator state {state} is not a packed-batch position; the checkpoint "
                "was written with other data settings (data.pack?) or by an older packer; use "
                "the original config and version"
            )
        self._start(int(state["epoch"]), int(state["pair"]))
