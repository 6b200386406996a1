"""Translate and score a split with a trained model, or translate any file.

    python eval.py --workdir runs/qs_transformer [--split test|validation|STEM] [--beam_size 4]
                   [--alpha 0.6] [--checkpoint latest|best|STEP|average:K]
    python eval.py --workdir runs/qs_transformer --input FILE --output FILE [--reference FILE]

Prints sacreBLEU (detokenized, cased, with its signature), chrF and the papers' tokenized BLEU,
and writes WORKDIR/eval/SPLIT.hyp.txt and WORKDIR/eval/SPLIT.json (eval/SPLIT@best.json,
eval/SPLIT@average5.json, eval/SPLIT@step1500.json under the other checkpoint rules, so that no
rule overwrites another's scores). The last line printed is one JSON object: bleu, signature,
chrf, tok_bleu, n, bleu_by_source_length, ...
"""

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json
from pathlib import Path

from absl import flags

from seq2seq import cli
from seq2seq.checkpoint_rule import rules_help
from seq2seq.evaluation.evaluate import evaluate, format_report, translate_file

_WORKDIR = flags.DEFINE_string("workdir", None, "Training work directory to evaluate.")
_SPLIT = flags.DEFINE_string(
    "split",
    None,
    "Split to translate: train, validation or test (the config's), or a split name or file "
    "stem such as test_2016_flickr (default: test).",
)
_CHECKPOINT = flags.DEFINE_string("checkpoint", "latest", rules_help())
_BEAM_SIZE = flags.DEFINE_integer(
    "beam_size", None, "Beam width (default: the config's); 1: greedy."
)
_ALPHA = flags.DEFINE_float("alpha", None, "Length-penalty exponent (default: the config's).")
_INPUT = flags.DEFINE_string("input", None, "Translate this file (one sentence per line).")
_OUTPUT = flags.DEFINE_string("output", None, "Where --input's translations go.")
_REFERENCE = flags.DEFINE_string("reference", None, "Optional references to score --input with.")
flags.mark_flags_as_required(["workdir"])


def main(argv: list[str]) -> None:
    del argv
    workdir = Path(_WORKDIR.value)
    decode = {"checkpoint": _CHECKPOINT.value, "beam_size": _BEAM_SIZE.value, "alpha": _ALPHA.value}
    if (_INPUT.value is None) != (_OUTPUT.value is None):
        raise ValueError("--input and --output go together: pass both to translate a file")
    if _REFERENCE.value and not _INPUT.value:
        raise ValueError("--reference scores --input; pass --input and --output with it")
    if _INPUT.value:
        reference = Path(_REFERENCE.value) if _REFERENCE.value else None
        result = translate_file(
            workdir, Path(_INPUT.value), Path(_OUTPUT.value), reference_path=reference, **decode
        )
    else:
        result = evaluate(workdir, _SPLIT.value, **decode)
    print(format_report(result))
    print(json.dumps(result))


if __name__ == "__main__":
    cli.run(main)
