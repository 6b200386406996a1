"""Where training metrics go: metrics.jsonl, TensorBoard, and the terminal."""

from __future__ import annotations

import json
import logging
import math
import time

import ml_collections
import numpy as np
from tensorboardX import SummaryWriter
from tensorboardX.summary import hparams as hparams_summaries

from seq2seq.config import flatten
from seq2seq.progress import duration
from seq2seq.records.run_directory import RunDirectory, complete_lines
from seq2seq.records.whole import write_whole
from seq2seq.training.stopping import EarlyStopping

logger = logging.getLogger(__name__)

# Where the host's time goes in each step, logged per step as ``host_<part>_ms`` (means over a
# log interval), as the trainer's loop times them: the next batch from the input pipeline,
# waiting for the step ``IN_FLIGHT`` before (the device's time, not the host's), placing the
# batch on the devices, and the step's dispatch (steps that compile a new shape left out). With
# steps in flight the host keeps the device busy while input + placing + dispatch stay under a
# step's time; waiting near zero with those adding up to ``step_seconds`` means the host, not
# the device, sets the pace.
HOST_PARTS = ("input", "waiting", "placing", "dispatch")


def interval_record(step_metrics: list[dict], seconds: float, devices: int) -> dict:
    """One logged line: the logged step's own loss, and means over the interval since the last.

    ``loss`` and ``nll`` are the last step's values, so a resumed run logs exactly the same
    numbers as an uninterrupted one; the ``*_mean`` fields smooth over the interval, and
    ``source_tokens`` and ``target_tokens`` are the real (non-padding) tokens of a step's batch,
    on average over the interval. ``flops_per_second_per_device`` is the analytic training
    FLOPs of the interval's steps per second of training, shared by ``devices``: what a
    model-FLOPs utilisation divides by one device's peak.
    """
    tokens = np.array([m["target_tokens"] for m in step_metrics], np.float64)
    weights = tokens / max(tokens.sum(), 1.0)
    flops = sum(float(m["train_flops"]) for m in step_metrics)
    seconds = max(seconds, 1e-9)
    last = step_metrics[-1]
    return {
        "loss": float(last["loss"]),
        "nll": float(last["nll"]),
        "loss_mean": float(np.dot(weights, [m["loss"] for m in step_metrics])),
        "nll_mean": float(np.dot(weights, [m["nll"] for m in step_metrics])),
        "learning_rate": float(last["learning_rate"]),
        "grad_norm": float(last["grad_norm"]),
        "source_tokens": float(np.mean([m["source_tokens"] for m in step_metrics])),
        "target_tokens": float(tokens.mean()),
        "target_tokens_per_second": float(tokens.sum() / seconds),
        "flops_per_second_per_device": flops / seconds / devices,
        "step_seconds": seconds / len(step_metrics),
        "padding_share": float(np.mean([m["padding_share"] for m in step_metrics])),
    }


def steady_means(train_records: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
    """The mean of each of ``keys`` over a run's log lines after the first (whose interval holds
    the first compile), each line weighted by the steps it covers; a key no line has is left
    out. With one line, that line's values."""
    steps = [record["step"] for record in train_records]
    counts = [step - previous for step, previous in zip(steps, [0, *steps], strict=False)]
    lines = list(zip(train_records, counts, strict=True))
    steady = lines[1:] or lines
    means = {}
    for key in keys:
        weighted = [(record[key], steps) for record, steps in steady if key in record]
        if weighted:
            means[key] = sum(v * n for v, n in weighted) / sum(n for _, n in weighted)
    return means


def hyperparameters(config: ml_collections.ConfigDict) -> dict[str, bool | int | float | str]:
    """What TensorBoard's HParams dashboard lists for a run: the seed, the model's family and its
    own section (``model.transformer.*`` or ``model.rnnsearch.*``), and every ``train.*`` and
    ``data.*`` value, by their config keys (lists and unset values left out)."""
    kept = ("seed", "model.name", f"model.{config.model.name}.", "train.", "data.")
    return {
        key: value
        for key, value in flatten(config)
        if key.startswith(kept) and isinstance(value, bool | int | float | str)
    }


class MetricsWriter:
    """Appends JSON lines to metrics.jsonl (full-precision floats) and mirrors to TensorBoard.

    With ``config``, each start also tells TensorBoard's HParams dashboard the run's
    ``hyperparameters``, so the runs of a comparison or a tuning grid (``make tensorboard``)
    sit in one table beside their validation BLEU and loss, and in its parallel-coordinates
    view. No experiment summary is written: TensorBoard builds one from all the runs it finds,
    each family's keys included, and offers every logged scalar as a metric.

    ``active=False`` writes nothing: every process of a multi-process run logs the same
    (global) metrics, and process 0 alone writes them.
    """

    def __init__(
        self,
        run: RunDirectory,
        resume_step: int,
        active: bool = True,
        config: ml_collections.ConfigDict | None = None,
    ):
        self.active = active
        if not active:
            return
        self.path = run.metrics_file
        self._drop_records_after(resume_step)
        self.file = self.path.open("a")
        # tensorboardX's thread writes the events within a second of each line, not two minutes:
        # a run stopped at once (a second Ctrl-C, SIGKILL, a lost machine) that never closes
        # this loses no more than metrics.jsonl does (its flush is not a wait for that thread).
        self.tensorboard = SummaryWriter(str(run.tensorboard_dir), flush_secs=1)
        if config is not None:  # the session's start: its hyperparameters (a resume repeats it)
            _, session_start, _ = hparams_summaries(hyperparameters(config), {})
            self.tensorboard.file_writer.add_summary(session_start)

    def _drop_records_after(self, step: int) -> None:
        """A restarted run repeats the steps after its checkpoint: forget their old lines."""
        if not self.path.exists():
            return
        text = self.path.read_text()
        lines = complete_lines(text)  # less a last line a crash cut short
        kept = "".join(
            line + "\n" for line in lines if line and json.loads(line).get("step", 0) <= step
        )
        if kept != text:  # whole or not at all: a cut rewrite would lose the run's history
            write_whole(self.path, kept)

    def recorded(self, kind: str, step: int) -> bool:
        """Whether metrics.jsonl holds a record of ``kind`` ("validation", "stop") at ``step``;
        always true where this process writes nothing. A run stopped by a signal after its
        last step but before its final validation and stop record lacks them: the next start,
        with nothing left to train, writes them."""
        if not self.active or not self.path.exists():
            return not self.active
        records = [json.loads(line) for line in self.path.read_text().splitlines() if line]
        return any(r.get("kind") == kind and r.get("step") == step for r in records)

    def write(self, step: int, record: dict, prefix: str = "train") -> None:
        if not self.active:
            return
        # ``time``: when the line was written (Unix seconds), so that runs which shared a device
        # can be laid on one clock (``seq2seq.compare.sharing``); not a TensorBoard scalar.
        self.file.write(json.dumps({"step": step, "time": round(time.time(), 3), **record}) + "\n")
        self.file.flush()
        for key, value in record.items():
            if isinstance(value, int | float) and math.isfinite(value):
                self.tensorboard.add_scalar(f"{prefix}/{key}", value, step)

    def write_text(self, step: int, tag: str, text: str) -> None:
        if self.active:
            self.tensorboard.add_text(tag, text, step)

    def close(self) -> None:
        if not self.active:
            return
        self.file.close()
        self.tensorboard.close()


def seconds_to_go(
    step: int, steps: int, step_seconds: float, elapsed: float, budget: float
) -> float:
    """Training seconds until the run ends as foreseen after ``step``: its ``steps - step`` steps
    left at ``step_seconds`` each, or what ``elapsed`` leaves of ``budget`` seconds (inf: no
    budget), whichever comes first. Validation, compiling and checkpoints are not counted, and
    early stopping may end the run sooner."""
    return max(0.0, min((steps - step) * step_seconds, budget - elapsed))


def short_line(step: int, record: dict, steps: int, to_go: float) -> str:
    """A plain progress line for logs without a terminal (CI, ``nohup``): where the run is out of
    its ``steps``, the training time ``to_go`` (seconds_to_go), and the interval's figures."""
    return (
        f"step {step}/{steps} ({step / steps:.0%}, {duration(to_go)} of training to go): "
        f"mean loss {record['loss_mean']:.4f}, lr {record['learning_rate']:.2e}, "
        f"{record['target_tokens_per_second']:.0f} target tokens/s, "
        f"{record['flops_per_second_per_device'] / 1e12:.3g} TFLOP/s per device"
    )


def validation_line(step: int, metrics: dict, stopping: EarlyStopping) -> str:
    """A validation point as a person reads it: BLEU (greedy), loss and perplexity, the best
    point so far where this is not it, and early stopping's count where it is on."""
    sentences = f" ({metrics['n']} sentences)" if "n" in metrics else ""
    shown = (
        ("bleu", "greedy BLEU", ".2f"),
        ("loss", "loss", ".4f"),
        ("perplexity", "perplexity", ".2f"),
    )
    figures = [f"{name} {metrics[key]:{digits}}" for key, name, digits in shown if key in metrics]
    line = f"validation at step {step}{sentences}: " + ", ".join(figures)
    if "bleu" in metrics and stopping.best_step != step:
        line += f"; best {stopping.best:.2f} at step {stopping.best_step}"
    if stopping.patience:
        line += (
            f"; {stopping.since_best} of {stopping.patience} points without a new best "
            "(early stopping)"
        )
    return line


def sample_line(sample: str, width: int = 160) -> str:
    """A validation sample (source, reference and output on lines of their own) on one log line,
    each part cut to ``width`` characters with a visible ``...``, so that a long source cannot
    hide the output."""
    return " | ".join(
        part if len(part) <= width else part[: width - 4] + " ..." for part in sample.splitlines()
    )
