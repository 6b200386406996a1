"""Training-input throughput on Multi30k: how far ahead of the training step the data keeps.

    python benchmarks/data_throughput.py [--config configs/multi30k_transformer.py] [--batches 300]

Prints the one-time costs (reading and tokenizer training, tokenizing the corpus) and, for
bucketed and packed batches, sentence pairs and real (non-padding) tokens per second drawn from
the training iterator, with the padding share. Single process, no prefetching threads.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from seq2seq.config import load_config_file
from seq2seq.data import sources
from seq2seq.data.encoded import encode_corpus, filter_pairs
from seq2seq.data.pipeline import build_tokenizer, make_batches, padding_share

REPO = Path(__file__).resolve().parents[1]


def _pairs_in(batch: dict[str, np.ndarray]) -> int:
    segments = batch.get("target_segments")
    if segments is None:
        return int(np.count_nonzero(np.any(batch["target"] > 0, axis=1)))
    return int(segments.max(axis=1).sum())


def measure(batches, count: int) -> dict[str, float]:
    """Pairs/s and real tokens/s (both sides) over ``count`` batches after a warm-up batch."""
    iterator = iter(batches)
    next(iterator)
    pairs = tokens = 0
    padding = []
    start = time.perf_counter()
    for _ in range(count):
        batch = next(iterator)
        pairs += _pairs_in(batch)
        tokens += int(np.count_nonzero(batch["source"]) + np.count_nonzero(batch["target"]))
        padding.append(padding_share(batch))
    seconds = time.perf_counter() - start
    return {
        "pairs_per_second": pairs / seconds,
        "tokens_per_second": tokens / seconds,
        "padding_share": float(np.mean(padding)),
        "batches_per_second": count / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs/multi30k_transformer.py"))
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    config = load_config_file(args.config)
    data = config.data
    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()
        corpus = sources.open_corpus(data, data.train_split, limit=data.max_train_examples)
        tokenizer = build_tokenizer(config, Path(workdir), corpus)
        trained = time.perf_counter()
        encoded = encode_corpus(corpus, tokenizer)
        encoded_at = time.perf_counter()
    indices, _ = filter_pairs(
        encoded.source_lengths, encoded.target_lengths, data.max_length, data.max_length_ratio
    )
    print(f"corpus: {len(corpus)} pairs from {data.dir or data.name} ({data.train_split})")
    print(f"tokenizer training (sample of {data.tokenizer_sample_size}): {trained - start:.1f} s")
    print(
        f"tokenizing the corpus: {encoded_at - trained:.2f} s, "
        f"{len(corpus) / (encoded_at - trained):,.0f} pairs/s"
    )
    for pack in (False, True):
        config.data.pack = pack
        result = measure(make_batches(config, encoded, indices), args.batches)
        print(
            f"{'packed' if pack else 'bucketed':>8}: {result['pairs_per_second']:>10,.0f} pairs/s "
            f"{result['tokens_per_second']:>12,.0f} tokens/s "
            f"{result['batches_per_second']:>8,.1f} batches/s "
            f"{100 * result['padding_share']:5.1f}% padding"
        )


if __name__ == "__main__":
    main()
