"""Train a model from a config.

    python train.py --config configs/quickstart_transformer.py --workdir runs/qs_transformer \\
        [--config.train.steps=2000 ...]

Restarting with the same --workdir resumes from its latest checkpoint. SIGTERM or Ctrl-C saves a
checkpoint of the last step and exits with status 143 (a second Ctrl-C stops at once); rerun the
same command to continue.
"""

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import math
import sys
from pathlib import Path

from absl import flags
from ml_collections import config_flags

from seq2seq import cli
from seq2seq.config import validate
from seq2seq.records.run_directory import RunDirectory

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).")
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, logs and the tokenizer."
)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
    del argv
    workdir = cli.check_work_directory(Path(_WORKDIR.value))
    RunDirectory(workdir).check_free()
    config = validate(_CONFIG.value)
    RunDirectory(workdir).check_budget_reaches(config.train.steps)
    # Imported once the flags, the config and the work directory are checked: a refused
    # command line never waits for JAX and flax.
    from seq2seq.evaluation.validation import make_validate_fn
    from seq2seq.training.trainer import train

    summary = train(config, workdir, make_validate_fn)
    if summary.preempted:  # the trainer has said what stopped it and which step it saved
        sys.exit(143)
    if math.isnan(summary.final_loss):  # no step taken: the run had ended before this start
        if summary.stop_reason == "converged":
            print(f"nothing to train: early stopping ended the run here at step {summary.step}")
        else:
            print(
                f"nothing to train: the run here had already trained to step {summary.step}, "
                "its budget; raise --config.train.steps (or train.time_budget_minutes) to go on"
            )
        return
    print(
        f"trained to step {summary.step}, last step's loss {summary.final_loss:.4f}, "
        f"{summary.seconds:.0f} s"
    )


if __name__ == "__main__":
    cli.run(main)
