"""``python -m seq2seq.bench.corpus``: a made-up corpus shaped like WMT14 English-German."""

from __future__ import annotations

import numpy as np

from seq2seq.bench.corpus import write_corpus


def test_the_made_up_corpus_has_wmt14s_lengths_and_a_long_tail_of_words(tmp_path):
    write_corpus(tmp_path, pairs=20_000, seed=3)
    source = (tmp_path / "train.en").read_text().splitlines()
    target = (tmp_path / "train.de").read_text().splitlines()
    assert len(source) == len(target) == 20_000
    assert not list(tmp_path.glob("*.partial"))  # renamed into place once complete
    lengths = np.array([len(line.split()) for line in source])
    assert 18 <= np.median(lengths) <= 20 and 21 <= lengths.mean() <= 25  # WMT14 English: ~23
    assert lengths.min() >= 1 and np.percentile(lengths, 99) > 60  # a long tail, as in WMT
    ratio = np.mean([len(t.split()) for t in target]) / lengths.mean()
    assert 1.0 < ratio < 1.15  # German a little longer
    words, counts = np.unique(" ".join(source).split(), return_counts=True)
    assert len(words) > 10_000  # far more types than a toy grammar's
    top = np.sort(counts)[::-1]
    assert top[0] > 20 * top[100]  # Zipf: the commonest word far above the hundredth
