"""Length-bucketed, token-budgeted batches with a checkpointable position.

Vaswani et al. (Section 5.1) batch "sentence pairs together by approximate sequence length", about
25k source and 25k target tokens per batch. Here every batch is padded to a bucket length ``L``
(a multiple of ``bucket_width``) and holds ``tokens_per_batch // L`` sentences, so the whole run
uses a handful of array shapes and ``jax.jit`` compiles the step once per bucket. Bahdanau et al.
(Appendix B) instead use minibatches of exactly 80 sentences: with ``sentences_per_batch`` every
batch holds exactly that many, still grouped by length and padded to a bucket length.

One planner, ``plan_batches``, groups examples into batches for training (shuffled), decoding
(sorted by length) and the validation loss (in corpus order). The order of one training epoch
is a pure function of (seed, epoch), so the iterator's state is just (epoch, position): saving
and restoring it resumes the identical stream of batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import grain
import numpy as np

from seq2seq.data.encoded import EncodedCorpus
from seq2seq.vocabulary import PAD_ID

Example = tuple[np.ndarray, np.ndarray]  # (source ids, target ids), EOS included


@dataclasses.dataclass(frozen=True)
class BucketSpec:
    """How examples are grouped: padded lengths and how many sentences fit each."""

    max_length: int  # longest example, in tokens
    bucket_width: int  # padded lengths are multiples of this
    tokens_per_batch: int  # padded tokens per side of a (global) batch
    batch_multiple: int = 1  # sentences per batch are a multiple of this (devices, hosts)
    sentences_per_batch: int = 0  # exactly this many sentences per batch; 0: by tokens_per_batch

    def __post_init__(self):
        if self.sentences_per_batch % self.batch_multiple:
            raise ValueError(
                f"data.sentences_per_batch={self.sentences_per_batch} is not a multiple of "
                f"{self.batch_multiple} (data-parallel devices x train.grad_accum_steps x hosts); "
                "change one of them"
            )

    def padded_length(self, length: int) -> int:
        width = self.bucket_width
        return min(-(-length // width) * width, self.padded_max_length)

    def padded_lengths(self, lengths: np.ndarray) -> np.ndarray:
        """[N] -> [N] ``padded_length`` of each length."""
        width = self.bucket_width
        return np.minimum(-(-lengths // width) * width, self.padded_max_length)

    @property
    def padded_max_length(self) -> int:
        return -(-self.max_length // self.bucket_width) * self.bucket_width

    def batch_size(self, padded_length: int) -> int:
        if self.sentences_per_batch:
            return self.sentences_per_batch
        sentences = self.tokens_per_batch // padded_length
        return max(self.batch_multiple, sentences // self.batch_multiple * self.batch_multiple)


@dataclasses.dataclass(frozen=True)
class PlannedBatch:
    """One batch of a plan: its padded length and its members (indices into the lengths)."""

    padded_length: int  # L: every member fits, [B, L] once collated
    members: np.ndarray  # [B'] indices into the planned lengths, B' <= the bucket's batch size


def plan_batches(
    lengths: np.ndarray,
    spec: BucketSpec,
    rng: np.random.Generator | None = None,
    sort_by_length: bool = False,
) -> list[PlannedBatch]:
    """Groups examples by padded length into batches: the one planner of every batch stream.

    Examples are taken in one of three orders: shuffled by ``rng`` (training), sorted by length
    (``sort_by_length``: decoding, so a batch pads little) or as given (validation). By token
    budget (``spec.sentences_per_batch == 0``), they are grouped by bucket, in that order, and
    each group is cut into batches of the bucket's ``spec.batch_size``. With
    ``spec.sentences_per_batch`` (n), they are stably sorted by padded length and cut into
    batches of n: a batch that straddles two buckets pads to the longer.

    With ``rng`` (training) the ``N mod n`` examples that would make a short batch sit this
    epoch out (random ones, since the order is shuffled) and the batches are shuffled too;
    without it every example is in exactly one batch and the batches come in increasing padded
    length. A pure function of its arguments (and of ``rng``'s state).

    Args:
      lengths: [N] each example's length in tokens (the longer side, EOS included); lengths over
        ``spec.max_length`` are planned at the longest padded length (the caller truncates).
      spec: padded lengths and batch sizes.
      rng: shuffles examples and batches; None keeps the order given or sorted.
      sort_by_length: without ``rng``, take examples shortest first (stable for ties).

    Returns:
      The batches, in the order they are to be used.
    """
    lengths = np.asarray(lengths)
    if rng is not None:
        order = rng.permutation(len(lengths))
    elif sort_by_length:
        order = np.argsort(np.minimum(lengths, spec.padded_max_length), kind="stable")
    else:
        order = np.arange(len(lengths))
    padded = spec.padded_lengths(lengths)
    if spec.sentences_per_batch:
        size = spec.sentences_per_batch
        if rng is not None:
            order = order[len(order) % size :]  # random examples, since the order is shuffled
        order = order[np.argsort(padded[order], kind="stable")]
        groups = [order[start : start + size] for start in range(0, len(order), size)]
    else:
        groups = []
        for bucket in np.unique(padded[order]):
            members = order[padded[order] == bucket]
            size = spec.batch_size(int(bucket))
            groups.extend(members[start : start + size] for start in range(0, len(members), size))
    batches = [PlannedBatch(int(padded[members].max()), members) for members in groups]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def plan_epoch(lengths: np.ndarray, spec: BucketSpec, seed: int, epoch: int) -> list[PlannedBatch]:
    """The training batches of one epoch, in training order: a pure function of its arguments."""
    return plan_batches(lengths, spec, np.random.default_rng([seed, epoch]))


def collate(examples: Sequence[Example], batch_size: int, length: int) -> dict[str, np.ndarray]:
    """Pads examples into {"source": [B, L], "target": [B, L]} int32 arrays (0 = padding).

    Rows beyond ``len(examples)`` stay all-padding, so every batch of a bucket has one shape;
    padding carries no loss weight.
    """
    source = np.full((batch_size, length), PAD_ID, np.int32)
    target = np.full((batch_size, length), PAD_ID, np.int32)
    for row, (source_ids, target_ids) in enumerate(examples):
        source[row, : len(source_ids)] = source_ids[:length]
        target[row, : len(target_ids)] = target_ids[:length]
    return {"source": source, "target": target}


class BucketedBatches(grain.IterDataset):
    """An endless stream of bucketed training batches over a tokenized corpus.

    With several hosts (``shard_count > 1``) every host plans the same global batches and
    collates only its own slice of rows: all hosts agree on each step's padded length (one
    compiled shape per step across the job) and every example is read by exactly one host.
    """

    def __init__(
        self,
        corpus: EncodedCorpus,
        indices: np.ndarray,
        spec: BucketSpec,
        seed: int,
        shard_index: int = 0,
        shard_count: int = 1,
    ):
        super().__init__()
        if spec.batch_multiple % shard_count:
            raise ValueError(
                f"batch_multiple={spec.batch_multiple} is not a multiple of {shard_count} hosts"
            )
        if spec.sentences_per_batch > len(indices):
            raise ValueError(
                f"only {len(indices)} training pairs for batches of data.sentences_per_batch="
                f"{spec.sentences_per_batch}; lower it or use more data"
            )
        self.corpus = corpus
        self.indices = np.asarray(indices, np.int64)  # [N] corpus indices of the kept pairs
        self.lengths = np.maximum(corpus.source_lengths, corpus.target_lengths)[self.indices]
        self.spec = spec
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count

    def __iter__(self) -> BucketedBatchIterator:
        return BucketedBatchIterator(self)

    def batch(self, planned: PlannedBatch) -> dict[str, np.ndarray]:
        """This host's rows of a planned global batch (members index ``indices``)."""
        length = planned.padded_length
        rows = self.spec.batch_size(length) // self.shard_count
        members = planned.members[self.shard_index * rows : (self.shard_index + 1) * rows]
        examples = [(self.corpus.source(i), self.corpus.target(i)) for i in self.indices[members]]
        return collate(examples, rows, length)


class BucketedBatchIterator(grain.DatasetIterator):
    """Iterator whose state, {"epoch", "position"}, restores the exact stream."""

    def __init__(self, dataset: BucketedBatches):
        super().__init__()
        self._dataset = dataset
        self._epoch = 0
        self._position = 0
        self._plan = self._plan_for(0)

    def _plan_for(self, epoch: int) -> list[PlannedBatch]:
        dataset = self._dataset
        return plan_epoch(dataset.lengths, dataset.spec, dataset.seed, epoch)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._position >= len(self._plan):
            self._epoch, self._position = self._epoch + 1, 0
            self._plan = self._plan_for(self._epoch)
        planned = self._plan[self._position]
        self._position += 1
        return self._dataset.batch(planned)

    def get_state(self) -> dict[str, int]:
        return {"epoch": self._epoch, "position": self._position}

    def set_state(self, state: dict[str, int]) -> None:
        if set(state) != {"epoch", "position"}:
            raise ValueError(
                f"data iterator state {state} is not a bucketed-batch position; the checkpoint "
                "was written with other data settings (data.pack?); use the original config"
            )
        if state["epoch"] != self._epoch:
            self._plan = self._plan_for(state["epoch"])
        self._epoch, self._position = int(state["epoch"]), int(state["position"])


def inference_batches(
    sources: Sequence[np.ndarray], batch_size: int, bucket_width: int, max_length: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches for decoding: (indices into ``sources``, [batch_size, L] padded source ids).

    Sentences are sorted by length so each batch pads little; inputs longer than ``max_length``
    are truncated (still translated, never dropped). The caller puts outputs back in order.
    """
    spec = BucketSpec(max_length, bucket_width, tokens_per_batch=0, sentences_per_batch=batch_size)
    lengths = np.array([len(ids) for ids in sources], np.int64)
    batches = []
    for planned in plan_batches(lengths, spec, sort_by_length=True):
        source = np.full((batch_size, planned.padded_length), PAD_ID, np.int32)
        for row, i in enumerate(planned.members):
            ids = sources[i][: planned.padded_length]
            source[row, : len(ids)] = ids
        batches.append((planned.members, source))
    return batches
