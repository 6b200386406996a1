"""Trained models with their tokenizer, translating lists of sentences.

One model or an ensemble (``seq2seq.decoding.ensemble``), by beam search (the best output or the
K best) or by sampling (``seq2seq.decoding.sampling``). ``LineTranslator`` is what every engine
shares (this one and ``seq2seq.export.engine``): lines in, translations out, blank lines blank.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from seq2seq import config as config_lib
from seq2seq.checkpoints.rule import CheckpointChoice
from seq2seq.data.batching import inference_batches
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.beam_search import beam_search
from seq2seq.decoding.ensemble import Ensemble
from seq2seq.decoding.sampling import SamplingMethod, sample
from seq2seq.decoding.search_parts import output_limits
from seq2seq.evaluation import processes
from seq2seq.evaluation.restore import load_run_tokenizer, restore_parameters
from seq2seq.progress import Progress, ignored
from seq2seq.records.run_directory import RunDirectory
from seq2seq.vocabulary import EOS_ID, PAD_ID


@dataclasses.dataclass
class Translations:
    hypotheses: list[str]  # hypothesis i translates sentence i
    truncated: list[int]  # indices of the sentences whose input was cut to the length limit
    # nbest[i]: (score, hypothesis) pairs for sentence i, best first; hypotheses[i] is the first.
    # Scores are log P(Y | x) / lp(Y) for beam search, log P(Y | x) for a sample.
    nbest: list[list[tuple[float, str]]] = dataclasses.field(default_factory=list)
    # indices of the sentences whose translation stopped at the output cap (input length +
    # decode.max_extra_length tokens) before the model ended it: cut off, not finished
    capped: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Member:
    """One trained model of a translator (several make an ensemble)."""

    config: ml_collections.ConfigDict
    tokenizer: Tokenizer
    graphdef: nnx.GraphDef
    params: nnx.State | None
    checkpoint: CheckpointChoice | None = None
    name: str = "model"


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Draw one output per sentence instead of searching (``seq2seq.decoding.sampling``)."""

    method: SamplingMethod
    temperature: float = 1.0
    seed: int = 0


def target_pieces(tokenizer: Tokenizer) -> list[str]:
    return [tokenizer.target.id_to_piece(i) for i in range(tokenizer.target_vocab_size)]


def check_one_target_vocabulary(members: Sequence[Member]) -> None:
    """Raises ValueError, one line, unless every member writes the same target pieces."""
    if len(members) == 1:
        return
    first = members[0]
    pieces = target_pieces(first.tokenizer)
    for other in members[1:]:
        theirs = target_pieces(other.tokenizer)
        if theirs == pieces and (other.tokenizer.target_words is None) == (
            first.tokenizer.target_words is None
        ):
            continue
        if len(theirs) != len(pieces):
            how = f"{len(theirs)} target tokens against {len(pieces)}"
        else:
            differ = [i for i, (a, b) in enumerate(zip(theirs, pieces, strict=True)) if a != b]
            if differ:
                how = f"token {differ[0]} is {theirs[differ[0]]!r}, not {pieces[differ[0]]!r}"
            else:
                how = "one splits words with Moses, the other does not"
        raise ValueError(
            f"{other.name} and {first.name} have different target vocabularies ({how}); an "
            "ensemble averages next-token scores, so its models must share one target tokenizer"
        )


def _same_source_tokenizer(a: Tokenizer, b: Tokenizer) -> bool:
    """Whether ``a`` and ``b`` turn any source sentence into the same ids."""
    if a.source is b.source:
        return True
    same_words = (a.source_words is None and b.source_words is None) or (
        a.source_words is not None
        and b.source_words is not None
        and a.source_words.language == b.source_words.language
    )
    return same_words and (a.source.serialized_model_proto() == b.source.serialized_model_proto())


def _padded(sources: Sequence[np.ndarray], rows: int, bucket_width: int) -> np.ndarray:
    """[rows, L] 0-padded ids, L the longest rounded up to ``bucket_width``."""
    longest = max(len(ids) for ids in sources)
    length = -(-longest // bucket_width) * bucket_width
    out = np.full((rows, length), PAD_ID, np.int32)
    for row, ids in enumerate(sources):
        out[row, : len(ids)] = ids
    return out


def truncate_source(ids: np.ndarray, limit: int) -> np.ndarray:
    """The first ``limit - 1`` tokens and EOS: a cut input still ends as training inputs did."""
    if len(ids) <= limit:
        return ids
    return np.concatenate([ids[: limit - 1], np.array([EOS_ID], ids.dtype)])


def one_line(text: str) -> str:
    """A hypothesis as one line of a file, whatever characters the model produced."""
    return " ".join(text.splitlines())


def is_blank(line: str) -> bool:
    """Whether ``line`` holds nothing to translate: empty, or whitespace only."""
    return not line.strip()


def leave_blank_lines_blank(
    lines: Sequence[str],
    first_index: int,
    translate_sentences: Callable[..., Translations],
    progress: Progress = ignored,
) -> Translations:
    """The one rule for blank lines (``is_blank``), whatever the engine and the search.

    A blank line is never tokenized, decoded or scored: its translation is the empty line, with
    no n-best entries, and it is never counted as truncated or capped.
    ``translate_sentences(sentences, numbers, progress)`` gets the other lines with their
    numbers in the whole input (``first_index`` + their index in ``lines``), so each keeps its
    place and, when sampling, its key. ``progress`` counts the blank lines as done at once, the
    others as they are.
    """
    kept = [i for i, line in enumerate(lines) if not is_blank(line)]
    hypotheses, nbest = [""] * len(lines), [[] for _ in lines]
    if len(kept) < len(lines):
        progress(len(lines) - len(kept))
    if not kept:
        return Translations(hypotheses, [], nbest)
    found = translate_sentences([lines[i] for i in kept], [first_index + i for i in kept], progress)
    for position, index in enumerate(kept):
        hypotheses[index], nbest[index] = found.hypotheses[position], found.nbest[position]
    return Translations(
        hypotheses, [kept[i] for i in found.truncated], nbest, [kept[i] for i in found.capped]
    )


class LineTranslator:
    """What every decoding engine offers: ``translate`` lines, blank ones left blank.

    An engine implements ``translate_sentences(sentences, numbers, progress)``, which sees only
    lines with text in them (``leave_blank_lines_blank``); ``numbers[i]`` is sentence i's number
    in the whole input, which keys its sample, and ``progress`` is told of each batch done.
    """

    config: ml_collections.ConfigDict  # the run's: decode and eval settings, data's splits
    nbest: int | None  # the K best outputs of the beam, or None for the best alone
    sampling: Sampling | None  # drawn outputs instead of a search
    members: Sequence[Member]  # the models of this package that decode (none for another engine)

    def describe_checkpoint(self) -> str:
        """Which parameters decode, for reports."""
        raise NotImplementedError

    def translate(
        self,
        lines: Sequence[str],
        first_index: int = 0,
        *,
        progress: Progress = ignored,
    ) -> Translations:
        """Translations in input order, line i of ``lines`` numbered ``first_index + i`` (so
        translating a stream in pieces draws what one call would); ``progress`` is told how
        many more lines are done after each batch (a bar's ``update``)."""
        return leave_blank_lines_blank(lines, first_index, self.translate_sentences, progress)

    def translate_sentences(
        self, sentences: list[str], numbers: list[int], progress: Progress = ignored
    ) -> Translations:
        raise NotImplementedError


def with_decoding(
    config: ml_collections.ConfigDict, **overrides: object
) -> ml_collections.ConfigDict:
    """``config`` with the given fields of ``config.decode`` replaced (None keeps one), checked."""
    for key, value in overrides.items():
        if value is not None:
            config.decode[key] = value
    return config_lib.validate(config)


def check_decoding(
    config: ml_collections.ConfigDict, nbest: int | None, sampling: Sampling | None
) -> None:
    """Raises ValueError, one line, for an n-best list the search cannot give."""
    if nbest is not None and sampling is not None:
        raise ValueError("--nbest lists a beam's best outputs; it does not go with --sampling")
    beam_size = config.decode.beam_size
    if nbest is not None and not 1 <= nbest <= beam_size:
        raise ValueError(
            f"--nbest {nbest} must be between 1 and the beam size {beam_size}; "
            "raise --beam_size for more"
        )


@functools.partial(
    jax.jit,
    static_argnames=("graphdefs", "extra", "beam_size", "alpha", "nbest", "min_rows", "sampling"),
)
def _search(
    all_params, source, keys, *, graphdefs, extra, beam_size, alpha, nbest, min_rows, sampling
):
    """One batch's search: the beam (a beam of one is greedy), or a sample where ``sampling``
    is (method, temperature). One function for all translators, with the models' structures and
    the search's settings as static arguments, so translators of equal models and settings (each
    validation of a comparison's runs) share its traces."""
    models = [nnx.merge(g, p) for g, p in zip(graphdefs, all_params, strict=True)]
    model = models[0] if len(models) == 1 else Ensemble(models)
    first = source[0] if isinstance(source, tuple) else source
    max_length = first.shape[1] + extra
    limits = output_limits(first, extra)  # [B] input length + extra, per sentence
    limits = jnp.where(first[:, 0] == PAD_ID, 0, limits)  # a batch's padding: no output
    if sampling is not None:
        method, temperature = sampling
        tokens, scores = sample(
            model, source, max_length, keys=keys, method=method, temperature=temperature,
            limits=limits,
        )  # fmt: skip
        return tokens[:, None], scores[:, None]
    return beam_search(
        model, source, max_length, beam_size=beam_size, alpha=alpha, limits=limits, nbest=nbest,
        min_rows=min_rows,
    )  # fmt: skip


class Translator(LineTranslator):
    """Translates sentences in batches; one compiled search per padded source length.

    Decodes with the first member's ``config.decode`` (beam size, alpha, length limits) and
    ``config.eval.batch_size``. Several members decode as one ensemble; ``nbest`` keeps the K
    best outputs of the beam; ``sampling`` draws one output per sentence instead.
    """

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        tokenizer: Tokenizer,
        params: nnx.State | None,
        graphdef: nnx.GraphDef,
        *,
        checkpoint: CheckpointChoice | None = None,
        others: Sequence[Member] = (),
        nbest: int | None = None,
        sampling: Sampling | None = None,
    ):
        self.members = [Member(config, tokenizer, graphdef, params, checkpoint), *others]
        check_one_target_vocabulary(self.members)
        self.config = config
        self.tokenizer = tokenizer
        self.checkpoint = checkpoint
        self.nbest = nbest
        self.sampling = sampling
        decode = config.decode
        beam_size, alpha, extra = decode.beam_size, decode.alpha, decode.max_extra_length
        min_rows = decode.min_rows
        check_decoding(config, nbest, sampling)
        # Members whose source tokenizer differs from the first's read sources of their own.
        self._own_source = [
            not _same_source_tokenizer(tokenizer, member.tokenizer) for member in self.members
        ]
        self._search = functools.partial(
            _search,
            graphdefs=tuple(member.graphdef for member in self.members),
            extra=extra,
            beam_size=beam_size,
            alpha=alpha,
            nbest=nbest or 1,
            min_rows=min_rows,
            sampling=None if sampling is None else (sampling.method, sampling.temperature),
        )

    @property
    def model(self) -> nnx.Module:
        """The first member as a model, e.g. for a teacher-forced pass that plots attention."""
        member = self.members[0]
        return nnx.merge(member.graphdef, member.params)

    @property
    def params(self) -> nnx.State | None:
        """The first member's parameters (validation swaps in the training state's)."""
        return self.members[0].params

    @params.setter
    def params(self, params: nnx.State | None) -> None:
        self.members[0].params = params

    @classmethod
    def restore(
        cls,
        workdir: Path | RunDirectory,
        checkpoint: str = "latest",
        *,
        ensemble_with: Sequence[Path] = (),
        nbest: int | None = None,
        sampling: Sampling | None = None,
        **decode_overrides: object,
    ) -> Translator:
        """Loads a run's config, tokenizer and parameters (``checkpoint``: a rule of
        ``seq2seq.checkpoints.rule``); with ``ensemble_with``, the same rule of each of those runs.

        ``decode_overrides`` replace fields of ``config.decode`` (e.g. ``beam_size=1``).
        """
        run = RunDirectory.at(workdir)
        config = with_decoding(run.load_config(), **decode_overrides)
        return cls.from_run(
            run, config, checkpoint, ensemble_with=ensemble_with, nbest=nbest, sampling=sampling
        )

    @classmethod
    def from_run(
        cls,
        run: RunDirectory,
        config: ml_collections.ConfigDict,
        checkpoint: str = "latest",
        *,
        ensemble_with: Sequence[Path | RunDirectory] = (),
        nbest: int | None = None,
        sampling: Sampling | None = None,
    ) -> Translator:
        """The model of ``run`` under ``config``, the run's own config already loaded (and of
        each run of ``ensemble_with``, as one ensemble). Each run is opened once and its
        tokenizer loaded once."""
        check_decoding(config, nbest, sampling)
        runs = [run.require(), *(RunDirectory.at(other).require() for other in ensemble_with)]
        configs = [config, *(other.load_config() for other in runs[1:])]
        members = [
            Member(each_config, load_run_tokenizer(each_run), None, None, name=str(each_run.path))
            for each_run, each_config in zip(runs, configs, strict=True)
        ]
        check_one_target_vocabulary(members)  # before any parameters are read
        for member, each_run in zip(members, runs, strict=True):
            member.graphdef, member.params, member.checkpoint = restore_parameters(
                each_run, member.config, member.tokenizer, checkpoint
            )
        first, *others = members
        translator = cls(
            config, first.tokenizer, first.params, first.graphdef, checkpoint=first.checkpoint,
            others=others, nbest=nbest, sampling=sampling,
        )  # fmt: skip
        translator.members[0].name = first.name
        return translator

    def describe_checkpoint(self) -> str:
        """Which parameters decode: the checkpoint rule of each member."""
        described = [m.checkpoint.describe() if m.checkpoint else "given" for m in self.members]
        if len(self.members) == 1:
            return described[0]
        return "ensemble of " + "; ".join(
            f"{m.name}: {d}" for m, d in zip(self.members, described, strict=True)
        )

    def translate_sentences(
        self, sentences: list[str], numbers: list[int], progress: Progress = ignored
    ) -> Translations:
        """Translations in input order; inputs over ``decode.max_input_length`` are cut.

        Sentence i samples with key ``fold_in(seed, numbers[i])``. With several processes each
        translates its share of the sentences and every process returns all translations
        (``seq2seq.evaluation.processes``); ``progress`` then counts this process's share as
        the whole (the shares are like mixes of lengths).
        """
        limit = self.config.decode.max_input_length
        first = self.tokenizer.encode_source(sentences)
        truncated = [i for i, ids in enumerate(first) if len(ids) > limit]
        mine = processes.share(len(sentences))  # this process's sentences
        progress = processes.whole_progress(progress, len(mine), len(sentences))
        first = [truncate_source(first[i], limit) for i in mine]
        # A member that tokenizes the source as the first does reads the first's ids.
        per_member = [
            [truncate_source(ids, limit) for ids in member.tokenizer.encode_source(
                [sentences[i] for i in mine]
            )] if own else None
            for member, own in zip(self.members, self._own_source, strict=True)
        ]  # fmt: skip
        outputs: list[list[tuple[float, str]] | None] = [None] * len(first)
        capped = [False] * len(first)  # the best output stopped at the cap, with no EOS
        batch_size, width = self.config.eval.batch_size, self.config.data.bucket_width
        all_params = [processes.local_copy(member.params) for member in self.members]
        seed_key = jax.random.key(self.sampling.seed if self.sampling else 0)
        for indices, source in inference_batches(first, batch_size, width, limit):
            if any(self._own_source):  # a source per member
                source = tuple(
                    source if m is None else _padded([m[i] for i in indices], batch_size, width)
                    for m in per_member
                )
            rows = np.full((batch_size,), -1, np.int64)  # each row's sentence number
            rows[: len(indices)] = [numbers[mine[i]] for i in indices]
            keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(seed_key, rows)
            tokens, scores = jax.device_get(self._search(all_params, source, keys))
            for row, index in enumerate(indices):
                outputs[index] = [
                    (float(score), one_line(self.tokenizer.decode_target(hypothesis)))
                    for hypothesis, score in zip(tokens[row], scores[row], strict=True)
                    if score > -np.inf
                ]
                capped[index] = bool(scores[row][0] > -np.inf and EOS_ID not in tokens[row][0])
            progress(len(indices))
        if not mine:  # more processes than sentences: this one had none to translate
            progress(0)
        missing = [mine[i] for i, output in enumerate(outputs) if output is None]
        if missing:  # inference_batches must cover every sentence; never write a short file
            raise RuntimeError(f"{len(missing)} sentences were not translated, first {missing[0]}")
        # Each sentence's list and cap travel between processes as one JSON text.
        found = [
            json.loads(text)
            for text in processes.gather_texts(
                [json.dumps([o, c]) for o, c in zip(outputs, capped, strict=True)], len(sentences)
            )
        ]
        nbest = [[tuple(entry) for entry in entries] for entries, _ in found]
        hypotheses = [entries[0][1] if entries else "" for entries in nbest]
        return Translations(
            hypotheses, truncated, nbest, [i for i, (_, cut) in enumerate(found) if cut]
        )
