"""Example packing: several short sentence pairs share one row, kept apart by segment ids.

Packing replaces most of the padding of bucketed batches with real tokens. Each row holds whole
examples, numbered 1, 2, ... by ``source_segments`` and ``target_segments`` (0 at padding); the
Transformer masks attention to equal segment ids and derives each token's position inside its
own example from the segments, and ``shift_right`` starts every packed target with its own BOS,
so no example sees another. Every batch has the same shape ``[rows, row_length]``.

Built from grain's first-fit packing, whose iterator state (position in the shuffled stream and
in the current packing round) restores the exact stream of batches.
"""

from __future__ import annotations

import grain
import numpy as np

from seq2seq.data.encoded import EncodedCorpus


class _Lookup:
    """Corpus index -> {"source": [S] int32, "target": [T] int32} (a class, so it pickles)."""

    def __init__(self, corpus: EncodedCorpus):
        self.corpus = corpus

    def __call__(self, index: int) -> dict[str, np.ndarray]:
        return {"source": self.corpus.source(index), "target": self.corpus.target(index)}


def _rename(packed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """grain's packed features -> the batch keys the training step reads.

    Positions are dropped: the model derives them from the segments.
    """
    return {
        "source": packed["source"],
        "target": packed["target"],
        "source_segments": packed["source_segment_ids"],
        "target_segments": packed["target_segment_ids"],
    }


def packed_batches(
    corpus: EncodedCorpus,
    indices: np.ndarray,
    *,
    row_length: int,
    rows: int,
    seed: int,
    shard_index: int = 0,
    shard_count: int = 1,
) -> grain.IterDataset:
    """An endless, checkpointable stream of packed batches.

    Args:
      corpus: the tokenized training pairs.
      indices: [N] corpus indices of the pairs to train on (each side at most ``row_length``).
      row_length: tokens per row and side.
      rows: rows per batch (on this host).
      seed: seeds the order of each epoch (different every epoch) and of the packed rows.
      shard_index: this host (``jax.process_index()``); it reads every ``shard_count``-th pair.
      shard_count: hosts reading the corpus (``jax.process_count()``).

    Returns:
      An IterDataset of {"source", "target", "source_segments", "target_segments"}: [rows,
      row_length] int32 each.
    """
    examples = (
        grain.MapDataset.source(np.asarray(indices, np.int64))[shard_index::shard_count]
        .shuffle(seed)
        .repeat()
        .map(_Lookup(corpus))
    )
    # Reading in this thread: grain's prefetching threads cost more than the lookups they run.
    reading = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    packed = grain.experimental.FirstFitPackIterDataset(
        examples.to_iter_dataset(reading),
        length_struct={"source": row_length, "target": row_length},
        num_packing_bins=rows,  # one packing round fills one batch
        seed=seed,
        shuffle_bins=True,
    )
    return packed.batch(rows, drop_remainder=True).map(_rename)
