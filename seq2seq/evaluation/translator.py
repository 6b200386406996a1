"""A trained model with its tokenizer, translating lists of sentences with beam search."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import jax
import ml_collections
import numpy as np
from flax import nnx

from seq2seq import config as config_lib
from seq2seq.checkpoint_rule import CheckpointChoice
from seq2seq.data.batching import inference_batches
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.beam_search import beam_search
from seq2seq.decoding.search_parts import output_limits
from seq2seq.evaluation import processes
from seq2seq.evaluation.restore import restore_model
from seq2seq.run_directory import RunDirectory
from seq2seq.vocabulary import EOS_ID


@dataclasses.dataclass
class Translations:
    hypotheses: list[str]  # hypothesis i translates sentence i
    truncated: list[int]  # indices of the sentences whose input was cut to the length limit


def truncate_source(ids: np.ndarray, limit: int) -> np.ndarray:
    """The first ``limit - 1`` tokens and EOS: a cut input still ends as training inputs did."""
    if len(ids) <= limit:
        return ids
    return np.concatenate([ids[: limit - 1], np.array([EOS_ID], ids.dtype)])


def one_line(text: str) -> str:
    """A hypothesis as one line of a file, whatever characters the model produced."""
    return " ".join(text.splitlines())


def with_decoding(
    config: ml_collections.ConfigDict, **overrides: object
) -> ml_collections.ConfigDict:
    """``config`` with the given fields of ``config.decode`` replaced (None keeps one), checked."""
    for key, value in overrides.items():
        if value is not None:
            config.decode[key] = value
    return config_lib.validate(config)


class Translator:
    """Translates sentences in batches; one compiled search per padded source length."""

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        tokenizer: Tokenizer,
        params: nnx.State,
        graphdef: nnx.GraphDef,
        *,
        checkpoint: CheckpointChoice | None = None,
    ):
        """Decodes with ``config.decode`` (beam size, alpha, length limits) and ``config.eval``."""
        self.config = config
        self.tokenizer = tokenizer
        self.params = params
        self.graphdef = graphdef
        self.checkpoint = checkpoint
        decode = config.decode
        beam_size, alpha, extra = decode.beam_size, decode.alpha, decode.max_extra_length

        def search(params, source):
            model = nnx.merge(graphdef, params)
            max_length = source.shape[1] + extra
            limits = output_limits(source, extra)  # [B] input length + extra, per sentence
            tokens, _ = beam_search(  # a beam of one is greedy search
                model, source, max_length, beam_size=beam_size, alpha=alpha, limits=limits
            )
            return tokens

        self._search = jax.jit(search)

    @classmethod
    def restore(
        cls, workdir: Path | RunDirectory, checkpoint: str = "latest", **decode_overrides: object
    ) -> Translator:
        """Loads a run's config, tokenizer and parameters (``checkpoint``: a rule of
        ``seq2seq.checkpoint_rule``).

        ``decode_overrides`` replace fields of ``config.decode`` (e.g. ``beam_size=1``).
        """
        run = RunDirectory.at(workdir)
        return cls.from_run(run, with_decoding(run.load_config(), **decode_overrides), checkpoint)

    @classmethod
    def from_run(
        cls, run: RunDirectory, config: ml_collections.ConfigDict, checkpoint: str = "latest"
    ) -> Translator:
        """The model of ``run`` under ``config``, the run's own config already loaded."""
        tokenizer, graphdef, params, choice = restore_model(run, config, checkpoint)
        return cls(config, tokenizer, params, graphdef, checkpoint=choice)

    def translate(self, sentences: Sequence[str]) -> Translations:
        """Translations in input order; inputs over ``decode.max_input_length`` are cut.

        With several processes each translates its share of the sentences and every process
        returns all translations (``seq2seq.evaluation.processes``).
        """
        limit = self.config.decode.max_input_length
        sources = self.tokenizer.encode_source(sentences)
        truncated = [i for i, ids in enumerate(sources) if len(ids) > limit]
        mine = processes.share(len(sources))
        sources = [truncate_source(sources[i], limit) for i in mine]
        outputs: list[str | None] = [None] * len(sources)
        batches = inference_batches(
            sources, self.config.eval.batch_size, self.config.data.bucket_width, limit
        )
        params = processes.local_copy(self.params)
        for indices, source in batches:
            tokens = jax.device_get(self._search(params, source))
            for row, index in enumerate(indices):
                outputs[index] = one_line(self.tokenizer.decode_target(tokens[row]))
        missing = [mine[i] for i, output in enumerate(outputs) if output is None]
        if missing:  # inference_batches must cover every sentence; never write a short file
            raise RuntimeError(f"{len(missing)} sentences were not translated, first {missing[0]}")
        return Translations(processes.gather_texts(outputs, len(sentences)), truncated)
