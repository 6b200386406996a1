"""From a config to tokenized, bucketed or packed batches: the one reader of ``config.data``."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
from pathlib import Path

import grain
import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from seq2seq.data import sources
from seq2seq.data.batching import BucketedBatches, BucketSpec, check_batch_multiple
from seq2seq.data.encoded import (
    EncodedCorpus,
    encode_corpus,
    filter_pairs,
    load_encoded,
    remove_others,
    save_encoded,
)
from seq2seq.data.packing import PackedBatches
from seq2seq.data.sources import DataError, ParallelCorpus
from seq2seq.data.tokenizer import Tokenizer, load_tokenizer, sample_indices, train_tokenizer
from seq2seq.vocabulary import PAD_ID

logger = logging.getLogger(__name__)

REPORT_BATCHES = 20  # batches drawn at start-up to report padding and packing efficiency


@dataclasses.dataclass
class TrainingData:
    tokenizer: Tokenizer
    batches: grain.IterDataset  # endless; its iterator has get_state/set_state
    counts: dict[str, int]  # pairs read, kept, and dropped by each filter


def load_pairs(config: ml_collections.ConfigDict, split: str) -> list[tuple[str, str]]:
    """Raw (source, target) sentence pairs of one split, from the configured source."""
    return sources.load_pairs(config.data, split, seed=config.seed)


def build_tokenizer(
    config: ml_collections.ConfigDict, directory: Path, corpus: ParallelCorpus
) -> Tokenizer:
    """The tokenizer saved in ``directory`` (a run's ``tokenizer_dir``); trained on a seeded
    sample of ``corpus`` the first time.

    In a multi-process run process 0 alone trains and saves it; the others wait for it and read
    it, so every process encodes with the very same model and no two write the same file.
    """
    if jax.process_index() == 0:
        tokenizer = load_tokenizer(directory) or _train_tokenizer(config, directory, corpus)
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("seq2seq: tokenizer saved")
        tokenizer = load_tokenizer(directory)
    return tokenizer


def _train_tokenizer(
    config: ml_collections.ConfigDict, directory: Path, corpus: ParallelCorpus
) -> Tokenizer:
    data = config.data
    sample = corpus.take(sample_indices(len(corpus), data.tokenizer_sample_size, config.seed))
    logger.info("training a %s tokenizer on %d sampled pairs", data.tokenizer, len(sample))
    tokenizer = train_tokenizer(
        sample,
        model_type=data.tokenizer,
        vocab_size=data.vocab_size,
        shared=data.shared_vocab,
        directory=directory,
        source_lang=data.src_lang,
        target_lang=data.tgt_lang,
    )
    if line := smaller_vocabulary_line(tokenizer, data):
        logger.warning(line)
    return tokenizer


def smaller_vocabulary_line(tokenizer: Tokenizer, data: ml_collections.ConfigDict) -> str | None:
    """One line where the vocabulary came out smaller than ``data.vocab_size`` (the sample holds
    fewer distinct pieces or words than asked for; SentencePiece then stops short rather than
    failing), else None. The model's embeddings take the tokenizer's size, not the config's."""
    sizes = {tokenizer.source_vocab_size, tokenizer.target_vocab_size}
    if max(sizes) >= data.vocab_size:
        return None
    found = " and ".join(f"{size:,}" for size in sorted(sizes))
    return (
        f"vocabulary: {found} pieces, fewer than data.vocab_size={data.vocab_size:,}: the "
        f"tokenizer's sample ({data.tokenizer_sample_size:,} pairs at most) holds no more, and "
        "the model's embeddings take the smaller size"
    )


def real_tokens(batch: dict[str, np.ndarray], side: str) -> int:
    """Real (non-padding) tokens of one side (``"source"`` or ``"target"``) of a batch."""
    segments = batch.get(f"{side}_segments")
    return int(np.count_nonzero(batch[side] != PAD_ID if segments is None else segments))


def padding_share(batch: dict[str, np.ndarray]) -> float:
    """Fraction of padded positions in a batch (both sides), packed or not."""
    real = real_tokens(batch, "source") + real_tokens(batch, "target")
    return 1.0 - real / (batch["source"].size + batch["target"].size)


def _examples_per_row(batch: dict[str, np.ndarray]) -> float:
    segments = batch.get("target_segments")
    if segments is None:
        return float(np.mean(np.any(batch["target"] != PAD_ID, axis=1)))
    return float(np.mean(segments.max(axis=1)))


def report_efficiency(batches: grain.IterDataset, count: int = REPORT_BATCHES) -> dict[str, float]:
    """Mean padding share, examples per row, rows and real tokens per side of the first
    ``count`` batches (this host's rows)."""
    first = list(itertools.islice(iter(batches), count))
    return {
        "padding_share": float(np.mean([padding_share(b) for b in first])),
        "examples_per_row": float(np.mean([_examples_per_row(b) for b in first])),
        "rows": float(np.mean([b["source"].shape[0] for b in first])),
        "source_tokens": float(np.mean([real_tokens(b, "source") for b in first])),
        "target_tokens": float(np.mean([real_tokens(b, "target") for b in first])),
    }


def make_batches(
    config: ml_collections.ConfigDict,
    corpus: EncodedCorpus,
    indices: np.ndarray,
    batch_multiple: int = 1,
) -> grain.IterDataset:
    """Bucketed or packed (``config.data.pack``) batches: this host's rows of global batches
    that every mesh plans alike, padded with empty rows to a multiple of ``batch_multiple`` and
    of the hosts."""
    data = config.data
    hosts, host = jax.process_count(), jax.process_index()
    row_multiple = check_batch_multiple(config, batch_multiple)
    spec = BucketSpec(
        max_length=data.max_length,
        bucket_width=data.bucket_width,
        tokens_per_batch=data.tokens_per_batch,
        sentences_per_batch=data.sentences_per_batch,
    )
    if not data.pack:
        return BucketedBatches(corpus, indices, spec, config.seed, host, hosts, row_multiple)
    return PackedBatches(
        corpus,
        indices,
        row_length=spec.padded_max_length,
        tokens_per_batch=data.tokens_per_batch,
        seed=config.seed,
        shard_index=host,
        shard_count=hosts,
        row_multiple=row_multiple,
    )


# Keys of the data section read only after encoding (by the filters and the batch planner): a
# change to them batches the same encoded corpus differently.
AFTER_ENCODING = frozenset(
    {
        "max_length",
        "max_length_ratio",
        "tokens_per_batch",
        "sentences_per_batch",
        "bucket_width",
        "pack",
    }
)


# Keys of the data section that encoding the training split never reads: the splits validation
# and scoring read, and the folder, whose files a run's identity check has already compared
# when it changes (``RunDirectory.identity_differences``: a moved text corpus continues the run
# only if its files are the same bytes), so that a moved corpus is not encoded again.
NOT_ENCODED = frozenset({"eval_split", "test_split", "dir"})


def encoded_corpus_key(config: ml_collections.ConfigDict, tokenizer_dir: Path) -> str:
    """Names the training split as encoded by the tokenizer in ``tokenizer_dir``: a hash of the
    data section (but the keys read after encoding, ``AFTER_ENCODING``, or never,
    ``NOT_ENCODED``), the seed (which orders and samples the pairs) and the tokenizer's files.
    Any change to them names another corpus, so a stale encoding is never read."""
    left_out = AFTER_ENCODING | NOT_ENCODED
    reading = {k: v for k, v in config.data.to_dict().items() if k not in left_out}
    digest = hashlib.sha256()
    digest.update(json.dumps([reading, config.seed], sort_keys=True, default=str).encode())
    for path in sorted(tokenizer_dir.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    return f"{config.data.train_split}-{digest.hexdigest()[:16]}"


def _training_corpus(
    config: ml_collections.ConfigDict, tokenizer_dir: Path, encoded_dir: Path | None
) -> tuple[Tokenizer, EncodedCorpus]:
    """The tokenizer and the encoded training split: read from ``encoded_dir`` when an earlier
    start wrote them there (nothing is read or tokenized again), else read, tokenized and
    written there by process 0 alone, and memory-mapped by every process (the run directory is
    one for all processes, as its tokenizer and checkpoints are)."""
    tokenizer = load_tokenizer(tokenizer_dir) if encoded_dir is not None else None
    if tokenizer is not None:
        folder = encoded_dir / encoded_corpus_key(config, tokenizer_dir)
        encoded = load_encoded(folder)
        if encoded is not None:
            if jax.process_count() > 1:  # the same collective as build_tokenizer's
                multihost_utils.sync_global_devices("seq2seq: tokenizer saved")
            logger.info("training split encoded before: %d pairs read from disk", len(encoded))
            _remove_stale(folder)
            return tokenizer, encoded
    data = config.data
    corpus = sources.open_corpus(
        data, data.train_split, seed=config.seed, limit=data.max_train_examples
    )
    tokenizer = build_tokenizer(config, tokenizer_dir, corpus)
    if encoded_dir is None:
        return tokenizer, encode_corpus(corpus, tokenizer)
    folder = encoded_dir / encoded_corpus_key(config, tokenizer_dir)
    if jax.process_index() == 0:
        save_encoded(encode_corpus(corpus, tokenizer), folder)
    if jax.process_count() > 1:  # the others read process 0's copy, as they read its tokenizer
        multihost_utils.sync_global_devices("seq2seq: training split encoded")
    encoded = load_encoded(folder)
    if jax.process_index() > 0:
        logger.info("training split encoded by process 0: %d pairs read from disk", len(encoded))
    _remove_stale(folder)
    return tokenizer, encoded


def _remove_stale(folder: Path) -> None:
    """Process 0 deletes the run's other encodings of its training split (``remove_others``)."""
    if jax.process_index() == 0 and (removed := remove_others(folder.parent, keep=folder.name)):
        logger.info(
            "removed %d stale encoding(s) of the training split: %s",
            len(removed),
            ", ".join(removed),
        )


# Why the filters drop a pair, as the log says it (``filter_pairs``'s reasons).
DROPPED = {
    "empty": "empty",
    "too_long": "longer than data.max_length",
    "length_ratio": "past data.max_length_ratio",
}


def pairs_line(counts: dict[str, int]) -> str:
    """The training split's pairs read, kept and dropped (by reason), as one log line."""
    dropped = [f"{counts[reason]:,} {why}" for reason, why in DROPPED.items() if counts[reason]]
    kept = f"{counts['kept']:,} kept; dropped " + ", ".join(dropped) if dropped else "all kept"
    return f"training pairs: {counts['read']:,} read, {kept}"


def unknown_line(encoded: EncodedCorpus, data: ml_collections.ConfigDict) -> str:
    """How much of the training split the tokenizer maps to UNK, as one log line. With a word
    vocabulary that is every word outside its shortlist (Bahdanau et al. keep 30,000 a
    language), and a model learns to emit UNK as a word of its own: a shortlist too small for
    the corpus shows here before it shows as ``⁇`` in the samples."""
    source, target = (100 * encoded.unknown_share(side) for side in ("source", "target"))
    line = (
        f"unknown tokens: {source:.2f}% of the training split's source, {target:.2f}% of its target"
    )
    if data.tokenizer == "word":
        line += f" (words outside shortlists of data.vocab_size={data.vocab_size:,})"
    return line


def build_training_data(
    config: ml_collections.ConfigDict,
    tokenizer_dir: Path,
    batch_multiple: int = 1,
    encoded_dir: Path | None = None,
) -> TrainingData:
    """Reads, tokenizes, filters and batches the training split; logs what was dropped and why.

    Args:
      config: the full config (reads ``config.data`` and ``config.seed``).
      tokenizer_dir: holds (or receives) the tokenizer.
      batch_multiple: rows of a global batch are padded up to a multiple of this (data-parallel
        devices x gradient-accumulation steps); the batches themselves do not depend on it.
      encoded_dir: keeps the encoded training split for later starts (a run's
        ``encoded_dir``); None encodes it afresh each time.

    Raises:
      DataError: the data is missing or unreadable, or no pair survives the filters.
    """
    data = config.data
    tokenizer, encoded = _training_corpus(config, tokenizer_dir, encoded_dir)
    indices, dropped = filter_pairs(
        encoded.source_lengths, encoded.target_lengths, data.max_length, data.max_length_ratio
    )
    counts = {"read": len(encoded), "kept": len(indices), **dropped}
    logger.info(pairs_line(counts))
    logger.info(unknown_line(encoded, data))
    if not len(indices):
        raise DataError(
            f"no training pairs left after filtering ({counts}); raise data.max_length or "
            "data.max_length_ratio, or check the data"
        )
    if data.source == "synthetic" and data.synthetic_lengths == "uniform" and dropped["too_long"]:
        longest = int(max(encoded.source_lengths.max(), encoded.target_lengths.max()))
        raise DataError(
            f"data.max_length={data.max_length} drops {dropped['too_long']} synthetic pairs, and "
            f"with them the even spread of lengths; set it to at least {longest} (the longest "
            "pair's tokens, EOS included)"
        )
    batches = make_batches(config, encoded, indices, batch_multiple)
    report = report_efficiency(batches)
    logger.info(
        "%s batches: %.1f%% padding, %.2f examples per row, %.1f rows, %.0f source and %.0f "
        "target real tokens (first %d batches, this host's rows); %s to compile",
        "packed" if data.pack else "bucketed",
        100 * report["padding_share"],
        report["examples_per_row"],
        report["rows"],
        report["source_tokens"],
        report["target_tokens"],
        REPORT_BATCHES,
        f"{batches.shapes} batch shape" + "s" * (batches.shapes != 1),
    )
    return TrainingData(tokenizer, batches, counts)
