"""A tokenized corpus in flat arrays, kept on disk, and the filters that decide which pairs train.

Token ids of all sentences are concatenated into one array per side, with offsets marking where
each sentence starts: WMT14 EN-DE (4.5M pairs, ~270M tokens) takes about 0.5 GB as uint16 ids,
where a Python list of per-sentence arrays would take several times that. Lengths, which is
all that bucketing and filtering look at, come for free as ``np.diff(offsets)``.

The four arrays are written once as ``.npy`` files (``save_encoded``) and read back memory-mapped
(``load_encoded``): a restart, and every process of a run on the same host, reads the pages it
needs from one copy instead of reading and tokenizing the corpus again.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seq2seq import progress
from seq2seq.data.sources import ParallelCorpus
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.vocabulary import UNK_ID

FILTER_REASONS = ("empty", "too_long", "length_ratio")  # in the order they are checked


@dataclasses.dataclass(frozen=True)
class EncodedCorpus:
    """Token ids of N sentence pairs, EOS included, one flat array per side.

    Pair i's source is ``source_ids[source_offsets[i] : source_offsets[i + 1]]``.
    """

    source_ids: np.ndarray  # [source tokens] uint16 (or int32 for vocabularies over 65536)
    source_offsets: np.ndarray  # [N + 1] int64
    target_ids: np.ndarray  # [target tokens]
    target_offsets: np.ndarray  # [N + 1] int64

    @classmethod
    def from_sentences(
        cls, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray]
    ) -> EncodedCorpus:
        """A corpus from per-sentence id arrays (EOS included), e.g. for tests."""
        return cls(
            source_ids=np.concatenate(sources).astype(np.int32),
            source_offsets=_offsets([np.array([len(s) for s in sources], np.int64)]),
            target_ids=np.concatenate(targets).astype(np.int32),
            target_offsets=_offsets([np.array([len(t) for t in targets], np.int64)]),
        )

    def __len__(self) -> int:
        return len(self.source_offsets) - 1

    def source(self, index: int) -> np.ndarray:
        """[length] int32 ids of pair ``index``'s source sentence."""
        start, stop = self.source_offsets[index], self.source_offsets[index + 1]
        return self.source_ids[start:stop].astype(np.int32)

    def target(self, index: int) -> np.ndarray:
        """[length] int32 ids of pair ``index``'s target sentence."""
        start, stop = self.target_offsets[index], self.target_offsets[index + 1]
        return self.target_ids[start:stop].astype(np.int32)

    def gather(self, side: str, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sentences ``pairs`` of one side (``"source"`` or ``"target"``), read from the
        flat array by one indexing operation however many there are (``source(i)`` reads one).

        Returns:
          ([T] int32 ids of the sentences, concatenated in the order of ``pairs``, [K] int64
          tokens of each sentence).
        """
        ids, offsets = (
            (self.source_ids, self.source_offsets)
            if side == "source"
            else (self.target_ids, self.target_offsets)
        )
        starts = offsets[pairs]
        lengths = offsets[np.asarray(pairs) + 1] - starts
        owners, within = token_spans(lengths)
        return np.asarray(ids[starts[owners] + within], np.int32), lengths

    @property
    def source_lengths(self) -> np.ndarray:
        """[N] tokens per source sentence, EOS included."""
        return np.diff(self.source_offsets)

    @property
    def target_lengths(self) -> np.ndarray:
        """[N] tokens per target sentence, EOS included."""
        return np.diff(self.target_offsets)

    def unknown_share(self, side: str) -> float:
        """The share of one side's tokens that the tokenizer could not name (UNK), each
        sentence's EOS left out: words outside a word shortlist, or characters a subword
        vocabulary's sample never saw. Counted a block at a time (a memory-mapped WMT side
        holds 270M ids)."""
        ids = self.source_ids if side == "source" else self.target_ids
        block = 1 << 24
        unknown = sum(
            int(np.count_nonzero(ids[start : start + block] == UNK_ID))
            for start in range(0, len(ids), block)
        )
        return unknown / max(len(ids) - len(self), 1)


def token_spans(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sentences of ``lengths`` tokens laid end to end: [T] the sentence of each token and [T]
    its position inside that sentence, T = ``lengths.sum()``."""
    owners = np.repeat(np.arange(len(lengths)), lengths)
    firsts = np.cumsum(lengths) - lengths  # [K] where each sentence starts
    return owners, np.arange(len(owners)) - firsts[owners]


def _id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32)


def _offsets(lengths: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)


def encode_corpus(corpus: ParallelCorpus, tokenizer: Tokenizer) -> EncodedCorpus:
    """Tokenizes every pair of ``corpus``, one chunk of strings at a time (a bar counts the
    pairs on a terminal: WMT's millions take minutes)."""
    source_dtype = _id_dtype(tokenizer.source_vocab_size)
    target_dtype = _id_dtype(tokenizer.target_vocab_size)
    source_ids, source_lengths, target_ids, target_lengths = [], [], [], []
    with progress.bar(len(corpus), "pair", "encoding the training split", lines=True) as bar:
        for chunk in corpus.chunks():
            ids, lengths = tokenizer.encode_source_flat([source for source, _ in chunk])
            source_ids.append(ids.astype(source_dtype))
            source_lengths.append(lengths)
            ids, lengths = tokenizer.encode_target_flat([target for _, target in chunk])
            target_ids.append(ids.astype(target_dtype))
            target_lengths.append(lengths)
            bar.update(len(chunk))
    return EncodedCorpus(
        source_ids=np.concatenate(source_ids),
        source_offsets=_offsets(source_lengths),
        target_ids=np.concatenate(target_ids),
        target_offsets=_offsets(target_lengths),
    )


ARRAYS = ("source_ids", "source_offsets", "target_ids", "target_offsets")


def load_encoded(directory: Path) -> EncodedCorpus | None:
    """The corpus ``save_encoded`` wrote to ``directory``, memory-mapped; None if there is none."""
    if not (directory / "target_offsets.npy").exists():  # written last: the folder is complete
        return None
    return EncodedCorpus(
        **{name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    )


def save_encoded(corpus: EncodedCorpus, directory: Path) -> EncodedCorpus:
    """Writes ``corpus`` to ``directory`` (a new folder, renamed into place whole, so a reader
    never sees half of it; where another process got there first, its copy is kept) and
    returns it read back memory-mapped."""
    partial = directory.with_name(f"{directory.name}.partial-{os.getpid()}")
    partial.mkdir(parents=True, exist_ok=True)
    for name in ARRAYS:  # target_offsets last: load_encoded looks for it
        np.save(partial / f"{name}.npy", getattr(corpus, name))
    try:
        partial.rename(directory)
    except OSError:  # written meanwhile by another process of the run
        shutil.rmtree(partial, ignore_errors=True)
    return load_encoded(directory)


def remove_others(encoded_dir: Path, keep: str) -> list[str]:
    """Deletes every folder in ``encoded_dir`` but ``keep``, the encoding a run now trains on:
    the others are stale (a run's data section and tokenizer never change, so another key is
    an encoding from before a change to how keys are made, or of a start that made nothing) or
    half-written by a start that died, and each is as large as the corpus. Returns their names."""
    stale = sorted(p for p in encoded_dir.iterdir() if p.is_dir() and p.name != keep)
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return [folder.name for folder in stale]


def filter_pairs(
    source_lengths: np.ndarray,
    target_lengths: np.ndarray,
    max_length: int,
    max_length_ratio: float = 0.0,
) -> tuple[np.ndarray, dict[str, int]]:
    """Indices of the pairs fit to train on, and how many were dropped for each reason.

    Each dropped pair is counted once, under the first reason that applies: ``empty`` (a side
    has no token besides EOS), ``too_long`` (a side over ``max_length`` tokens, EOS included),
    ``length_ratio`` (one side over ``max_length_ratio`` times as many tokens as the other, EOS
    excluded; the usual sign of a misaligned pair; 0 disables the check).

    Args:
      source_lengths: [N] tokens per source sentence, EOS included.
      target_lengths: [N] tokens per target sentence, EOS included.
      max_length: longest side kept, in tokens.
      max_length_ratio: largest ratio of the longer to the shorter side kept; 0 for any.

    Returns:
      ([kept] int64 indices in corpus order, {"empty": n, "too_long": n, "length_ratio": n}).
    """
    shorter = np.minimum(source_lengths, target_lengths) - 1  # EOS excluded
    longer = np.maximum(source_lengths, target_lengths) - 1
    empty = shorter <= 0
    too_long = ~empty & (longer + 1 > max_length)
    ratio = ~empty & ~too_long & (max_length_ratio > 0) & (longer > max_length_ratio * shorter)
    counts = {
        "empty": int(empty.sum()),
        "too_long": int(too_long.sum()),
        "length_ratio": int(ratio.sum()),
    }
    return np.flatnonzero(~(empty | too_long | ratio)), counts
