"""Average the last K checkpoints of a run into a new run directory (Vaswani et al. 2017, §6.1).

    python -m seq2seq.evaluation.average --workdir runs/base --last 5 --output runs/base_avg5
    python eval.py --workdir runs/base_avg5

(``python eval.py --workdir runs/base --checkpoint average:5`` scores the same average without
writing it.) The last line printed is one JSON object: workdir, steps, output.
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
    """``python -m seq2seq.evaluation.average``: flags are defined here, never on import."""
    workdir = flags.DEFINE_string("workdir", None, "Training work directory to average.")
    last = flags.DEFINE_integer("last", 5, "How many of the newest checkpoints.", lower_bound=1)
    output = flags.DEFINE_string("output", None, "New directory for the averaged run.")
    flags.mark_flags_as_required(["workdir", "output"])

    def main(argv: list[str]) -> None:
        del argv
        cli.check_work_directory(Path(output.value), "--output", "name a new directory")
        from seq2seq.evaluation.averaging import write_averaged_run  # JAX: after the flags

        result = write_averaged_run(Path(workdir.value), last.value, Path(output.value))
        print(json.dumps(result))

    cli.run(main)


if __name__ == "__main__":
    run()
