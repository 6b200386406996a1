"""Translate and score a split with a trained model, or translate any file.

    python eval.py --workdir runs/qs_transformer [--split test|validation|STEM] [--beam_size 4]
                   [--alpha 0.6] [--checkpoint latest|best|STEP|average:K]
    python eval.py --workdir runs/qs_transformer --input FILE --output FILE [--reference FILE]
    python eval.py --workdir runs/qs_transformer --input -      # stdin to stdout, a batch at a time
    python eval.py --workdir runs/a --workdir runs/b ...      # an ensemble (one target vocabulary)
    ... --batch_size 256                                      # sentences searched together
    ... --nbest K                                             # the K best of the beam, with scores
    ... --sampling topk:10|topp:0.9 [--temperature 1.0] [--seed 0]   # sampled, reproducibly
    ... --input FILE --output FILE --attention DIR            # and each line's attention, drawn

Prints sacreBLEU (detokenized, cased, with its signature), chrF and the papers' tokenized BLEU,
and writes WORKDIR/eval/SPLIT.hyp.txt and WORKDIR/eval/SPLIT.json (eval/SPLIT@best.json,
eval/SPLIT@average5.json, eval/SPLIT@step1500.json under the other checkpoint rules, so that no
rule overwrites another's scores; ensembles and samples are filed under labels of their own).
The last line printed is one JSON object: bleu, signature, chrf, tok_bleu, n,
bleu_by_source_length, ..., decode_seconds (wall time), compile_seconds (the part of it spent
tracing and compiling search loops for new shapes) and sentences_per_second (over the rest);
the file also holds the provenance of the run and of this evaluation. A run with word
vocabularies (RNNsearch-50's shortlists) also gets bleu_no_unk: sacreBLEU on the n_no_unk
sentences with no unknown word in source or reference, Bahdanau et al.'s second column.

``--nbest K`` writes K lines per sentence, ``INDEX<TAB>SCORE<TAB>TRANSLATION`` (INDEX the 0-based
input line, SCORE ``log P / lp``, best first; the first is the beam's output). With ``--input -``
translations go to standard output as each batch is ready, in input order, and the report to
standard error. An empty or whitespace-only input line is not translated: its output line is
empty (and it has no n-best lines).
"""

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json
import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import ml_collections
from absl import flags

from seq2seq import cli
from seq2seq import config as config_lib
from seq2seq.checkpoints.rule import rules_help
from seq2seq.data.sources import corpus_fingerprint, resolve_split
from seq2seq.records.run_directory import RunDirectory, owning_run
from seq2seq.serve.names import model_names

# Decoding and scoring (JAX, flax, sacreBLEU) are imported where they are used, once the flags,
# the files and the run are checked: a refused command ends in a fraction of a second.
if TYPE_CHECKING:
    from seq2seq.evaluation.translator import LineTranslator, Sampling

ENGINES = ("jax", "ctranslate2")
MAX_ATTENTION_LINES = 100  # --attention draws a figure a line: a whole test set is a mistake

_WORKDIR = flags.DEFINE_multi_string(
    "workdir",
    None,
    "Training work directory to evaluate; repeat it to decode with an ensemble of the runs (the "
    "first run's decoding settings and scores' home).",
)
_SPLIT = flags.DEFINE_string(
    "split",
    None,
    "Split to translate: train, validation or test (the config's), or a split name or file "
    "stem such as test_2016_flickr (default: test).",
)
_MAX_SENTENCES = flags.DEFINE_integer(
    "max_sentences",
    None,
    "Translate and score only the split's first N pairs (a quick look); filed as "
    "SPLIT[@RULE]-firstN, so never taken for the whole split's scores.",
)
_DATA_DIR = flags.DEFINE_string(
    "data_dir",
    None,
    "The folder that holds the run's corpus now, if it moved since training (default: the "
    "config's data.dir), or another corpus with the split's files, whose scores are filed as "
    "eval/SPLIT-corpus-FOLDER.json. The run's config is left as it is.",
)
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", rules_help())
_BEAM_SIZE = flags.DEFINE_integer(
    "beam_size", None, "Beam width (default: the config's); 1: greedy."
)
_ALPHA = flags.DEFINE_float("alpha", None, "Length-penalty exponent (default: the config's).")
_INPUT = flags.DEFINE_string(
    "input", None, "Translate this file (one sentence per line); '-': standard input."
)
_OUTPUT = flags.DEFINE_string(
    "output", None, "Where --input's translations go ('-' or none with --input -: stdout)."
)
_NBEST = flags.DEFINE_integer("nbest", None, "Write the K best outputs of the beam, with scores.")
_SAMPLING = flags.DEFINE_string(
    "sampling", None, "Sample instead of searching: topk:K or topp:P (back-translation)."
)
_TEMPERATURE = flags.DEFINE_float("temperature", None, "Sampling temperature T > 0 (default 1).")
_SEED = flags.DEFINE_integer(
    "seed", None, "Sampling seed (default 0); same seed, same samples.", lower_bound=0
)
_ENGINE = flags.DEFINE_string(
    "engine", "jax", f"Decoding engine: {', '.join(ENGINES)} (a Transformer exported on the fly)."
)
_QUANTIZATION = flags.DEFINE_string(
    "quantization", None, "ctranslate2: float32 (default), int16 or int8 weights."
)
_EXPORTED = flags.DEFINE_string(
    "exported", None, "ctranslate2: a directory written by python -m seq2seq.export."
)
_REFERENCE = flags.DEFINE_string("reference", None, "Optional references to score --input with.")
_BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", None, "Sentences searched together (default: the run's eval.batch_size)."
)
_ATTENTION = flags.DEFINE_string(
    "attention",
    None,
    "With --input FILE: draw the cross-attention behind each line's translation into this "
    "folder, as lineN.png (N the input line; RNNsearch's alignment, or the Transformer's layers "
    f"and heads); at most {MAX_ATTENTION_LINES} lines.",
)


def _sampling() -> "Sampling | None":
    """The --sampling settings, or None; every inconsistency is one line."""
    if _SAMPLING.value is None:
        for flag in (_TEMPERATURE, _SEED):
            if flag.value is not None:
                raise ValueError(f"--{flag.name} applies to sampling; add --sampling topk:K|topp:P")
        return None
    for flag in (_BEAM_SIZE, _ALPHA):  # taken silently, and shown as the decoding's
        if flag.value is not None:
            raise ValueError(
                f"--{flag.name} applies to beam search; --sampling draws one translation a "
                "sentence, with no beam or length penalty: drop one of them"
            )
    temperature = 1.0 if _TEMPERATURE.value is None else _TEMPERATURE.value
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"--temperature {temperature} must be a finite number > 0")
    from seq2seq.decoding.sampling_method import SamplingMethod

    method = SamplingMethod.parse(_SAMPLING.value)  # refused before JAX loads
    from seq2seq.evaluation.translator import Sampling

    return Sampling(method, temperature, _SEED.value or 0)


def _check_options() -> None:
    for flag in (_INPUT, _OUTPUT, _REFERENCE, _ATTENTION, _SPLIT, _DATA_DIR, _EXPORTED):
        if flag.value is not None and not flag.value.strip():
            raise ValueError(f"--{flag.name} is empty; name what it takes (see --help) or drop it")
    if _ENGINE.value not in ENGINES:
        raise ValueError(f"unknown --engine {_ENGINE.value!r}; choose one of {', '.join(ENGINES)}")
    if _EXPORTED.value and _ENGINE.value != "ctranslate2":
        raise ValueError("--exported is a CTranslate2 model; add --engine ctranslate2")
    if not _WORKDIR.value and not (_EXPORTED.value and _INPUT.value):
        raise ValueError("pass --workdir RUN (or --engine ctranslate2 --exported DIR --input ...)")
    if len(_WORKDIR.value or []) > 1:
        model_names(_WORKDIR.value)  # an ensemble of one run twice is refused, as serve does
    if _ENGINE.value == "ctranslate2":
        if len(_WORKDIR.value or []) > 1 or _SAMPLING.value:
            raise ValueError(
                "--engine ctranslate2 decodes one model by beam search; ensembles and sampling "
                "use --engine jax"
            )
        if _QUANTIZATION.value and _EXPORTED.value:
            raise ValueError("--exported DIR was quantized when exported; drop --quantization")
    elif _QUANTIZATION.value:
        raise ValueError("--quantization applies to --engine ctranslate2")
    if _DATA_DIR.value is not None:
        if _INPUT.value:
            raise ValueError("--data_dir is where a split is read from; --input reads no split")
        if not Path(_DATA_DIR.value).is_dir():
            raise ValueError(
                f"--data_dir {_DATA_DIR.value} is not a folder; name the folder that holds the "
                "corpus's files"
            )
    if _MAX_SENTENCES.value is not None:
        if _INPUT.value:
            raise ValueError(
                "--max_sentences takes the first N pairs of a split; --input translates a whole "
                "file: drop one of them"
            )
        if _MAX_SENTENCES.value < 1:
            raise ValueError(f"--max_sentences {_MAX_SENTENCES.value} must be at least 1")
    if _BATCH_SIZE.value is not None and _BATCH_SIZE.value < 1:
        raise ValueError(f"--batch_size {_BATCH_SIZE.value} must be at least 1 (sentences a batch)")
    cli.check_decoding_flags(_BEAM_SIZE.value, _ALPHA.value)
    if _NBEST.value is not None and _NBEST.value < 1:
        raise ValueError(f"--nbest {_NBEST.value} must be at least 1 (K outputs per sentence)")
    if _NBEST.value is not None and not _INPUT.value:
        raise ValueError("--nbest writes K lines per sentence; pass --input FILE|- with it")
    if _ATTENTION.value is not None:
        _check_attention_flags()
    if _INPUT.value == "-":
        if _REFERENCE.value:
            raise ValueError("--reference scores a file; pass --input FILE --output FILE with it")
        return
    if (_INPUT.value is None) != (_OUTPUT.value is None):
        raise ValueError("--input and --output go together: pass both to translate a file")
    if _REFERENCE.value and not _INPUT.value:
        raise ValueError("--reference scores --input; pass --input and --output with it")
    for flag in (_INPUT, _REFERENCE):  # before any model is loaded
        if flag.value and not Path(flag.value).is_file():
            raise FileNotFoundError(f"no {flag.name} file at {flag.value}")
    if _OUTPUT.value not in (None, "-"):
        _check_output(Path(_OUTPUT.value))
    if _ATTENTION.value is not None:
        _check_attention_folder(Path(_ATTENTION.value))


def _check_attention_flags() -> None:
    """--attention draws one model's attention on the translations of a file."""
    if not _INPUT.value or _INPUT.value == "-" or _OUTPUT.value in (None, "-"):
        raise ValueError(
            "--attention draws the lines of a file; pass --input FILE --output FILE with it"
        )
    if _ENGINE.value != "jax" or len(_WORKDIR.value or []) > 1 or _SAMPLING.value or _NBEST.value:
        raise ValueError(
            "--attention draws one model's attention as its beam search translates; drop "
            "--engine ctranslate2, a second --workdir, --sampling and --nbest"
        )


def _check_attention_folder(folder: Path) -> None:
    """Refuses an --attention folder that cannot be one, and an input of more lines than are
    worth a figure each, before any model is loaded."""
    with open(_INPUT.value, encoding="utf-8", errors="replace") as given:
        lines = sum(1 for line in given if line.strip())
    if lines > MAX_ATTENTION_LINES:
        raise ValueError(
            f"--attention draws a figure a line, and {_INPUT.value} has {lines} lines, over "
            f"{MAX_ATTENTION_LINES}; pass the lines you want to look at in a shorter file"
        )
    if (folder / "config.json").is_file() or owning_run(folder) is not None:
        raise ValueError(
            f"--attention {folder} is a run's folder or in one; name a folder of its own for the "
            "figures"
        )
    cli.check_work_directory(folder, "--attention", "name a folder for the figures")


def _draw_attention(translator: "LineTranslator", run: RunDirectory, result: dict) -> str:
    """Draws each non-empty input line's attention; returns the line that says where."""
    from seq2seq import progress
    from seq2seq.evaluation.evaluate import read_lines
    from seq2seq.report.figures import attention_of_lines

    pairs = zip(read_lines(Path(_INPUT.value)), read_lines(Path(_OUTPUT.value)), strict=True)
    lines = [(number, s, t) for number, (s, t) in enumerate(pairs, start=1) if s.strip()]
    folder = Path(_ATTENTION.value)
    with progress.bar(len(lines), "line", "drawing attention") as drawn:
        paths = attention_of_lines(
            translator, lines, folder, run.path.name, drawn.update,
            capped=set(result.get("capped_lines", [])),
        )  # fmt: skip
    result["attention"] = {"folder": str(folder), "figures": len(paths)}
    said = f"  attention of {len(paths)} lines drawn in {folder} (lineN.png: input line N)"
    # Figures an earlier --input left there would pass for lines of this one (an empty line
    # draws nothing): the folder holds this input's figures alone.
    stale = [
        path
        for path in folder.glob("line*.png")
        if re.fullmatch(r"line[0-9]+\.png", path.name) and path not in paths
    ]
    for path in stale:
        path.unlink()
    return said + (f"; {len(stale)} figures of another input removed" if stale else "")


def _check_output(output: Path) -> None:
    """Refuses an --output that would overwrite the input or the references, or that cannot
    be a file (a folder, under a file, or where this user may not write), before any model is
    loaded."""
    for flag in (_INPUT, _REFERENCE):
        if flag.value not in (None, "-") and output.resolve() == Path(flag.value).resolve():
            raise ValueError(
                f"--output {output} is the --{flag.name} file; name another file for the "
                "translations"
            )
    if (run := owning_run(output)) is not None:
        raise ValueError(
            f"--output {output} is one of the run {run}'s own files; name a file outside them"
        )
    if output.is_dir():
        raise ValueError(f"--output {output} is a folder; name a file in it")
    if output.exists():
        try:
            output.open("a").close()  # appends nothing: the file is replaced only at the end
        except OSError as error:
            raise ValueError(
                f"--output {output}: cannot write it ({error.strerror}); name another file"
            ) from None
    cli.check_work_directory(output, "--output", "name a file in a folder", file=True)


def _exported_translator(run: RunDirectory | None) -> "LineTranslator":
    """The CTranslate2 translator: --exported DIR, or the run exported to a temporary one."""
    from seq2seq.export.engine import ExportedTranslator
    from seq2seq.export.run import exported_translator

    options = {"beam_size": _BEAM_SIZE.value, "alpha": _ALPHA.value, "nbest": _NBEST.value}
    if _EXPORTED.value:
        return ExportedTranslator(Path(_EXPORTED.value), **options)
    quantization = _QUANTIZATION.value or "float32"
    return exported_translator(run, quantization, _CHECKPOINT.value, **options)


def _translator(
    run: RunDirectory | None,
    config: ml_collections.ConfigDict | None,
    sampling: "Sampling | None",
) -> "LineTranslator":
    """The one translator of this command (a model, an ensemble or a CTranslate2 model), from
    ``run`` and its ``config`` as loaded."""
    from seq2seq.evaluation.translator import Translator, with_decoding

    if _ENGINE.value == "ctranslate2":
        translator = _exported_translator(run)
    else:
        config = with_decoding(config, beam_size=_BEAM_SIZE.value, alpha=_ALPHA.value)
        translator = Translator.from_run(
            run, config, _CHECKPOINT.value, ensemble_with=[Path(p) for p in _WORKDIR.value[1:]],
            nbest=_NBEST.value, sampling=sampling,
        )  # fmt: skip
    if _BATCH_SIZE.value is not None:
        translator.config.eval.batch_size = _BATCH_SIZE.value
    if _DATA_DIR.value is not None:  # a CTranslate2 translator read the run's config itself
        translator.config.data.dir = _DATA_DIR.value
    return translator


def _decoding_variant(config: ml_collections.ConfigDict | None) -> list[str]:
    """``beamK`` and ``alphaA`` where ``--beam_size`` and ``--alpha`` differ from the run's own
    decoding: a split scored so is filed apart, not over the scores of the run's settings (which
    the server's model card and a comparison read)."""
    if config is None:
        return []
    variant = []
    if _BEAM_SIZE.value is not None and _BEAM_SIZE.value != config.decode.beam_size:
        variant.append(f"beam{_BEAM_SIZE.value}")
    if _ALPHA.value is not None and _ALPHA.value != config.decode.alpha:
        variant.append(f"alpha{_ALPHA.value:g}")
    return variant


_STREAM_WRITTEN: list = []  # the stream's count of lines written, once it has started


def _translate_stream(translator) -> None:
    from seq2seq.evaluation.evaluate import decoding_facts
    from seq2seq.evaluation.stream import Written, translate_stream

    written = Written()
    _STREAM_WRITTEN.append(written)
    if _OUTPUT.value in (None, "-"):
        facts = translate_stream(translator, sys.stdin.buffer, sys.stdout, written)
    else:
        with open(_OUTPUT.value, "w", encoding="utf-8") as output:
            facts = translate_stream(translator, sys.stdin.buffer, output, written)
    print(json.dumps({**facts, **decoding_facts(translator)}), file=sys.stderr)


def main(argv: list[str]) -> None:
    del argv
    _check_options()
    sampling = _sampling()  # options, the run and the split are checked before any model loads
    run = RunDirectory(_WORKDIR.value[0]) if _WORKDIR.value else None  # the one opening
    config = run.load_config() if run else None
    if _ATTENTION.value is not None and not config_lib.has_cross_attention(config):
        raise ValueError(
            f"--attention: {run.path} is an encoder-decoder without attention "
            "(model.rnnsearch.attention='none'): it has none to draw"
        )
    variant = _decoding_variant(config)
    if _DATA_DIR.value is not None:  # read from there; the run's config.json is not touched
        if config.data.source == "synthetic":
            raise ValueError(
                "--data_dir: this run's data is the built-in synthetic task, read from no "
                "folder; drop --data_dir, or translate and score files with --input, --output "
                "and --reference"
            )
        config.data.dir = _DATA_DIR.value
        if run.holds_another_corpus(config, corpus_fingerprint):
            variant.append(f"corpus-{Path(_DATA_DIR.value).resolve().name}")  # not the run's
    split = (
        None
        if _INPUT.value
        else resolve_split(config.data, _SPLIT.value or "test", overrides=False)
    )
    from seq2seq.evaluation.evaluate import evaluate, filed_in, format_report, translate_file

    translator = _translator(run, config, sampling)
    if _INPUT.value == "-":
        _translate_stream(translator)
        return
    if _INPUT.value:
        reference = Path(_REFERENCE.value) if _REFERENCE.value else None
        result = translate_file(
            translator, Path(_INPUT.value), Path(_OUTPUT.value), reference_path=reference
        )
        written = f"  translations written to {result['output']}"
        if _ATTENTION.value is not None:
            written += "\n" + _draw_attention(translator, run, result)
    else:
        if _MAX_SENTENCES.value is not None:  # a part of the split: never its whole's name
            variant.append(f"first{_MAX_SENTENCES.value}")
        result = evaluate(
            translator, run, split, filed_as=_CHECKPOINT.value, variant=variant,
            max_sentences=_MAX_SENTENCES.value,
        )  # fmt: skip
        hypotheses, scores = filed_in(translator, run, split, _CHECKPOINT.value, variant)
        written = f"  written to {scores} (the scores and their provenance) and {hypotheses}"
    print(format_report(result))
    print(written)
    # One line for scripts; the provenance (a page of versions and flags) stays in the file.
    print(json.dumps({key: value for key, value in result.items() if key != "provenance"}))


def _interrupted() -> str:
    """Ctrl-C's line: a file or split goes on from its finished pieces; a stream cannot."""
    if _INPUT.value == "-":
        written = _STREAM_WRITTEN[0] if _STREAM_WRITTEN else None
        done, upto = (written.lines, written.upto) if written else (0, 0)
        said = f"the translations of input {_lines(1, done)} were written" if done else ""
        if upto > done:  # a batch's write may have been cut short
            said += " and" if done else "the translations"
            said += f" of {_lines(done + 1, upto)} were being "
            return (
                f"interrupted: {said}written (the output's last line may be cut short); "
                "standard input cannot be resumed, so send it again from the first line the "
                "output lacks"
            )
        return (
            f"interrupted: {said or 'no translation was written'}; standard input cannot be "
            f"resumed, so send it again from line {done + 1:,}"
        )
    return cli.RESUMES


def _lines(first: int, last: int) -> str:
    return f"line {first:,}" if first == last else f"lines {first:,}-{last:,}"


if __name__ == "__main__":
    cli.run(main, interrupted=_interrupted)
