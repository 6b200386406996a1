"""Checkpoint averaging, and choosing which checkpoints to evaluate.

Vaswani et al. 2017 (Section 6.1) evaluate "a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals" (base) and the last 20 (big): the
element-wise mean of the parameters. ``eval.py --checkpoint`` takes ``latest``, ``best`` (the
highest validation BLEU), a step number, or ``average:K``; ``python -m seq2seq.average`` writes
the average as a run of its own.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import jax
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.data.tokenizer import Tokenizer, load_tokenizer
from seq2seq.models import build_model
from seq2seq.run_directory import RunDirectory
from seq2seq.training.checkpoints import Checkpoints

_SPEC_HELP = (
    "use 'latest', 'best' (highest validation BLEU), a step number such as 1000, or 'average:K' "
    "for the last K checkpoints"
)


class CheckpointError(ValueError):
    """The checkpoints asked for are missing or do not fit the model; one line says which."""


@dataclasses.dataclass(frozen=True)
class CheckpointChoice:
    """``steps``: the checkpoints whose parameters are averaged (one step: no averaging)."""

    steps: tuple[int, ...]
    averaged_from: dict | None = None  # the record of a run written by ``seq2seq.average``

    def describe(self) -> str:
        if len(self.steps) > 1:
            return f"average of the last {len(self.steps)}: steps {', '.join(map(str, self.steps))}"
        if self.averaged_from:
            steps = ", ".join(map(str, self.averaged_from["steps"]))
            source = self.averaged_from["workdir"]
            return f"step {self.steps[0]}, the average of steps {steps} of {source}"
        return f"step {self.steps[0]}"


def average_count(spec: str) -> int | None:
    """K of ``average:K`` (K >= 1); None for any other spec."""
    match = re.fullmatch(r"average:([1-9][0-9]*)", spec.strip())
    return int(match.group(1)) if match else None


def choose_checkpoints(
    spec: str, available: Sequence[int], workdir: Path, *, keep: int | None = None
) -> CheckpointChoice:
    """Resolves ``latest`` | ``best`` | ``STEP`` | ``average:K`` against the steps saved in
    ``workdir`` (``best``: see ``best_validated_step``).

    ``keep``: the run's ``checkpoint.keep``. A run keeps its newest ``keep`` checkpoints plus its
    best validated one, which may be much older: ``average:K`` averages the newest K only.
    """
    available = sorted(available)
    run = RunDirectory(workdir)
    record = run.averaged_from_file
    averaged_from = json.loads(record.read_text()) if record.exists() else None
    if not available:
        raise CheckpointError(f"no checkpoint in {run.checkpoints_dir}; train first")
    spec = spec.strip()
    if spec == "latest":
        return CheckpointChoice((available[-1],), averaged_from)
    if spec == "best":
        return CheckpointChoice((best_validated_step(run, available),), averaged_from)
    if spec.isdigit():
        if int(spec) not in available:
            raise CheckpointError(
                f"no checkpoint at step {spec} in {workdir}; saved steps: "
                f"{', '.join(map(str, available))}"
            )
        return CheckpointChoice((int(spec),), averaged_from)
    count = average_count(spec)
    if count is None:
        raise CheckpointError(f"--checkpoint={spec!r} is not understood; {_SPEC_HELP}")
    newest = available[-keep:] if keep else available
    if count > len(newest):
        raise CheckpointError(
            f"--checkpoint=average:{count} needs the last {count} checkpoints but {workdir} holds "
            f"{len(newest)} (steps {', '.join(map(str, newest))}); lower K or raise "
            "config.checkpoint.keep when training"
        )
    return CheckpointChoice(tuple(newest[-count:]))


def best_validated_step(run: RunDirectory, available: Sequence[int]) -> int:
    """The saved step whose validation record (``metrics.jsonl``) has the highest BLEU.

    Ties go to the later step. The trainer checkpoints every step it validates and always keeps
    the one with the best BLEU, so this is the run's best validated step; a run trained without
    validation has no record to choose by.

    Raises:
      CheckpointError: no saved step has a validation record.
    """
    scores = {
        record["step"]: record["bleu"]
        for record in run.read_metrics()
        if record.get("kind") == "validation" and "bleu" in record
    }
    scored = [step for step in available if step in scores]
    if not scored:
        raise CheckpointError(
            f"--checkpoint=best: no saved checkpoint of {run.path} has a validation BLEU record "
            f"(saved steps: {', '.join(map(str, available))}); use 'latest' or a step number"
        )
    return max(scored, key=lambda step: (scores[step], step))


def load_run_tokenizer(run: RunDirectory) -> Tokenizer:
    """The tokenizer a run trained with."""
    tokenizer = load_tokenizer(run.tokenizer_dir)
    if tokenizer is None:
        raise FileNotFoundError(f"no tokenizer in {run.tokenizer_dir}; train first")
    return tokenizer


def abstract_model(config: ml_collections.ConfigDict, tokenizer: Tokenizer):
    """The model's graphdef and its parameters' shapes, without allocating them."""
    abstract = nnx.eval_shape(
        lambda: build_model(
            config, tokenizer.source_vocab_size, tokenizer.target_vocab_size, seed=config.seed
        )
    )
    graphdef, params = nnx.split(abstract)
    return graphdef, params


def restore_params(checkpoints: Checkpoints, abstract_params, choice: CheckpointChoice):
    """The parameters of the chosen checkpoint, or the element-wise mean of several.

    Only parameters are read (no optimizer state), one checkpoint at a time, summed in float32:
    memory holds two copies of the parameters whatever K is. A checkpoint that does not fit
    ``abstract_params`` raises ``IncompatibleCheckpointError`` (one line naming the parameter).
    """
    total = None
    for step in choice.steps:
        params = checkpoints.restore_params(abstract_params, step)
        params32 = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
        total = params32 if total is None else jax.tree.map(np.add, total, params32)
    mean = jax.tree.map(lambda x: x / len(choice.steps), total)
    return jax.tree.map(lambda x, like: np.asarray(x, like.dtype), mean, abstract_params)


def write_averaged_run(workdir: Path, count: int, output: Path) -> dict[str, object]:
    """Writes the mean of ``workdir``'s last ``count`` checkpoints as a run in ``output``.

    ``output`` gets the config, the tokenizer and one checkpoint holding the averaged
    parameters (numbered as the newest one averaged; its optimizer state, RNG and data position
    are the newest one's, so the copy could even be trained further), so
    ``eval.py --workdir OUTPUT`` reads it like any run; ``averaged_from.json`` records where it
    came from, and the source's ``provenance.json`` (the code and environment that trained
    those parameters) is copied along, so a comparison flags an averaged run as it would its
    source.
    """
    source_run = RunDirectory(workdir).require()
    output_run = RunDirectory(output)
    if output.exists() and any(output.iterdir()):
        raise ValueError(f"{output} exists and is not empty; choose a new --output")
    config = source_run.load_config()
    tokenizer = load_run_tokenizer(source_run)
    template, _ = _training_state(config, tokenizer)
    source = Checkpoints(source_run.checkpoints_dir, keep=config.checkpoint.keep)
    try:
        choice = choose_checkpoints(
            f"average:{count}", source.all_steps(), workdir, keep=source.keep
        )
        mean = restore_params(source, template.params, choice)
        state, record = source.restore(template, choice.steps[-1])
    finally:
        source.close()
    output_run.create()
    shutil.copy(source_run.config_file, output_run.config_file)
    shutil.copytree(source_run.tokenizer_dir, output_run.tokenizer_dir)
    if source_run.provenance_file.exists():
        shutil.copy(source_run.provenance_file, output_run.provenance_file)
    target = Checkpoints(output_run.checkpoints_dir, keep=1)
    try:
        target.save(choice.steps[-1], state.replace(params=mean), record["iterator"])
        target.wait()
    finally:
        target.close()
    averaged_from = {"workdir": str(workdir.absolute()), "steps": list(choice.steps)}
    output_run.averaged_from_file.write_text(json.dumps(averaged_from, indent=2) + "\n")
    return {**averaged_from, "output": str(output)}


def _training_state(config: ml_collections.ConfigDict, tokenizer: Tokenizer):
    """A full train state to restore into: an averaged run is a run that could train on."""
    from seq2seq.training.trainer import create_state  # only writing a run needs the optimizer

    return create_state(config, tokenizer.source_vocab_size, tokenizer.target_vocab_size)
