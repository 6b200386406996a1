"""Translate and score a split with a trained model.

    python eval.py --workdir runs/qs_transformer [--split test]

The last line printed is one JSON object: bleu, signature, n, ...
"""

import json
from pathlib import Path

from absl import app, flags

from seq2seq import cli
from seq2seq.evaluation.evaluate import evaluate

_WORKDIR = flags.DEFINE_string("workdir", None, "Training work directory to evaluate.")
_SPLIT = flags.DEFINE_string("split", None, "Split to translate (default: the config's test).")
flags.mark_flags_as_required(["workdir"])


@cli.exit_on_error
def main(argv: list[str]) -> None:
    del argv
    print(json.dumps(evaluate(Path(_WORKDIR.value), _SPLIT.value)))


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
