"""A trained model from its run directory: the tokenizer, the chosen checkpoint's parameters.

Evaluation, translation, the comparison and the benchmarks read runs through this module, the
one place of evaluation that opens a run's checkpoints (``seq2seq.checkpoints.store``). Only
parameters are read: no optimizer state is built or restored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jax
import ml_collections
import numpy as np
from flax import nnx

from seq2seq import progress
from seq2seq.checkpoints.rule import CheckpointChoice, CheckpointError, resolve
from seq2seq.checkpoints.store import Checkpoints
from seq2seq.data.tokenizer import Tokenizer, load_tokenizer
from seq2seq.models import build_model
from seq2seq.records.run_directory import RunDirectory


def choose_checkpoints(
    spec: str, available: Sequence[int], workdir: Path | RunDirectory, *, keep: int | None = None
) -> CheckpointChoice:
    """Resolves the checkpoint rule ``spec`` (``seq2seq.checkpoints.rule``) against the steps
    ``available`` in the run at ``workdir``, by its validation records for ``best``."""
    run = RunDirectory.at(workdir)
    if not available:
        raise CheckpointError(run.nothing_to_translate_with())
    validation_bleu = {
        record["step"]: record["bleu"]
        for record in run.read_metrics()
        if record.get("kind") == "validation" and "bleu" in record
    }
    return resolve(
        spec,
        available,
        validation_bleu=validation_bleu,
        where=str(run.path),
        keep=keep,
        averaged_from=run.read_averaged_from(),
    )


def load_run_tokenizer(run: RunDirectory) -> Tokenizer:
    """The tokenizer a run trained with."""
    tokenizer = load_tokenizer(run.tokenizer_dir)
    if tokenizer is None:
        raise FileNotFoundError(run.nothing_to_translate_with())
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
    count = len(choice.steps)  # several: a bar counts them (a big model's take seconds each)
    with progress.bar(count, "checkpoint", "averaging", draw=count > 1) as bar:
        for step in choice.steps:
            params = checkpoints.restore_params(abstract_params, step)
            params32 = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
            total = params32 if total is None else jax.tree.map(np.add, total, params32)
            bar.update(1)
    mean = jax.tree.map(lambda x: x / len(choice.steps), total)
    return jax.tree.map(lambda x, like: np.asarray(x, like.dtype), mean, abstract_params)


def _refuse_without_checkpoints(run: RunDirectory) -> None:
    """A run without a ``checkpoints/`` folder is refused as one with none in it, before
    orbax's manager would create the folder in the run being read."""
    if not run.checkpoints_dir.is_dir():
        raise CheckpointError(run.nothing_to_translate_with())


def checkpoint_choice(
    run: RunDirectory, config: ml_collections.ConfigDict, checkpoint: str = "latest"
) -> CheckpointChoice:
    """The checkpoints the rule ``checkpoint`` picks among those saved in ``run``."""
    _refuse_without_checkpoints(run)
    checkpoints = Checkpoints(run.checkpoints_dir, keep=config.checkpoint.keep)
    try:
        return choose_checkpoints(checkpoint, checkpoints.all_steps(), run, keep=checkpoints.keep)
    finally:
        checkpoints.close()


def restore_parameters(
    run: RunDirectory,
    config: ml_collections.ConfigDict,
    tokenizer: Tokenizer,
    checkpoint: str = "latest",
):
    """A run's graphdef, parameters and ``CheckpointChoice``, its tokenizer already loaded.

    ``config`` is the run's own (``RunDirectory.load_config``), possibly with other decoding
    settings; ``checkpoint`` is a rule of ``seq2seq.checkpoints.rule``.
    """
    graphdef, abstract_params = abstract_model(config, tokenizer)
    _refuse_without_checkpoints(run)
    checkpoints = Checkpoints(run.checkpoints_dir, keep=config.checkpoint.keep)
    try:
        choice = choose_checkpoints(checkpoint, checkpoints.all_steps(), run, keep=checkpoints.keep)
        params = restore_params(checkpoints, abstract_params, choice)
    finally:
        checkpoints.close()
    return graphdef, params, choice


def restore_model(
    workdir: Path | RunDirectory, config: ml_collections.ConfigDict, checkpoint: str = "latest"
):
    """A run's tokenizer, graphdef, parameters and ``CheckpointChoice`` (``restore_parameters``
    after ``load_run_tokenizer``)."""
    run = RunDirectory.at(workdir).require()
    tokenizer = load_run_tokenizer(run)
    return (tokenizer, *restore_parameters(run, config, tokenizer, checkpoint))
