"""SentencePiece subword tokenization (Kudo & Richardson 2018), trained on a seeded sample.

Ids are fixed across the project: 0 padding, 1 unknown, 2 beginning of sentence, 3 end of
sentence (``seq2seq.models.base``). Models are saved in the work directory so that a restarted
run and ``eval.py`` reuse exactly the tokenizer training used.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from seq2seq.models.base import BOS_ID, EOS_ID, PAD_ID, UNK_ID

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

    def decode_target(self, ids: Sequence[int]) -> str:
        """Detokenized text of one output, read up to its first EOS (padding dropped)."""
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        return self.target.decode([i for i in ids if i not in (PAD_ID, BOS_ID)])


def _encode(processor: spm.SentencePieceProcessor, texts: Sequence[str]) -> list[np.ndarray]:
    return [np.asarray(ids + [EOS_ID], np.int32) for ids in processor.encode(list(texts))]


def sample_sentences(sentences: Sequence[str], sample_size: int, seed: int) -> list[str]:
    """A seeded uniform sample without replacement (not the first lines, which may be atypical)."""
    if len(sentences) <= sample_size:
        return list(sentences)
    indices = random.Random(seed).sample(range(len(sentences)), sample_size)
    return [sentences[i] for i in sorted(indices)]


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


def train_tokenizer(
    pairs: Sequence[tuple[str, str]],
    *,
    model_type: str,
    vocab_size: int,
    shared: bool,
    sample_size: int,
    seed: int,
    directory: Path,
) -> Tokenizer:
    """Trains SentencePiece on a seeded sample of ``pairs`` and saves it in ``directory``.

    With ``shared=True`` one model is trained on both sides' sentences together (Vaswani et al.
    use a shared source-target vocabulary for EN-DE), otherwise one model per language.
    """
    directory.mkdir(parents=True, exist_ok=True)
    sample = sample_sentences(pairs, sample_size, seed)
    sources = [source for source, _ in sample]
    targets = [target for _, target in sample]
    if shared:
        model = _train_model(sources + targets, model_type, vocab_size)
        (directory / SHARED_MODEL).write_bytes(model)
        processor = _processor(model)
        return Tokenizer(processor, processor)
    source_model = _train_model(sources, model_type, vocab_size)
    target_model = _train_model(targets, model_type, vocab_size)
    (directory / SOURCE_MODEL).write_bytes(source_model)
    (directory / TARGET_MODEL).write_bytes(target_model)
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
