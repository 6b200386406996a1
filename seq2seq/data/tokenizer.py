"""SentencePiece subword tokenization (Kudo & Richardson 2018), trained on a seeded sample.

Ids are fixed across the project: 0 padding, 1 unknown, 2 beginning of sentence, 3 end of
sentence (``seq2seq.models.base``). Models are saved in the work directory so that a restarted
run and ``eval.py`` reuse exactly the tokenizer training used.
"""

from __future__ import annotations

import io
import itertools
import os
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SOURCE_MODEL = "source.model"
TARGET_MODEL = "target.model"
SHARED_MODEL = "shared.model"


class Tokenizer:
    """Source and target SentencePiece models (the same object when the vocabulary is shared)."""

    def __init__(self, source: spm.SentencePieceProcessor, target: spm.SentencePieceProcessor):
        self.source = source
        self.target = target

    @property
    def source_vocab_size(self) -> int:
        return self.source.get_piece_size()

    @property
    def target_vocab_size(self) -> int:
        return self.target.get_piece_size()

    def encode_source(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each sentence, EOS appended, as int32 arrays."""
        return _encode(self.source, texts)

    def encode_target(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each sentence, EOS appended, as int32 arrays."""
        return _encode(self.target, texts)

    def encode_source_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All sentences' ids (EOS appended) concatenated, and each sentence's length."""
        return encode_flat(self.source, texts)

    def encode_target_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All sentences' ids (EOS appended) concatenated, and each sentence's length."""
        return encode_flat(self.target, texts)

    def decode_target(self, ids: Sequence[int]) -> str:
        """Detokenized text of one output, read up to its first EOS (padding dropped)."""
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        return self.target.decode([i for i in ids if i not in (PAD_ID, BOS_ID)])


def _encode(processor: spm.SentencePieceProcessor, texts: Sequence[str]) -> list[np.ndarray]:
    return [np.asarray(ids, np.int32) for ids in processor.encode(list(texts), add_eos=True)]


def encode_flat(
    processor: spm.SentencePieceProcessor, texts: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """([total tokens] int32 ids of all sentences, EOS after each; [N] int64 lengths)."""
    ids = processor.encode(list(texts), add_eos=True)
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lengths.sum()))
    return flat, lengths


def sample_indices(total: int, sample_size: int, seed: int) -> list[int]:
    """Sorted indices of a seeded uniform sample without replacement of ``range(total)``.

    A random sample rather than the first lines, which may be atypical (one domain, one year).
    """
    if total <= sample_size:
        return list(range(total))
    return sorted(random.Random(seed).sample(range(total), sample_size))


def _train_model(sentences: Sequence[str], model_type: str, vocab_size: int) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type=model_type,
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # a small corpus may not support the requested size
        character_coverage=1.0,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        num_threads=2,
        minloglevel=2,
    )
    return model.getvalue()


def _processor(model: bytes) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=model)


def _write_atomically(path: Path, content: bytes) -> None:
    """Writes via a temporary file and a rename: a crash never leaves half a model behind.

    Hosts of a multi-host run, which all train the same model, then never interleave writes.
    """
    temporary = path.with_name(f"{path.name}.tmp{os.getpid()}")
    temporary.write_bytes(content)
    os.replace(temporary, path)


def train_tokenizer(
    sample: Sequence[tuple[str, str]],
    *,
    model_type: str,
    vocab_size: int,
    shared: bool,
    directory: Path,
) -> Tokenizer:
    """Trains SentencePiece on ``sample`` (sentence pairs) and saves it in ``directory``.

    With ``shared=True`` one model is trained on both sides' sentences together (Vaswani et al.
    use a shared source-target vocabulary for EN-DE), otherwise one model per language. The
    sample is the caller's choice: ``sample_indices`` draws a seeded random one.
    """
    directory.mkdir(parents=True, exist_ok=True)
    sources = [source for source, _ in sample]
    targets = [target for _, target in sample]
    if shared:
        model = _train_model(sources + targets, model_type, vocab_size)
        _write_atomically(directory / SHARED_MODEL, model)
        processor = _processor(model)
        return Tokenizer(processor, processor)
    source_model = _train_model(sources, model_type, vocab_size)
    target_model = _train_model(targets, model_type, vocab_size)
    _write_atomically(directory / SOURCE_MODEL, source_model)
    _write_atomically(directory / TARGET_MODEL, target_model)
    return Tokenizer(_processor(source_model), _processor(target_model))


def load_tokenizer(directory: Path) -> Tokenizer | None:
    """The tokenizer saved in ``directory``, or None if there is none."""
    if (directory / SHARED_MODEL).exists():
        processor = _processor((directory / SHARED_MODEL).read_bytes())
        return Tokenizer(processor, processor)
    if (directory / SOURCE_MODEL).exists() and (directory / TARGET_MODEL).exists():
        return Tokenizer(
            _processor((directory / SOURCE_MODEL).read_bytes()),
            _processor((directory / TARGET_MODEL).read_bytes()),
        )
    return None
