"""The trained models a server holds: each run loaded once, with what the page says about it.

A ``ServedModel`` wraps the very ``Translator`` that ``eval.py`` builds (same checkpoint rules,
same beam search, same batching of sentences by length), so a sentence translates on the page as
it does in ``eval.py``. Its attention comes from ``seq2seq.report.alignment``, the code behind the
notebooks' and the report's attention maps.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

import ml_collections
import numpy as np

from seq2seq import config as config_lib
from seq2seq.data import sources
from seq2seq.evaluation.evaluate import decoding_label
from seq2seq.evaluation.translator import Translations, Translator, with_decoding
from seq2seq.models import count_params
from seq2seq.records.run_directory import RunDirectory
from seq2seq.report.alignment import cross_attention
from seq2seq.serve.names import model_names

EXAMPLES = 4  # test sentences offered on the page as starting points


def search_rows(sentences: int, max_rows: int) -> int:
    """Rows of the search for ``sentences``: the next power of 4, at most ``max_rows``.

    A search compiles once per (rows, padded length), seconds each on a CPU, during which every
    request waits: four sizes up to 64 rows keep that to a few programs per length, and padding
    rows cost little (they finish at once and the search sheds them, ``decode.min_rows``).
    """
    rows = 1
    while rows < sentences:
        rows *= 4
    return min(rows, max_rows)


def describe_size(config: ml_collections.ConfigDict) -> str:
    """The widths that tell one size of a family from another, in the papers' names."""
    if config.model.name == "transformer":
        t = config.model.transformer
        return (
            f"d_model {t.d_model}, d_ff {t.d_ff}, {t.encoder_layers}+{t.decoder_layers} layers, "
            f"{t.num_heads} heads"
        )
    r = config.model.rnnsearch
    return (
        f"embedding {r.embedding_size}, encoder {r.encoder_hidden_size}x2, decoder "
        f"{r.decoder_hidden_size}, alignment {r.alignment_size}, {r.attention} attention"
    )


def attention_kind(config: ml_collections.ConfigDict) -> str:
    """What the page shows of a model's cross-attention: ``heads`` (each layer and head of the
    Transformer), ``alignment`` (RNNsearch's one alignment) or ``none`` (RNNencdec)."""
    if config.model.name == "transformer":
        return "heads"
    return "alignment" if config_lib.has_cross_attention(config) else "none"


def _examples(config: ml_collections.ConfigDict) -> list[str]:
    """The first test sentences of the run's data, or none when they cannot be read here."""
    try:
        pairs = sources.load_pairs(config.data, "test", seed=config.seed)
    except (FileNotFoundError, OSError, ValueError):  # e.g. the data lives on another machine
        return []
    return [source for source, _ in pairs[:EXAMPLES]]


@dataclasses.dataclass
class ServedModel:
    """One model of the server (a run, or an ensemble of runs) and its card for ``GET /models``."""

    name: str
    translator: Translator
    card: dict[str, object]  # family, size, parameters, checkpoint, test BLEU, ...

    @property
    def max_input_length(self) -> int:
        return self.translator.config.decode.max_input_length

    @property
    def beam_size(self) -> int:
        return self.translator.config.decode.beam_size

    def source_lengths(self, sentences: Sequence[str]) -> list[int]:
        """Source tokens of each sentence, EOS included: what ``max_input_length`` bounds."""
        return [len(ids) for ids in self.translator.tokenizer.encode_source(list(sentences))]

    def translate(self, sentences: list[str], max_rows: int) -> Translations:
        """Translations with their n-best lists, searched in batches of ``search_rows`` rows.

        A sentence translates the same in any batch (beam search is batch-independent); its
        scores agree to float32's rounding (a few units in the 7th digit), since the matrix
        products of another batch shape sum in another order. Only
        the server's one decoding thread calls this, so setting the batch size here races with
        nothing.
        """
        self.translator.config.eval.batch_size = search_rows(len(sentences), max_rows)
        return self.translator.translate(sentences)

    def warm_up(self, sentences: Sequence[str]) -> float:
        """Compiles what a page visitor's first request needs, before any visitor waits for it:
        the one-sentence search and the attention pass for each of ``sentences`` (the page's
        examples; other lengths or batch sizes compile when first asked for). Returns the
        seconds it took."""
        start = time.perf_counter()
        for sentence in sentences:
            found = self.translate([sentence], max_rows=1).nbest[0]
            if found and found[0][1]:
                self.attention(sentence, found[0][1])
        return time.perf_counter() - start

    def attention(
        self, sentence: str, translation: str, *, ended: bool = True
    ) -> dict[str, object] | None:
        """The cross-attention that produced ``translation``: source and target pieces and the
        weights ``[layer][head][target][source]`` (one layer and head for RNNsearch's alignment;
        no EOS row where ``ended`` is False, a translation cut off at the output cap); None for
        a model without attention or an ensemble (whose members each attend)."""
        if len(self.translator.members) > 1:
            return None
        alignment = cross_attention(self.translator, sentence, target=translation, ended=ended)
        if alignment is None:
            return None
        weights = np.asarray(alignment.weights, np.float64)  # [L, H, T, S]
        return {
            "source_tokens": alignment.source_pieces,
            "target_tokens": alignment.target_pieces,
            "layers": int(weights.shape[0]),
            "heads": int(weights.shape[1]),
            "weights": np.round(weights, 5).tolist(),
        }


def scores_of_the_test_split(
    run: RunDirectory, data: ml_collections.ConfigDict, label: str
) -> dict | None:
    """What ``eval.py --split test`` wrote for ``run`` under ``label``, or None. ``eval.py``
    files a split by the stem the role names (Multi30k's ``test_2016_flickr``), or by the role
    itself where it fell back to a folder's ``test.*`` files; the corpus need not be here.
    The role's file counts only where it was read from the run's own folder: ``eval.py
    --data_dir`` files another corpus's ``test.*`` under it too, and the card would show that
    score as the run's (a result from before 2026-12-07 does not say where it read)."""
    if (result := run.read_eval_result(data.test_split, label)) is not None:
        return result
    own = str(Path(data.dir).resolve()) if data.dir else None
    role = run.read_eval_result("test", label) if data.test_split != "test" else None
    return role if role is not None and role.get("data_dir", "unknown") == own else None


def _scores_what_it_serves(result: dict, translator: Translator) -> bool:
    """Whether scores ``eval.py`` wrote were of the parameters and decoding served: the same
    checkpoint (``latest`` moves on as a run trains on), beam and length penalty; and of the
    whole split (``compare --max_test_sentences`` files its first N pairs under its name)."""
    if result.get("max_sentences"):
        return False
    decode = translator.config.decode
    served = {
        "checkpoint": translator.describe_checkpoint(),
        "beam_size": decode.beam_size,
        "alpha": decode.alpha,
    }
    return all(result.get(key, value) == value for key, value in served.items())


def _card(
    name: str, translator: Translator, runs: Sequence[RunDirectory], checkpoint: str
) -> dict[str, object]:
    config = translator.config
    result = scores_of_the_test_split(
        runs[0], config.data, decoding_label(checkpoint, [r.path for r in runs[1:]])
    )
    if result is not None and not _scores_what_it_serves(result, translator):
        result = None  # another step (the run trained on since), beam or length penalty
    return {
        "name": name,
        "family": "ensemble" if len(runs) > 1 else config.model.name,
        "size": "; ".join(describe_size(member.config) for member in translator.members),
        "parameters": sum(count_params(member.params) for member in translator.members),
        "checkpoint": translator.describe_checkpoint(),
        "test_bleu": None if result is None else result.get("bleu"),
        "languages": [config.data.src_lang, config.data.tgt_lang],
        "beam_size": config.decode.beam_size,
        "alpha": config.decode.alpha,
        "max_input_length": config.decode.max_input_length,
        "runs": [str(run.path) for run in runs],
        "attention": "none" if len(runs) > 1 else attention_kind(config),
        "examples": _examples(config),
    }


def load_models(
    workdirs: Sequence[str | Path],
    checkpoint: str = "latest",
    *,
    ensemble: bool = False,
    beam_size: int | None = None,
    alpha: float | None = None,
) -> dict[str, ServedModel]:
    """Every run of ``workdirs`` under the checkpoint rule ``checkpoint``, by name, in order;
    with ``ensemble``, all of them as one more model named ``ensemble``.

    Each translator keeps the beam's n-best list (the best first, as ``eval.py`` outputs it), so
    a request may ask for it without another compiled search.
    """
    runs = [RunDirectory(path).require() for path in workdirs]
    models = {}
    for name, run in zip(model_names([run.path for run in runs]), runs, strict=True):
        config = with_decoding(run.load_config(), beam_size=beam_size, alpha=alpha)
        translator = Translator.from_run(run, config, checkpoint, nbest=config.decode.beam_size)
        models[name] = ServedModel(name, translator, _card(name, translator, [run], checkpoint))
    if ensemble:
        if len(runs) < 2:
            raise ValueError("--ensemble averages several runs; pass two --workdir or more")
        config = with_decoding(runs[0].load_config(), beam_size=beam_size, alpha=alpha)
        translator = Translator.from_run(
            runs[0], config, checkpoint, ensemble_with=runs[1:], nbest=config.decode.beam_size
        )
        models["ensemble"] = ServedModel(
            "ensemble", translator, _card("ensemble", translator, runs, checkpoint)
        )
    return models
