"""Length-bucketed, token-budgeted batches with a checkpointable position.

Vaswani et al. (Section 5.1) batch "sentence pairs together by approximate sequence length", each
batch holding "approximately 25000 source tokens and 25000 target tokens". Here every batch is
padded to a bucket length ``L`` (a multiple of ``bucket_width``) and holds pairs of that bucket
until the next would bring either side over ``tokens_per_batch`` real (non-padding) tokens. Each
bucket's batches have one row count, fitted to the corpus (``fit_bucket_rows``), so the whole
run uses a handful of array shapes and ``jax.jit`` compiles the step once per bucket. Bahdanau
et al. (Appendix B) instead use minibatches of exactly 80 sentences: with
``sentences_per_batch`` every batch holds exactly that many, still grouped by length and padded
to a bucket length.

The plan (which pairs form each global batch, in which order) depends on the corpus, the spec
and the seed only, never on the devices or hosts: a batch's rows are padded with empty rows
(which the loss ignores) up to a multiple of the devices that share it (``padded_rows``), and
every host collates its own slice of the rows. So a run gives the same batches, and the same
losses, on any mesh, and resumes on another.

One planner, ``plan_batches``, groups examples into batches for training (shuffled), decoding
(sorted by length) and the validation loss (in corpus order). The order of one training epoch
is a pure function of (seed, epoch), so the iterator's state is just (epoch, position): saving
and restoring it resumes the identical stream of batches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import grain
import jax
import ml_collections
import numpy as np

from seq2seq.data.encoded import EncodedCorpus, token_spans
from seq2seq.vocabulary import PAD_ID

Example = tuple[np.ndarray, np.ndarray]  # (source ids, target ids), EOS included


@dataclasses.dataclass(frozen=True)
class BucketSpec:
    """How examples are grouped: padded lengths and how many sentences fit each."""

    max_length: int  # longest example, in tokens
    bucket_width: int  # padded lengths are multiples of this
    # Training (``plan_batches`` with ``sides``): real (non-padding) tokens per side of a global
    # batch, at most. Without ``sides`` or ``bucket_rows``: padded tokens per batch.
    tokens_per_batch: int
    sentences_per_batch: int = 0  # exactly this many sentences per batch; 0: by tokens_per_batch
    # Rows of a batch of each bucket (lengths bucket_width, 2 bucket_width, ...), fitted to a
    # corpus by ``fit_bucket_rows``; empty: tokens_per_batch // L.
    bucket_rows: tuple[int, ...] = ()

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

    @property
    def bucket_count(self) -> int:
        return self.padded_max_length // self.bucket_width

    def batch_size(self, padded_length: int) -> int:
        """Rows of a (global) batch of ``padded_length``, before ``padded_rows``."""
        if self.sentences_per_batch:
            return self.sentences_per_batch
        if self.bucket_rows:
            return self.bucket_rows[padded_length // self.bucket_width - 1]
        return max(1, self.tokens_per_batch // padded_length)


def padded_rows(rows: int, multiple: int) -> int:
    """``rows`` rounded up to a multiple of ``multiple``, the devices (and hosts) a batch is
    split over: the added rows are all padding, which the loss weighs zero."""
    return -(-rows // multiple) * multiple


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
    sides: np.ndarray | None = None,
) -> list[PlannedBatch]:
    """Groups examples by padded length into batches: the one planner of every batch stream.

    Examples are taken in one of three orders: shuffled by ``rng`` (training), sorted by length
    (``sort_by_length``: decoding, so a batch pads little) or as given (validation). By token
    budget (``spec.sentences_per_batch == 0``), they are grouped by bucket, in that order, and
    each group is cut into batches of at most the bucket's ``spec.batch_size``; with ``sides``
    (training) a batch also ends where the next example would bring its source or its target
    over ``spec.tokens_per_batch`` real tokens. With ``spec.sentences_per_batch`` (n), they are
    stably sorted by padded length and cut into batches of n: a batch that straddles two buckets
    pads to the longer.

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
      sides: [N, 2] real (source, target) tokens of each example, EOS included; given, each
        side of a token-budget batch holds at most ``spec.tokens_per_batch`` of them.

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
            if sides is None:
                groups.extend(members[i : i + size] for i in range(0, len(members), size))
            else:
                groups.extend(_cut_by_tokens(members, sides, size, spec.tokens_per_batch))
    batches = [PlannedBatch(int(padded[members].max()), members) for members in groups]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _cut_by_tokens(
    members: np.ndarray, sides: np.ndarray, size: int, tokens: int
) -> list[np.ndarray]:
    """``members`` cut, in order, into runs of at most ``size`` examples whose source and target
    each sum to at most ``tokens`` real tokens (an example alone always makes a batch)."""
    totals = np.cumsum(sides[members], axis=0)  # [M, 2] real tokens of members[: i + 1]
    groups, start = [], 0
    while start < len(members):
        before = totals[start - 1] if start else np.zeros(2, totals.dtype)
        fits = min(
            np.searchsorted(totals[:, side], before[side] + tokens, side="right") for side in (0, 1)
        )
        stop = max(start + 1, min(fits, start + size))
        groups.append(members[start:stop])
        start = stop
    return groups


def plan_epoch(
    lengths: np.ndarray,
    spec: BucketSpec,
    seed: int,
    epoch: int,
    sides: np.ndarray | None = None,
) -> list[PlannedBatch]:
    """The training batches of one epoch, in training order: a pure function of its arguments."""
    return plan_batches(lengths, spec, np.random.default_rng([seed, epoch]), sides=sides)


def fit_bucket_rows(spec: BucketSpec, sides: np.ndarray, seed: int) -> BucketSpec:
    """``spec`` with each bucket's rows: the most pairs that one batch of the bucket holds in the
    first epoch, cut by tokens alone (later epochs shuffle otherwise: a batch there that would
    hold more stops at these rows, a little short of the budget).

    Args:
      spec: a token-budget spec (``sentences_per_batch == 0``).
      sides: [N, 2] real (source, target) tokens of each training pair, EOS included.
      seed: the run's seed (the first epoch's order).
    """
    unbounded = dataclasses.replace(spec, bucket_rows=(len(sides),) * spec.bucket_count)
    largest: dict[int, int] = {}  # padded length -> most pairs in one batch
    for batch in plan_epoch(sides.max(axis=1), unbounded, seed, 0, sides):
        length = batch.padded_length
        largest[length] = max(largest.get(length, 0), len(batch.members))
    lengths = range(spec.bucket_width, spec.padded_max_length + 1, spec.bucket_width)
    rows = [largest.get(length) or max(1, spec.tokens_per_batch // length) for length in lengths]
    return dataclasses.replace(spec, bucket_rows=tuple(rows))


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


def check_row_multiple(row_multiple: int, shard_count: int, sentences_per_batch: int) -> None:
    """Refuses rows that cannot be split: hosts that do not divide the devices, or exact
    sentence counts that do not divide among them (padding those would waste rows unasked)."""
    if row_multiple % shard_count:
        raise ValueError(f"row_multiple={row_multiple} is not a multiple of {shard_count} hosts")
    if sentences_per_batch % row_multiple:
        nearest = max(round(sentences_per_batch / row_multiple), 1) * row_multiple
        raise ValueError(
            f"data.sentences_per_batch={sentences_per_batch} is not a multiple of "
            f"{row_multiple} (data-parallel devices x train.grad_accum_steps x hosts); "
            f"set data.sentences_per_batch={nearest}, or change one of the others"
        )


def check_batch_multiple(config: ml_collections.ConfigDict, batch_multiple: int) -> int:
    """The rows every global batch is padded to a multiple of: ``batch_multiple`` (data-parallel
    devices x gradient-accumulation steps) and the hosts. Refuses an exact sentence count
    (``data.sentences_per_batch``) that does not split among them, so that a caller can ask
    before anything is written.

    Raises:
      ValueError: one line naming the count and what it must divide into.
    """
    hosts = jax.process_count()
    row_multiple = math.lcm(batch_multiple, hosts)
    if not config.data.pack:  # packed rows are filled by tokens, never by a sentence count
        check_row_multiple(row_multiple, hosts, config.data.sentences_per_batch)
    return row_multiple


def corpus_sides(corpus: EncodedCorpus, indices: np.ndarray) -> np.ndarray:
    """[N, 2] real (source, target) tokens of the pairs ``indices``, EOS included."""
    return np.stack([corpus.source_lengths, corpus.target_lengths], axis=1)[indices]


class BucketedBatches(grain.IterDataset):
    """An endless stream of bucketed training batches over a tokenized corpus.

    Every host plans the same global batches, whatever the mesh, and collates only its own
    slice of their rows, padded with empty rows to ``row_multiple``: all hosts agree on each
    step's padded length (one compiled shape per step across the job) and every example is read
    by exactly one host.
    """

    def __init__(
        self,
        corpus: EncodedCorpus,
        indices: np.ndarray,
        spec: BucketSpec,
        seed: int,
        shard_index: int = 0,
        shard_count: int = 1,
        row_multiple: int = 1,
    ):
        super().__init__()
        check_row_multiple(row_multiple, shard_count, spec.sentences_per_batch)
        if spec.sentences_per_batch > len(indices):
            raise ValueError(
                f"only {len(indices)} training pairs for batches of data.sentences_per_batch="
                f"{spec.sentences_per_batch}; lower it or use more data"
            )
        self.corpus = corpus
        self.indices = np.asarray(indices, np.int64)  # [N] corpus indices of the kept pairs
        self.sides = corpus_sides(corpus, self.indices)  # [N, 2] real tokens per side
        self.lengths = self.sides.max(axis=1)
        if not spec.sentences_per_batch:
            spec = fit_bucket_rows(spec, self.sides, seed)
        self.spec = spec
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        self.row_multiple = row_multiple

    def __iter__(self) -> BucketedBatchIterator:
        return BucketedBatchIterator(self)

    @property
    def shapes(self) -> int:
        """Distinct batch shapes this stream gives, each one compile of the training step: one
        per bucket holding pairs (its length and its one row count)."""
        return len(np.unique(self.spec.padded_lengths(self.lengths)))

    def plan(self, epoch: int) -> list[PlannedBatch]:
        """The global batches of ``epoch``, in training order."""
        return plan_epoch(self.lengths, self.spec, self.seed, epoch, self.sides)

    def batch(self, planned: PlannedBatch) -> dict[str, np.ndarray]:
        """This host's rows of a planned global batch (members index ``indices``)."""
        length = planned.padded_length
        rows = padded_rows(self.spec.batch_size(length), self.row_multiple) // self.shard_count
        members = planned.members[self.shard_index * rows : (self.shard_index + 1) * rows]
        batch = {}
        for side in ("source", "target"):  # member k in row k, cut at ``length`` tokens
            ids, lengths = self.corpus.gather(side, self.indices[members])
            owners, within = token_spans(lengths)
            kept = within < length
            batch[side] = np.full((rows, length), PAD_ID, np.int32)
            batch[side][owners[kept], within[kept]] = ids[kept]
        return batch


class BucketedBatchIterator(grain.DatasetIterator):
    """Iterator whose state, {"epoch", "position"}, restores the exact stream."""

    def __init__(self, dataset: BucketedBatches):
        super().__init__()
        self._dataset = dataset
        self._epoch = 0
        self._position = 0
        self._plan = dataset.plan(0)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._position >= len(self._plan):
            self._epoch, self._position = self._epoch + 1, 0
            self._plan = self._dataset.plan(self._epoch)
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
            self._plan = self._dataset.plan(state["epoch"])
        self._epoch, self._position = int(state["epoch"]), int(state["position"])


def inference_batches(
    sources: Sequence[np.ndarray], batch_size: int, bucket_width: int, max_length: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches for decoding: (indices into ``sources``, [batch_size, L] padded source ids).

    Sentences are sorted by length so each batch pads little, and the batches come longest
    first: a batch too big for the device fails at once rather than at the end, and a progress
    bar's time to go only shrinks (shortest first, it grew as the sentences did). Inputs longer
    than ``max_length`` are truncated (still translated, never dropped). The caller puts outputs
    back in order.
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
    return batches[::-1]
