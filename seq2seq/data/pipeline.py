"""From a config to tokenized, bucketed batches: the one place that reads ``config.data``."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import ml_collections
import numpy as np

from seq2seq.data import sources
from seq2seq.data.batching import BucketedBatches, BucketSpec, Example
from seq2seq.data.tokenizer import Tokenizer, load_tokenizer, train_tokenizer

logger = logging.getLogger(__name__)

TOKENIZER_DIR = "tokenizer"


@dataclasses.dataclass
class TrainingData:
    tokenizer: Tokenizer
    batches: BucketedBatches
    counts: dict[str, int]  # examples read, kept and filtered (by reason)


def load_pairs(config: ml_collections.ConfigDict, split: str) -> list[tuple[str, str]]:
    """Raw (source, target) sentence pairs of one split, from the configured source."""
    return sources.load_pairs(config.data, split, seed=config.seed)


def build_tokenizer(
    config: ml_collections.ConfigDict, workdir: Path, train_pairs: Sequence[tuple[str, str]]
) -> Tokenizer:
    """The work directory's tokenizer; trained on a seeded sample of the data the first time."""
    directory = workdir / TOKENIZER_DIR
    tokenizer = load_tokenizer(directory)
    if tokenizer is not None:
        return tokenizer
    data = config.data
    return train_tokenizer(
        train_pairs,
        model_type=data.tokenizer,
        vocab_size=data.vocab_size,
        shared=data.shared_vocab,
        sample_size=data.tokenizer_sample_size,
        seed=config.seed,
        directory=directory,
    )


def filter_examples(
    examples: Sequence[Example], max_length: int
) -> tuple[list[Example], dict[str, int]]:
    """Drops pairs with an empty side or a side longer than ``max_length`` tokens; counts why."""
    kept, counts = [], {"empty": 0, "too_long": 0}
    for source, target in examples:
        if len(source) <= 1 or len(target) <= 1:  # EOS alone: the sentence was empty
            counts["empty"] += 1
        elif max(len(source), len(target)) > max_length:
            counts["too_long"] += 1
        else:
            kept.append((source, target))
    return kept, counts


def build_training_data(
    config: ml_collections.ConfigDict, workdir: Path, batch_multiple: int = 1
) -> TrainingData:
    """Reads, tokenizes, filters and batches the training split."""
    pairs = load_pairs(config, config.data.train_split)
    if config.data.max_train_examples:
        pairs = pairs[: config.data.max_train_examples]
    tokenizer = build_tokenizer(config, workdir, pairs)
    encoded = list(
        zip(
            tokenizer.encode_source([s for s, _ in pairs]),
            tokenizer.encode_target([t for _, t in pairs]),
            strict=True,
        )
    )
    examples, counts = filter_examples(encoded, config.data.max_length)
    counts = {"read": len(pairs), "kept": len(examples), **counts}
    logger.info("training examples: %s", counts)
    if not examples:
        raise ValueError(f"no training examples left after filtering: {counts}")
    spec = BucketSpec(
        max_length=config.data.max_length,
        bucket_width=config.data.bucket_width,
        tokens_per_batch=config.data.tokens_per_batch,
        batch_multiple=batch_multiple,
    )
    return TrainingData(tokenizer, BucketedBatches(examples, spec, seed=config.seed), counts)


def padding_share(batch: dict[str, np.ndarray]) -> float:
    """Fraction of padded positions in a batch (both sides)."""
    total = batch["source"].size + batch["target"].size
    return 1.0 - (np.count_nonzero(batch["source"]) + np.count_nonzero(batch["target"])) / total
