"""The training loop: a short sequence of named helpers around the pure ``train_step``.

It never loses work: it resumes from the work directory's latest checkpoint (falling back to an
older one if the latest is unreadable), saves on SIGTERM before exiting, refuses a work directory
that holds a run of another shape, and stops on a NaN loss before that loss reaches a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import ml_collections
import numpy as np
from tqdm import tqdm

from seq2seq import config as config_lib
from seq2seq.data.pipeline import build_training_data, padding_share
from seq2seq.models import build_model
from seq2seq.training import sharding
from seq2seq.training.checkpoints import Checkpoints
from seq2seq.training.logs import MetricsWriter, interval_record, short_line
from seq2seq.training.schedules import build_optimizer, build_schedule
from seq2seq.training.step import TrainState, train_step

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
# Keys a work directory may not change between runs: they fix the parameters' shapes, or the
# stream of batches whose saved position a resumed run continues from.
RUN_IDENTITY_KEYS = (
    "seed",
    "model",
    "data.vocab_size",
    "data.tokenizer",
    "data.shared_vocab",
    "data.source",
    "data.synthetic_lengths",
    "data.synthetic_min_words",
    "data.synthetic_max_words",
    "data.name",
    "data.dir",
    "data.src_lang",
    "data.tgt_lang",
    "data.train_split",
    "data.max_train_examples",
    "data.max_length",
    "data.max_length_ratio",
    "data.tokens_per_batch",
    "data.sentences_per_batch",
    "data.bucket_width",
    "data.pack",
)

ValidateFn = Callable[[TrainState], dict]
# Builds a ValidateFn once the tokenizer and model structure exist: (config, tokenizer, graphdef).
MakeValidateFn = Callable[..., ValidateFn]


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says where and why."""


@dataclasses.dataclass
class RunSummary:
    step: int
    final_loss: float
    seconds: float
    params: int
    preempted: bool = False


def model_width(config: ml_collections.ConfigDict) -> int:
    """The width that scales the Transformer schedule (d_model, or the RNN decoder's state)."""
    if config.model.name == "transformer":
        return config.model.transformer.d_model
    return config.model.rnnsearch.decoder_hidden_size


def count_params(params) -> int:
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))


def create_state(config: ml_collections.ConfigDict, source_vocab: int, target_vocab: int):
    """A fresh train state and the schedule its optimizer follows."""
    model = build_model(config, source_vocab, target_vocab, seed=config.seed)
    schedule = build_schedule(config.train, model_width(config))
    return TrainState.create(model, build_optimizer(config.train, schedule), config.seed), schedule


def save_config(config: ml_collections.ConfigDict, workdir: Path) -> None:
    """Records the config; refuses one that changes the identity of the run in ``workdir``."""
    path = workdir / CONFIG_FILE
    if path.exists():
        saved = config_lib.load_saved(path)
        for key in RUN_IDENTITY_KEYS:
            if _lookup(saved, key) != _lookup(config, key):
                raise TrainingError(
                    f"{workdir} holds a run with a different config.{key}; nothing was "
                    "overwritten: use a new --workdir, or the run's own config"
                )
    config_lib.save(config, path)


def _lookup(config: ml_collections.ConfigDict, key: str):
    node = config
    for part in key.split("."):
        node = node[part]
    return node.to_dict() if isinstance(node, ml_collections.ConfigDict) else node


class Preemption:
    """Turns SIGTERM into a flag the loop checks between steps (so it can save first)."""

    def __init__(self):
        self.requested = False

    def __enter__(self) -> Preemption:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        del signum, frame
        self.requested = True

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGTERM, self._previous)


def _host_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """This host's share of a global batch: every host plans the same batches, keeps its rows."""
    count, index = jax.process_count(), jax.process_index()
    return {key: np.array_split(value, count)[index] for key, value in batch.items()}


def train(
    config: ml_collections.ConfigDict,
    workdir: Path,
    make_validate: MakeValidateFn | None = None,
) -> RunSummary:
    """Trains (or resumes) the configured model in ``workdir`` and writes a final checkpoint.

    Args:
      config: a validated config.
      workdir: where the run lives; an existing run there is resumed.
      make_validate: optional factory of a ``state -> metrics`` function (validation loss,
        BLEU), called every ``config.eval.every_steps`` steps and at the end; its "bleu" picks
        the best checkpoint. Passed in by entry points, so training never imports evaluation.
    """
    if config.mesh.distributed:
        jax.distributed.initialize()
    workdir.mkdir(parents=True, exist_ok=True)
    save_config(config, workdir)
    mesh = sharding.build_mesh(config.mesh.data, config.mesh.fsdp)
    multiple = sharding.data_parallel_size(mesh) * config.train.grad_accum_steps
    data = build_training_data(config, workdir, batch_multiple=multiple)
    state, schedule = create_state(
        config, data.tokenizer.source_vocab_size, data.tokenizer.target_vocab_size
    )
    state_shardings = sharding.state_sharding(mesh, state, config.mesh.fsdp_min_size)
    checkpoints = Checkpoints(workdir, keep=config.checkpoint.keep)
    batches = iter(data.batches)
    state = _restore_or_place(checkpoints, state, state_shardings, batches)
    step_fn = jax.jit(
        functools.partial(
            train_step,
            label_smoothing=config.train.label_smoothing,
            schedule=schedule,
            grad_accum_steps=config.train.grad_accum_steps,
        ),
        in_shardings=(state_shardings, sharding.batch_sharding(mesh)),
        out_shardings=(state_shardings, sharding.replicated(mesh)),
        donate_argnums=0,
    )
    params = count_params(state.params)
    logger.info(
        "%s: %d parameters, mesh %s over %d devices, %d arrays split over fsdp",
        config.model.name,
        params,
        dict(mesh.shape),
        mesh.size,
        sharding.count_split(state_shardings),
    )
    writer = MetricsWriter(workdir, int(state.step))
    validate = make_validate(config, data.tokenizer, state.graphdef) if make_validate else None
    loop = _Loop(config, step_fn, checkpoints, writer, batches, validate, mesh)
    try:
        with Preemption() as preemption:
            state = loop.run(state, preemption)
        if preemption.requested:
            logger.warning("SIGTERM: saved step %d; rerun to resume", int(state.step))
        else:
            loop.save(state, final=True)
    finally:
        checkpoints.close()
        writer.close()
    return RunSummary(int(state.step), loop.loss, loop.seconds, params, preemption.requested)


def _restore_or_place(checkpoints, state, state_shardings, batches):
    """The latest readable checkpoint (and data position) if any, else the fresh state."""
    restored = checkpoints.restore_latest_readable(state)
    if restored is None:
        return jax.device_put(state, state_shardings)
    state, data_state = restored
    batches.set_state(data_state)
    logger.info("resumed from step %d", int(state.step))
    return jax.device_put(state, state_shardings)


class _Loop:
    """Steps, logs, validates and checkpoints; one method per concern."""

    def __init__(self, config, step_fn, checkpoints, writer, batches, validate, mesh):
        self.config = config
        self.step_fn = step_fn
        self.checkpoints = checkpoints
        self.writer = writer
        self.batches = batches
        self.validate = validate
        self.batch_sharding = sharding.batch_sharding(mesh)
        self.loss = math.nan
        self.seconds = 0.0
        self._pending: list[dict] = []  # per-step metrics since the last log line
        self._padding: list[float] = []
        self._interval_start = time.monotonic()

    def run(self, state: TrainState, preemption: Preemption) -> TrainState:
        train = self.config.train
        budget = train.time_budget_minutes * 60 or math.inf
        start = time.monotonic()
        progress = tqdm(
            total=train.steps,
            initial=int(state.step),
            disable=not sys.stderr.isatty(),
            unit="step",
        )
        for step in range(int(state.step) + 1, train.steps + 1):
            state = self._one_step(state)
            progress.update(1)
            out_of_time = time.monotonic() - start > budget
            if step % train.log_every_steps == 0 or step == train.steps:
                self._log(step, progress)  # only on schedule, so resumed logs match exactly
            if self._validation_due(step):
                self.save(state, metrics=self._validate(state, step))
            elif step % self.config.checkpoint.every_steps == 0:
                self.save(state)
            if preemption.requested:  # save now, skip the final validation: time is short
                self.save(state)
                break
            if out_of_time:  # the final save (with validation) follows in ``train``
                logger.info("time budget of %.1f min reached at step %d", budget / 60, step)
                break
        progress.close()
        self.seconds = time.monotonic() - start
        return state

    def _one_step(self, state: TrainState) -> TrainState:
        batch = _host_rows(next(self.batches))
        self._padding.append(padding_share(batch))
        state, metrics = self.step_fn(state, sharding.global_batch(batch, self.batch_sharding))
        self._pending.append(metrics)
        return state

    def _log(self, step: int, progress: tqdm) -> None:
        metrics = jax.device_get(self._pending)  # waits for the steps to finish
        record = interval_record(metrics, time.monotonic() - self._interval_start, self._padding)
        self._pending, self._padding = [], []
        self._interval_start = time.monotonic()
        self._check_finite(step, [m["loss"] for m in metrics])
        self.loss = record["loss"]
        self.writer.write(step, {"kind": "train", **record})
        progress.set_postfix(loss=f"{record['loss_mean']:.3f}")
        if progress.disable:
            logger.info(short_line(step, record))

    def _check_finite(self, step: int, losses: list) -> None:
        if not all(math.isfinite(float(loss)) for loss in losses):
            raise TrainingError(
                f"loss is not finite by step {step}; the last good checkpoint is step "
                f"{self.checkpoints.latest_step()}; lower train.learning_rate or check the data"
            )

    def _validation_due(self, step: int) -> bool:
        every = self.config.eval.every_steps
        return self.validate is not None and every > 0 and step % every == 0

    def _validate(self, state: TrainState, step: int) -> dict:
        metrics = self.validate(state)
        samples = metrics.pop("samples", [])
        self.writer.write(step, {"kind": "validation", **metrics}, prefix="validation")
        for i, sample in enumerate(samples):
            self.writer.write_text(step, f"samples/{i}", sample)
            logger.info("sample %d: %s", i, sample.replace("\n", " | ")[:400])
        logger.info("validation at step %d: %s", step, metrics)
        return metrics

    def save(self, state: TrainState, metrics: dict | None = None, final: bool = False) -> None:
        """Checkpoints ``state``, after making sure no NaN is about to be saved."""
        step = int(state.step)
        if self._pending:  # unlogged steps: check them before their parameters are kept
            self._check_finite(step, [m["loss"] for m in jax.device_get(self._pending)])
        if final and self.validate is not None and not self._validation_due(step):
            metrics = self._validate(state, step)
        self.checkpoints.save(step, state, self.batches.get_state(), metrics=metrics)
        if final:
            self.checkpoints.wait()
