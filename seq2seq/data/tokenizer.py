"""SentencePiece vocabularies (Kudo & Richardson 2018), trained on a seeded sample.

Subword models ("unigram", "bpe") read raw text. Word vocabularies ("word", the 30,000-word
shortlists of Bahdanau et al. 2015) read text tokenized by the Moses tokenizer (Koehn et al. 2007,
through sacremoses), as the paper's pipeline did, and their outputs are detokenized by Moses, so
"Hello, world!" is the four words "Hello , world !" and BLEU sees "Hello, world!" again.

Ids are fixed across the project: 0 padding, 1 unknown, 2 beginning of sentence, 3 end of
sentence (``seq2seq.models.base``). Models are saved in the work directory so that a restarted
run and ``eval.py`` reuse exactly the tokenizer training used.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import os
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from seq2seq.data.sources import DataError
from seq2seq.records.whole import write_whole
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SOURCE_MODEL = "source.model"
TARGET_MODEL = "target.model"
SHARED_MODEL = "shared.model"
MOSES_FILE = "moses.json"  # languages of the Moses tokenization of a word vocabulary

# Text Moses leaves as it is: ASCII letters and digits, single spaces between words (the synthetic
# task, for one). Skipping Moses there saves most of the tokenizer's time; tests check the
# equivalence.
_UNCHANGED_BY_MOSES = re.compile(r"[A-Za-z0-9]+(?: [A-Za-z0-9]+)*")


class MosesWords:
    """Moses tokenization and detokenization of one language (sacremoses), without escaping."""

    def __init__(self, language: str):
        self.language = language

    # Loaded at the first text Moses would change: importing sacremoses compiles its rules'
    # regular expressions (0.3-0.4 s in every process), which text of plain words never needs.
    @functools.cached_property
    def _tokenizer(self):
        from sacremoses import MosesTokenizer

        return MosesTokenizer(lang=self.language)

    @functools.cached_property
    def _detokenizer(self):
        from sacremoses import MosesDetokenizer

        return MosesDetokenizer(lang=self.language)

    def tokenize(self, text: str) -> str:
        """Words and punctuation separated by single spaces: "Hi, you!" -> "Hi , you !"."""
        if _UNCHANGED_BY_MOSES.fullmatch(text):
            return text
        return self._tokenizer.tokenize(text, escape=False, return_str=True)

    def detokenize(self, text: str) -> str:
        """Space-separated Moses tokens back to ordinary text: "Hi , you !" -> "Hi, you!"."""
        if _UNCHANGED_BY_MOSES.fullmatch(text):
            return text
        return self._detokenizer.detokenize(text.split())


class Tokenizer:
    """Source and target SentencePiece models (the same object when the vocabulary is shared).

    With ``source_words``/``target_words`` (word vocabularies), text is Moses-tokenized before
    SentencePiece sees it and decoded outputs are Moses-detokenized.
    """

    def __init__(
        self,
        source: spm.SentencePieceProcessor,
        target: spm.SentencePieceProcessor,
        source_words: MosesWords | None = None,
        target_words: MosesWords | None = None,
    ):
        self.source = source
        self.target = target
        self.source_words = source_words
        self.target_words = target_words
        self._encode_source = _encoder(source, words=source_words is not None)
        self._encode_target = _encoder(target, words=target_words is not None)

    @property
    def source_vocab_size(self) -> int:
        return self.source.get_piece_size()

    @property
    def target_vocab_size(self) -> int:
        return self.target.get_piece_size()

    def encode_source(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each sentence, EOS appended, as int32 arrays."""
        ids = self._encode_source(_pretokenize(self.source_words, texts))
        return [np.asarray(sentence, np.int32) for sentence in ids]

    def encode_target(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each sentence, EOS appended, as int32 arrays."""
        ids = self._encode_target(_pretokenize(self.target_words, texts))
        return [np.asarray(sentence, np.int32) for sentence in ids]

    def encode_source_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All sentences' ids (EOS appended) concatenated, and each sentence's length."""
        return _flat(self._encode_source(_pretokenize(self.source_words, texts)))

    def encode_target_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All sentences' ids (EOS appended) concatenated, and each sentence's length."""
        return _flat(self._encode_target(_pretokenize(self.target_words, texts)))

    def decode_target(self, ids: Sequence[int]) -> str:
        """Detokenized text of one output, read up to its first EOS (padding dropped)."""
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        text = self.target.decode([i for i in ids if i not in (PAD_ID, BOS_ID)])
        return text if self.target_words is None else self.target_words.detokenize(text)


def _pretokenize(words: MosesWords | None, texts: Sequence[str]) -> Sequence[str]:
    return texts if words is None else [words.tokenize(text) for text in texts]


WORD_PREFIX = "\u2581"  # how SentencePiece marks a piece that starts a word ("▁")


def _encoder(
    processor: spm.SentencePieceProcessor, words: bool
) -> Callable[[Sequence[str]], list[list[int]]]:
    """Each text's ids with EOS appended.

    A word vocabulary looks each (Moses) word up on its own. SentencePiece's encoder would fold
    a run of unknown words ("Jean-Claude Juncker") into one UNK; Bahdanau et al. map every word
    outside the shortlist to UNK, so a sentence keeps its length in words. Known words get the
    ids SentencePiece gives them (its word model splits at spaces and normalizes nothing here).
    """
    if not words:
        return lambda texts: processor.encode(list(texts), add_eos=True)
    known = {
        processor.id_to_piece(i): i
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    }

    def encode(texts: Sequence[str]) -> list[list[int]]:
        return [
            [known.get(WORD_PREFIX + word, UNK_ID) for word in text.split(" ") if word] + [EOS_ID]
            for text in texts
        ]

    return encode


def _flat(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """([total tokens] int32 ids of all sentences, EOS after each; [N] int64 lengths)."""
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
    """A SentencePiece model of ``sentences``, serialized.

    Raises:
      DataError: one line, where SentencePiece cannot train ``vocab_size`` pieces on them.
    """
    model = io.BytesIO()
    # A word vocabulary keeps Moses' tokens as they are (no NFKC), so detokenizing restores text.
    normalization = "identity" if model_type == "word" else "nmt_nfkc"
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type=model_type,
            vocab_size=vocab_size,
            hard_vocab_limit=False,  # a small corpus may not support the requested size
            character_coverage=1.0,
            normalization_rule_name=normalization,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            # Every core this process may use: WMT-sized samples take minutes, and the other hosts
            # of a run wait for it. BPE counts are integers, so its vocabulary is the same on any
            # number of cores; unigram's EM sums floats per thread and may round differently.
            num_threads=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2,
            minloglevel=2,
        )
    except RuntimeError as error:  # SentencePiece's checks, as "INTERNAL: file(line) [...] why"
        reason = str(error).strip().splitlines()[0]
        needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", reason)
        if needed:
            raise DataError(
                f"config.data.vocab_size={vocab_size} is smaller than the {needed[1]} characters "
                f"and special tokens of this corpus; raise it to at least {needed[1]}"
            ) from None
        raise DataError(
            f"SentencePiece cannot train a {model_type} vocabulary of config.data.vocab_size="
            f"{vocab_size} here ({reason.rsplit('] ', 1)[-1] or reason}); change vocab_size"
        ) from None
    return model.getvalue()


def _processor(model: bytes) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=model)


def train_tokenizer(
    sample: Sequence[tuple[str, str]],
    *,
    model_type: str,
    vocab_size: int,
    shared: bool,
    directory: Path,
    source_lang: str = "",
    target_lang: str = "",
) -> Tokenizer:
    """Trains SentencePiece on ``sample`` (sentence pairs) and saves it in ``directory``.

    With ``shared=True`` one model is trained on both sides' sentences together (Vaswani et al.
    use a shared source-target vocabulary for EN-DE), otherwise one model per language. The
    sample is the caller's choice: ``sample_indices`` draws a seeded random one.

    ``model_type="word"`` is a shortlist (Bahdanau et al.): the Moses-tokenized sample's
    ``vocab_size - 4`` most frequent words (ties in byte order) beside the four special
    ids, all other words UNK. The size is exact unless the sample holds fewer distinct words, and
    the counts are the sample's (``data.tokenizer_sample_size`` pairs), not the whole corpus's.

    Raises:
      ValueError: a word vocabulary without ``source_lang`` and ``target_lang`` (Moses needs them).
    """
    words = None
    if model_type == "word":
        if not (source_lang and target_lang):
            raise ValueError("a word vocabulary needs source_lang and target_lang for Moses")
        words = {"source_lang": source_lang, "target_lang": target_lang}
    source_words, target_words = _moses(words)
    sources = _pretokenize(source_words, [source for source, _ in sample])
    targets = _pretokenize(target_words, [target for _, target in sample])
    directory.mkdir(parents=True, exist_ok=True)
    if words is not None:
        write_whole(directory / MOSES_FILE, json.dumps(words).encode())
    if shared:
        model = _train_model([*sources, *targets], model_type, vocab_size)
        write_whole(directory / SHARED_MODEL, model)
        processor = _processor(model)
        return Tokenizer(processor, processor, source_words, target_words)
    source_model = _train_model(sources, model_type, vocab_size)
    target_model = _train_model(targets, model_type, vocab_size)
    write_whole(directory / SOURCE_MODEL, source_model)
    write_whole(directory / TARGET_MODEL, target_model)
    source, target = _processor(source_model), _processor(target_model)
    return Tokenizer(source, target, source_words, target_words)


def _moses(words: dict[str, str] | None) -> tuple[MosesWords | None, MosesWords | None]:
    if words is None:
        return None, None
    return MosesWords(words["source_lang"]), MosesWords(words["target_lang"])


def load_tokenizer(directory: Path) -> Tokenizer | None:
    """The tokenizer saved in ``directory``, or None if there is none.

    Raises:
      DataError: one line naming a file there that cannot be read as what it should be.
    """
    moses_file = directory / MOSES_FILE
    words = (
        _read(moses_file, lambda text: _moses(json.loads(text)))
        if moses_file.exists()
        else (None, None)
    )
    if (directory / SHARED_MODEL).exists():
        processor = _read(directory / SHARED_MODEL, _processor)
        return Tokenizer(processor, processor, *words)
    if (directory / SOURCE_MODEL).exists() and (directory / TARGET_MODEL).exists():
        return Tokenizer(
            _read(directory / SOURCE_MODEL, _processor),
            _read(directory / TARGET_MODEL, _processor),
            *words,
        )
    return None


def _read(path: Path, parse: Callable):
    """``parse`` of the file's bytes (or text, for JSON), or one line naming the damaged file."""
    try:
        return parse(path.read_text() if path.suffix == ".json" else path.read_bytes())
    except (ValueError, RuntimeError, KeyError, TypeError) as error:  # JSON's, SentencePiece's
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(
            f"{path} cannot be read ({reason}); the run's tokenizer is damaged: restore its "
            "tokenizer/ folder from a copy of the run (training again makes a new one)"
        ) from None
