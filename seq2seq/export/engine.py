"""Translating with an exported CTranslate2 model, as ``Translator`` does with JAX.

The same tokenizer, beam size, length-penalty exponent, output length limit (each input's length
plus ``decode.max_extra_length``) and batches of sentences sorted by length, so that the
two engines are compared on the same files. CTranslate2 normalises scores by ``length^alpha``
where this package divides by Wu et al.'s ``((5 + |Y|) / 6)^alpha``: so CTranslate2 is asked for
its whole beam of finished hypotheses with raw log-probabilities, and they are ranked here by
this package's ``length_penalty``. Greedy outputs (beam 1) depend on neither.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import ctranslate2
import ml_collections
import numpy as np

from seq2seq.data.tokenizer import load_tokenizer
from seq2seq.decoding.beam_search import length_penalty
from seq2seq.decoding.search_parts import NEVER_OUTPUT
from seq2seq.evaluation.translator import (
    LineTranslator,
    Translations,
    check_decoding,
    one_line,
    truncate_source,
)
from seq2seq.export.converter import SETTINGS_FILE, TOKENIZER_DIR
from seq2seq.progress import Progress, ignored


class ExportedTranslator(LineTranslator):
    """An exported model directory (``seq2seq.export``) translating lists of sentences."""

    engine_name = "ctranslate2"
    members = ()  # one model: ensembles are this package's own
    sampling = None

    def __init__(
        self, directory: Path, *, beam_size: int | None = None, alpha: float | None = None,
        nbest: int | None = None, threads: int | None = None,
    ):  # fmt: skip
        directory = Path(directory)
        settings_file = directory / SETTINGS_FILE
        if not settings_file.is_file():
            raise FileNotFoundError(
                f"no {SETTINGS_FILE} in {directory}; export a run with python -m seq2seq.export"
            )
        settings = json.loads(settings_file.read_text())
        self.config = ml_collections.ConfigDict(settings["config"])  # the run's
        if beam_size is not None:
            self.config.decode.beam_size = beam_size
        if alpha is not None:
            self.config.decode.alpha = alpha
        check_decoding(self.config, nbest, None)
        self.quantization = settings["quantization"]
        self.label = f"-ctranslate2-{self.quantization}"  # where a split's scores are filed
        self.tokenizer = load_tokenizer(directory / TOKENIZER_DIR)
        self.nbest = nbest
        self.source = f"{directory} ({self.quantization})"  # what was exported, for reports
        self.engine = ctranslate2.Translator(
            str(directory), device="cpu", compute_type="default", inter_threads=1,
            intra_threads=threads or os.cpu_count() or 1,
        )  # fmt: skip
        # Never part of a translation (padding, BOS), as in this package's search.
        self.suppressed = [[self.tokenizer.target.id_to_piece(i)] for i in NEVER_OUTPUT]

    def describe_checkpoint(self) -> str:
        return f"CTranslate2 model of {self.source}"

    def _text(self, pieces: Sequence[str]) -> str:
        target = self.tokenizer.target
        return one_line(self.tokenizer.decode_target([target.piece_to_id(p) for p in pieces]))

    def translate_sentences(
        self, sentences: list[str], numbers: list[int], progress: Progress = ignored
    ) -> Translations:
        """Translations in input order (``numbers`` key samples; a beam search needs none);
        ``progress`` is told of each batch done."""
        del numbers
        decode = self.config.decode
        limit = decode.max_input_length
        ids = self.tokenizer.encode_source(sentences)
        truncated = [i for i, sentence in enumerate(ids) if len(sentence) > limit]
        source = self.tokenizer.source
        pieces = [
            [source.id_to_piece(int(i)) for i in truncate_source(sentence, limit)]
            for sentence in ids
        ]
        order = sorted(range(len(pieces)), key=lambda i: len(pieces[i]))
        outputs: list[list[tuple[float, str]]] = [[] for _ in sentences]
        capped: list[int] = []
        batch_size = self.config.eval.batch_size
        for start in range(0, len(order), batch_size):
            members = order[start : start + batch_size]
            for index, scored in self._decode_batch([pieces[i] for i in members], members):
                ranked = sorted(scored, key=lambda pair: -pair[0])
                outputs[index] = [
                    (score, self._text(hypothesis))
                    for score, hypothesis in ranked[: self.nbest or 1]
                ]
                # CTranslate2 leaves EOS out: an output as long as its limit never ended
                if ranked and len(ranked[0][1]) >= len(pieces[index]) + decode.max_extra_length:
                    capped.append(index)
            progress(len(members))
        hypotheses = [o[0][1] if o else "" for o in outputs]
        return Translations(hypotheses, truncated, outputs, sorted(capped))

    def _decode_batch(self, batch: list[list[str]], members: list[int]):
        """(index, scored hypotheses) of each sentence of a batch, each decoded at its own limit.

        Each output is at most its input's length + max_extra_length tokens, EOS included, as in
        this package's search. CTranslate2 takes one limit per batch (the longest input's), so a
        sentence whose beam ran past its own limit is decoded again at that limit, with the
        others of its length: cutting the longer outputs would keep their log-probabilities,
        and which hypotheses survive, from a search that depended on the rest of the batch."""
        decode = self.config.decode
        limits = [len(b) + decode.max_extra_length for b in batch]
        results = self._search(batch, max(limits))
        again: dict[int, list[int]] = {}  # limit -> positions in the batch
        for position, (result, most) in enumerate(zip(results, limits, strict=True)):
            if most < max(limits) and any(len(h) >= most for h in result.hypotheses):
                again.setdefault(most, []).append(position)
        for most, positions in again.items():
            redone = self._search([batch[p] for p in positions], most)
            for position, result in zip(positions, redone, strict=True):
                results[position] = result
        return zip(members, _scored(results, limits, decode.alpha), strict=True)

    def _search(self, batch: list[list[str]], most: int):
        decode = self.config.decode
        return self.engine.translate_batch(
            batch, beam_size=decode.beam_size, length_penalty=0.0,
            num_hypotheses=decode.beam_size, return_scores=True, max_decoding_length=most,
            min_decoding_length=0, max_input_length=0, suppress_sequences=self.suppressed,
        )  # fmt: skip


def _scored(results, limits: list[int], alpha: float) -> list[list[tuple[float, list[str]]]]:
    """Per sentence, (score, tokens) of each CTranslate2 hypothesis by this package's rule:
    ``log P / lp(|Y|)``, where |Y| counts the EOS that CTranslate2 leaves out, unless the
    output stopped at its limit (``_decode_batch`` makes sure none is longer). One
    ``length_penalty`` call for the whole batch."""
    lengths = [
        most if len(hypothesis) >= most else len(hypothesis) + 1
        for result, most in zip(results, limits, strict=True)
        for hypothesis in result.hypotheses
    ]
    penalties = iter(np.asarray(length_penalty(np.asarray(lengths, np.int32), alpha)).tolist())
    return [
        [
            (float(log_prob) / next(penalties), hypothesis[:most])
            for hypothesis, log_prob in zip(result.hypotheses, result.scores, strict=True)
        ]
        for result, most in zip(results, limits, strict=True)
    ]
