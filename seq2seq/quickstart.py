"""The quickstart: train and evaluate both models on the synthetic task, then compare them.

    python -m seq2seq.quickstart --workdir runs/quickstart     (what ``make quickstart`` runs)

Each model trains for a few minutes on 2 CPU cores; the table shows test BLEU, parameter counts
and wall time. Re-running resumes (or reuses) the finished runs in the work directory.
"""

from __future__ import annotations

import time
from pathlib import Path

from absl import app, flags

from seq2seq import cli
from seq2seq.config import load_config_file
from seq2seq.evaluation.evaluate import evaluate
from seq2seq.evaluation.validation import make_validate_fn
from seq2seq.training.trainer import train

CONFIGS = {
    "transformer": "configs/quickstart_transformer.py",
    "rnnsearch": "configs/quickstart_rnnsearch.py",
}


def run_one(name: str, config_path: str, workdir: Path) -> dict:
    """Trains, then evaluates on the test split; returns one row of the comparison."""
    print(f"== {name}: training ({config_path})", flush=True)
    start = time.monotonic()
    summary = train(load_config_file(config_path), workdir, make_validate_fn)
    train_seconds = time.monotonic() - start
    print(f"== {name}: decoding the test split", flush=True)
    result = evaluate(workdir)
    return {
        "model": name,
        "bleu": result["bleu"],
        "params": summary.params,
        "steps": summary.step,
        "train_seconds": train_seconds,
        "eval_seconds": result["decode_seconds"],
        "beam_size": result["beam_size"],
    }


def format_table(rows: list[dict]) -> str:
    """A plain-text comparison table."""
    header = (
        f"{'model':<12} {'test BLEU':>9} {'params':>10} {'steps':>6} {'train s':>8} {'eval s':>7}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['model']:<12} {row['bleu']:>9.2f} {row['params']:>10,} {row['steps']:>6} "
            f"{row['train_seconds']:>8.0f} {row['eval_seconds']:>7.0f}"
        )
    return "\n".join(lines)


def run() -> None:
    """``python -m seq2seq.quickstart``: flags are defined here, never on import."""
    workdir = flags.DEFINE_string("workdir", "runs/quickstart", "Parent directory of both runs.")

    @cli.exit_on_error
    def main(argv: list[str]) -> None:
        del argv
        root = Path(workdir.value)
        rows = [run_one(name, path, root / name) for name, path in CONFIGS.items()]
        beams = ", ".join(sorted({f"beam {row['beam_size']}" for row in rows}))
        print(f"\nSynthetic task, test split (sacreBLEU, {beams}):")
        print(format_table(rows))

    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    run()
