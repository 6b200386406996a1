"""Export a trained Transformer run as a CTranslate2 model directory.

    python -m seq2seq.export --workdir runs/m30k_transformer --output exported/m30k \\
        [--quantization float32|int16|int8] [--checkpoint latest|best|STEP|average:K]
    python eval.py --workdir runs/m30k_transformer --engine ctranslate2 [--quantization int8]
    python eval.py --exported exported/m30k --input my.de --output my.en

The directory holds CTranslate2's ``model.bin`` and vocabularies, the run's ``tokenizer/`` and
``seq2seq.json`` (the decoding settings). RNNsearch runs are refused: CTranslate2 has no such
model.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json
from pathlib import Path

from absl import flags

from seq2seq import cli


def run() -> None:
    workdir = flags.DEFINE_string("workdir", None, "The trained run to export.")
    output = flags.DEFINE_string("output", None, "A new directory for the CTranslate2 model.")
    quantization = flags.DEFINE_string(
        "quantization", "float32", "Weights: float32, int16 or int8 (CTranslate2 quantizes)."
    )
    checkpoint = flags.DEFINE_string(
        "checkpoint", "latest", "'latest', 'best', a step number, or 'average:K'."
    )
    flags.mark_flags_as_required(["workdir", "output"])

    def main(argv: list[str]) -> None:
        del argv
        from seq2seq.export.run import export_run

        result = export_run(
            Path(workdir.value), Path(output.value), quantization.value, checkpoint.value
        )
        print(json.dumps(result))

    cli.run(main)


if __name__ == "__main__":
    run()
