"""The training loop: a short sequence of named helpers around the pure ``train_step``.

It never loses work: it resumes from the work directory's latest checkpoint (falling back to an
older one if the latest is unreadable), saves on SIGTERM before exiting, refuses a work directory
that holds a run of another shape, and stops on a NaN loss before that loss reaches a checkpoint.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from tqdm import tqdm

from seq2seq.checkpoints.store import Checkpoints
from seq2seq.data import sources
from seq2seq.data.pipeline import build_training_data
from seq2seq.models import build_model, compute_dtype, count_params, schedule_width
from seq2seq.progress import bar as progress_bar
from seq2seq.records import provenance
from seq2seq.records.run_directory import RunDirectory
from seq2seq.training import processes, sharding
from seq2seq.training.clock import TrainingClock
from seq2seq.training.logs import (
    HOST_PARTS,
    MetricsWriter,
    interval_record,
    sample_line,
    seconds_to_go,
    short_line,
    validation_line,
)
from seq2seq.training.schedules import build_optimizer, schedule_shape
from seq2seq.training.step import TrainState, configured_train_step
from seq2seq.training.stopping import CAPPED, CONVERGED, EarlyStopping

logger = logging.getLogger(__name__)

ValidateFn = Callable[[TrainState], dict]
IN_FLIGHT = 2  # steps dispatched and not yet waited for
PACE_TICKS = 8  # clock readings the loop's step time is taken over, to foresee a budget's end
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
    elapsed_seconds: float = 0.0  # training time across all resumes (what the budget counts)
    train_flops: float = 0.0  # analytic training FLOPs across all resumes
    stop_reason: str = ""  # CONVERGED or CAPPED once the run has ended; "" if paused or preempted


def create_state(config: ml_collections.ConfigDict, source_vocab: int, target_vocab: int):
    """A fresh train state and the schedule's shape, which its optimizer follows (the state
    carries ``train.learning_rate``, the multiplier)."""
    model = build_model(config, source_vocab, target_vocab, seed=config.seed)
    shape = schedule_shape(config.train, schedule_width(config))
    optimizer = build_optimizer(config.train, shape)
    state = TrainState.create(model, optimizer, config.seed, config.train.learning_rate)
    return state, shape


class Preemption:
    """Turns SIGTERM into a flag the loop checks between steps (so it can save first).

    With several processes every one must stop at the same step: one that stopped alone would
    leave the others waiting in the next step's collectives. JAX's preemption service (started
    by ``jax.distributed.initialize``) catches SIGTERM on any process and tells the others;
    ``reached(step)`` then turns true on every process at one agreed step, where they save one
    checkpoint together and stop.

    A caller may stop a run for reasons of its own in the same way (the comparison's slices,
    ``seq2seq.compare.runner.PauseAt``): a subclass that reads the training time sets ``timed``
    (every process then reads one clock) and its ``reached`` also turns true at its time.
    """

    timed = False  # whether ``reached`` reads the training time (one clock for all processes)
    # Whether a stop ends the run as a spent budget does (final validation and checkpoint, a
    # "cap" stop record) rather than pausing it for a later call to resume.
    ends_run = False
    seconds = math.inf  # the training time ``reached`` turns true at, where ``timed``
    message = "SIGTERM: saved step %d; rerun to resume"  # logged once the run has stopped
    log_level = logging.WARNING

    def __init__(self):
        self.requested = False
        self.signal_name = ""  # what stopped the run, once a signal has: "SIGTERM" or "Ctrl-C"
        self._shared = False

    def __enter__(self) -> Preemption:
        self._shared = jax.process_count() > 1
        if not self._shared:  # a Python handler would replace the preemption service's
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        self._previous_interrupt = signal.signal(signal.SIGINT, self._interrupt)
        return self

    def _handle(self, signum, frame) -> None:
        del signum, frame
        self.requested = True
        self.signal_name = self.signal_name or "SIGTERM"

    def _interrupt(self, signum, frame) -> None:
        """Ctrl-C stops the run as SIGTERM does, with a checkpoint of the last step; a second
        Ctrl-C interrupts at once (Python's own handler is back).

        With several processes the process sends itself SIGTERM, which the preemption service
        catches and tells the others: every process then saves at one agreed step, whether the
        terminal's Ctrl-C reached them all (processes started together) or this one alone.
        """
        self.signal_name = "Ctrl-C"
        if self._shared:
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            self._handle(signum, frame)
        self.message = "interrupted (Ctrl-C): saved step %d; rerun to resume"
        self.log_level = logging.WARNING
        signal.signal(signal.SIGINT, self._previous_interrupt)

    def reached(self, step: int, elapsed_seconds: float = 0.0) -> bool:
        """Whether to save and stop after ``step``, at ``elapsed_seconds`` of training; every
        process must call it at every step."""
        if self._shared and not self.requested:
            self.requested = multihost_utils.reached_preemption_sync_point(step)
        return self.requested

    def __exit__(self, *exc) -> None:
        if not self._shared:
            signal.signal(signal.SIGTERM, self._previous)
        signal.signal(signal.SIGINT, self._previous_interrupt)


class Deadline(Preemption):
    """Ends the run at a wall-clock time (``time.time()``), validation and compiles included,
    as a spent budget ends it: final validation and checkpoint, and a "cap" stop record, so a
    command with a hard end always leaves a scored run. SIGTERM still pauses it. One process
    only: the processes of a multi-process run could read their clocks at different steps."""

    ends_run = True
    message = "deadline: stopped at step %d"
    log_level = logging.INFO

    def __init__(self, wall_time: float):
        super().__init__()
        self.wall_time = wall_time
        self.passed = False  # whether the deadline (not SIGTERM) stopped the run

    def __enter__(self) -> Deadline:
        if jax.process_count() > 1:
            raise TrainingError("a wall-clock Deadline stops a single-process run only")
        return super().__enter__()

    def _handle(self, signum, frame) -> None:
        self.ends_run = False  # SIGTERM: save to resume, as any preemption
        super()._handle(signum, frame)

    def reached(self, step: int, elapsed_seconds: float = 0.0) -> bool:
        if not self.requested and time.time() >= self.wall_time:
            logger.info("wall-clock deadline reached at step %d", step)
            self.requested = self.passed = True
        return super().reached(step, elapsed_seconds)


def train(
    config: ml_collections.ConfigDict,
    workdir: Path | RunDirectory,
    make_validate: MakeValidateFn | None = None,
    preemption: Preemption | None = None,
) -> RunSummary:
    """Trains (or resumes) the configured model in ``workdir`` and writes a final checkpoint.

    Args:
      config: a validated config.
      workdir: where the run lives; an existing run there is resumed.
      make_validate: optional factory of a ``state -> metrics`` function (validation loss,
        BLEU), called every ``config.eval.every_steps`` steps or ``every_minutes`` training
        minutes, and at the end; its "bleu" picks the best checkpoint. Passed in by entry
        points, so training never imports evaluation.
      preemption: what stops the run early with a checkpoint but without the final validation,
        so that a later call continues it: SIGTERM (the default ``Preemption``), or a caller's
        own reason (a comparison's slices).
    """
    run = workdir if isinstance(workdir, RunDirectory) else RunDirectory(workdir)
    mesh_config = config.mesh
    if mesh_config.distributed or mesh_config.coordinator_address:
        processes.initialize_processes(
            mesh_config.coordinator_address, mesh_config.num_processes, mesh_config.process_id
        )
    processes.check_same_config(config)  # every process refuses together: none waits
    # Before anything is written, the mesh over the job's devices and the sentences split over
    # it: the same config and device count on every process, so each refuses alike, in one
    # line (inside the guard below, a refusal is a traceback that stops the others).
    mesh = sharding.build_checked_mesh(config)
    with processes.stop_every_process_on_error():
        return _train(config, run, mesh, make_validate, preemption or Preemption())


def _train(
    config: ml_collections.ConfigDict,
    run: RunDirectory,
    mesh: Mesh,
    make_validate: MakeValidateFn | None,
    preemption: Preemption,
) -> RunSummary:
    primary = jax.process_index() == 0  # the one process that writes the run's files
    # Before anything is written: the stems it will read (validation's only if it validates).
    splits = ("train_split", "eval_split")[: 1 + bool(make_validate)]
    sources.check_split_keys(config.data, splits, require_folder=True)
    run.create()
    with run.training() if primary else contextlib.nullcontext():
        return _train_locked(config, run, mesh, make_validate, preemption, primary)


def _train_locked(
    config: ml_collections.ConfigDict,
    run: RunDirectory,
    mesh: Mesh,
    make_validate: MakeValidateFn | None,
    preemption: Preemption,
    primary: bool,
) -> RunSummary:
    # A corpus moved to another folder continues the run when its training files are the same.
    run.save_config(config, write=primary, fingerprint=sources.corpus_fingerprint)
    if primary:
        run.record_corpus(config, sources.corpus_fingerprint)  # at the first start only
        # versions, devices, commit and compute dtype of this (re)start
        provenance.record_start(run.path, compute_dtype=compute_dtype(config))
    loop, state, params = _build_loop(config, run, mesh, make_validate, primary)
    try:
        with preemption:
            state = loop.run(state, preemption)
            paused = preemption.requested and not preemption.ends_run
            if not paused:
                # Still under the handler: a Ctrl-C or SIGTERM during the final validation or
                # checkpoint waits for them. It cut orbax's write short, leaving a temporary
                # folder alone, while metrics.jsonl's last validation said the run had ended.
                loop.save(state, final=True)
                loop.record_stop(state)
        if paused:
            logger.log(preemption.log_level, preemption.message, int(state.step))
        elif preemption.signal_name:  # it came during the final validation or checkpoint
            logger.warning(
                "%s came while the run was finishing: it finished first (step %d, final "
                "checkpoint saved)",
                preemption.signal_name,
                int(state.step),
            )
    finally:
        loop.checkpoints.close()
        loop.writer.close()
    progress = loop.progress()
    return RunSummary(
        int(state.step),
        loop.loss,
        loop.seconds,
        params,
        paused,
        elapsed_seconds=progress["elapsed_seconds"],
        train_flops=progress["train_flops"],
        stop_reason=loop.stop_reason,
    )


def _build_loop(
    config: ml_collections.ConfigDict,
    run: RunDirectory,
    mesh: Mesh,
    make_validate: MakeValidateFn | None,
    primary: bool,
) -> tuple[_Loop, TrainState, int]:
    """The data, state (restored if the run has a checkpoint) and jitted step of a run on
    ``mesh``, assembled into its loop; also the state and its parameter count."""
    rules = sharding.AxisRules.from_config(config.mesh.rules)
    data = build_training_data(
        config,
        run.tokenizer_dir,
        batch_multiple=sharding.batch_multiple(config, mesh),
        encoded_dir=run.encoded_dir,
    )
    vocab = data.tokenizer.target_vocab_size
    state, schedule = create_state(config, data.tokenizer.source_vocab_size, vocab)
    state_shardings = sharding.state_sharding(mesh, state, rules)
    checkpoints = Checkpoints(run.checkpoints_dir, keep=config.checkpoint.keep, training=True)
    batches = iter(data.batches)
    state, progress = _restore_or_place(checkpoints, state, state_shardings, batches)
    batch_sharding = sharding.batch_sharding(mesh, rules)
    step_fn = configured_train_step(config, schedule, mesh, rules, state_shardings, vocab)
    params = count_params(state.params)
    _log_model(config.model.name, params, mesh, state_shardings)
    if undivided := sharding.undivided_dimensions(mesh, state, rules):
        left = ", ".join(
            f"{name} ({size}) over {' x '.join(f'{axis} {mesh.shape[axis]}' for axis in axes)}"
            for name, (size, axes) in sorted(undivided.items())
        )
        logger.warning(
            "mesh: these dimensions stay whole on every device, their mesh axes not dividing "
            "them: %s; mesh sizes that divide them would split them (docs/scaling.md)",
            left,
        )
    loop = _Loop(
        config=config,
        step_fn=step_fn,
        checkpoints=checkpoints,
        writer=MetricsWriter(run, int(state.step), active=primary, config=config),
        batches=batches,
        validate=make_validate(config, data.tokenizer, state.graphdef) if make_validate else None,
        batch_sharding=batch_sharding,
    )
    loop.restore(progress)
    return loop, state, params


def _log_model(name: str, params: int, mesh, state_shardings) -> None:
    axes = " x ".join(f"{axis} {size}" for axis, size in mesh.shape.items())
    logger.info(
        "%s: %s parameters, mesh %s over %s, %d arrays split over the mesh",
        name,
        f"{params:,}",
        axes,
        "1 device" if mesh.size == 1 else f"{mesh.size} devices",
        sharding.count_split(state_shardings),
    )


def _restore_or_place(checkpoints, state, state_shardings, batches) -> tuple[TrainState, dict]:
    """The latest readable checkpoint (its data position set) if any, else the fresh state;
    and what the run had spent so far (``elapsed_seconds``, ``train_flops``)."""
    restored = checkpoints.restore_latest_readable(state, state_shardings)
    if restored is None:
        return jax.device_put(state, state_shardings), {}
    state, record = restored
    batches.set_state(record["iterator"])
    logger.info("resumed from step %d", int(state.step))
    return state, record["progress"]  # already on the mesh


@dataclasses.dataclass
class _Loop:
    """Steps, logs, validates and checkpoints; one method per concern, the clock and the
    early-stopping count beside it."""

    config: ml_collections.ConfigDict
    step_fn: Callable  # (state, batch) -> (state, metrics), jitted
    checkpoints: Checkpoints
    writer: MetricsWriter
    batches: Iterator  # this host's batches, with get_state/set_state for checkpoints
    validate: ValidateFn | None
    batch_sharding: object  # where each step's batch is placed

    def __post_init__(self):
        train, evaluation = self.config.train, self.config.eval
        # Only a schedule that depends on time needs one clock for all processes; a budget
        # reads it at every step, minute intervals at the log steps.
        intervals = bool(evaluation.every_minutes or self.config.checkpoint.every_minutes)
        budgeted = bool(train.time_budget_minutes)
        self.clock = TrainingClock(shared=budgeted or intervals, every_step=budgeted)
        self.stopping = EarlyStopping(train.early_stopping_patience, train.early_stopping_min_delta)
        self.flops = 0.0  # analytic training FLOPs of every fetched step, across sessions
        self.loss = math.nan
        self.seconds = 0.0  # this session's training time (validation left out)
        self.steps_run = 0  # steps trained in this session
        self.stop_reason = ""  # set by ``record_stop`` once the run has ended
        self._seen_shapes: set[tuple] = set()  # batch shapes compiled in this session
        self._validated_step = -1  # the step of this session's last validation
        self._pending: list[dict] = []  # metrics of the steps in flight, still on the devices
        self._pace = collections.deque(maxlen=PACE_TICKS)  # (steps finished, clock) at ticks
        self._fetched: list[dict] = []  # metrics of the steps since the last log line, fetched
        self._host = dict.fromkeys(HOST_PARTS, 0.0)  # seconds since the last log line
        self._host_steps = dict.fromkeys(HOST_PARTS, 0)  # the steps those seconds cover

    def progress(self) -> dict:
        """What the run has spent so far: saved with each checkpoint and in every record
        (waits for the steps in flight, whose metrics count the FLOPs)."""
        self._fetch()
        return {**self.clock.spent, "train_flops": self.flops}

    def restore(self, saved: dict) -> None:
        """Takes back the progress and early-stopping count a checkpoint saved."""
        self.clock.restore(saved)
        self.flops = float(saved.get("train_flops", 0.0))
        self.stopping.restore(saved.get("early_stopping", {}))

    @property
    def budget(self) -> float:
        """The run's time budget in training seconds; infinite where it has none."""
        return self.config.train.time_budget_minutes * 60 or math.inf

    def run(self, state: TrainState, preemption: Preemption) -> TrainState:
        train, budget = self.config.train, self.budget
        if preemption.timed:  # a stop at a time: one clock for all processes, every step
            self.clock.shared = jax.process_count() > 1
            self.clock.every_step = True
        self.clock.start()
        if self._nothing_to_train(budget):
            return state
        limit = min(budget, preemption.seconds)  # the training time the run stops at, if any
        with progress_bar(train.steps, "step", initial=int(state.step)) as progress:
            for step in range(int(state.step) + 1, train.steps + 1):
                state = self._one_step(state)
                progress.update(1)
                log_step = step % train.log_every_steps == 0 or step == train.steps
                before, now = self.clock.tick(agree=log_step)
                if self._finish_time(now) > limit:  # the steps in flight end past it: wait for them
                    now = self._settle()
                # The clock as the loop reads it: the line and the loop's choices agree.
                if log_step:  # only on schedule, so resumed logs match exactly
                    self._log(step, progress)
                self._validate_or_save(state, step, before, now)
                if self._should_stop(step, now, budget, preemption):
                    break
        if self.steps_run:
            self._settle()  # the session's training ends when its last step does
        self.seconds = self.clock.session_seconds()
        if preemption.requested and not preemption.ends_run:
            self.save(state, interrupted=True)  # skip the final validation: time is short
        return state

    def _nothing_to_train(self, budget: float) -> bool:
        """Whether an earlier session already spent the budget or converged."""
        if self.clock.elapsed >= budget:
            logger.info("time budget of %.1f min already spent", budget / 60)
            return True
        if self.stopping.converged:
            logger.info("converged before (best at step %d)", self.stopping.best_step)
            return True
        return False

    def _validate_or_save(self, state: TrainState, step: int, before: float, now: float) -> None:
        """Validates (and saves with the scores) or only saves, where an interval ends."""
        checkpoint = self.config.checkpoint
        if self._validation_due(step, before, now):
            self.save(state, metrics=self._validate(state, step))
        elif _due(step, checkpoint.every_steps, before, now, checkpoint.every_minutes):
            self.save(state)

    def _finish_time(self, now: float) -> float:
        """Training seconds when the steps in flight will have finished, foreseen: ``now``
        counts the steps known to be finished, and those in flight are added at the pace of the
        last ``PACE_TICKS`` readings (this one is kept for the next). Every process gets the
        same figure.

        The clock runs ``IN_FLIGHT`` steps behind the training. A budget read from it alone
        would end a run that many steps past its limit; the loop waits for the steps in flight
        (``_settle``) once this passes the limit, and from there on reads the clock as it
        stands, so the run ends within a step of its limit and never before it.

        Until a step has finished in this session there is no pace to go by, and a limit
        shorter than two steps would be passed unseen: the steps in flight are then foreseen to
        end at no known time (infinity), so that a run with a limit waits for its first step.
        """
        unfinished = min(len(self._pending), IN_FLIGHT)
        finished = self.steps_run - unfinished
        self._pace.append((finished, now))
        earliest_finished, earliest = self._pace[0]
        if finished <= earliest_finished:
            return math.inf if unfinished else now
        return now + unfinished * (now - earliest) / (finished - earliest_finished)

    def _settle(self) -> float:
        """Waits for the steps in flight and reads the clock: every step dispatched is counted."""
        self._fetch()
        return self.clock.tick()[1]

    def _should_stop(self, step, now, budget, preemption) -> bool:
        """Whether the loop ends after ``step``, at ``now`` training seconds: preempted (saved
        at the end of ``run``), or converged or out of time (the final save follows in
        ``train``)."""
        if preemption.reached(step, now):
            return True
        if self.stopping.converged:
            logger.info(
                "converged at step %d: no better validation BLEU in %d points since step %d (%.2f)",
                step,
                self.stopping.since_best,
                self.stopping.best_step,
                self.stopping.best,
            )
            return True
        if now > budget:
            logger.info("time budget of %.1f min reached at step %d", budget / 60, step)
            return True
        return False

    def _one_step(self, state: TrainState) -> TrainState:
        times = [time.monotonic()]
        batch = next(self.batches)  # already this host's rows (the batch planner splits)
        times.append(time.monotonic())
        # JAX dispatches steps asynchronously; unchecked, the host runs many steps ahead of the
        # device, so the clock lags the training it measures and a time budget is only seen at
        # the next log line. Waiting for the step before the previous one keeps IN_FLIGHT steps
        # queued (the device never waits for the host to prepare a batch) and the clock within
        # IN_FLIGHT steps of the training it counts (``_finish_time`` foresees those).
        if len(self._pending) >= IN_FLIGHT:
            jax.block_until_ready(self._pending[-IN_FLIGHT])
        times.append(time.monotonic())
        shape = tuple(sorted((key, value.shape) for key, value in batch.items()))
        placed = sharding.global_batch(batch, self.batch_sharding)
        times.append(time.monotonic())
        state, metrics = self.step_fn(state, placed)
        times.append(time.monotonic())
        # A batch shape not yet seen in this session is traced and compiled inside the call
        # (the step itself then runs asynchronously): that time is not training time.
        compiled = shape not in self._seen_shapes
        if compiled:
            self._seen_shapes.add(shape)
            self.clock.exclude("compile", times[-1] - times[-2])
        for part, begin, end in zip(HOST_PARTS, times[:-1], times[1:], strict=True):
            if not (compiled and part == "dispatch"):
                self._host[part] += end - begin
                self._host_steps[part] += 1
        self._pending.append(metrics)
        self.steps_run += 1
        return state

    def _host_record(self) -> dict:
        """``host_<part>_ms``: the host's milliseconds a step in each of ``HOST_PARTS`` since
        the last log line (a part with no step to count is left out); then starts anew."""
        record = {
            f"host_{part}_ms": 1e3 * self._host[part] / self._host_steps[part]
            for part in HOST_PARTS
            if self._host_steps[part]
        }
        self._host = dict.fromkeys(HOST_PARTS, 0.0)
        self._host_steps = dict.fromkeys(HOST_PARTS, 0)
        return record

    def _fetch(self) -> None:
        """Brings the metrics of the steps in flight to the host (waiting for them), adds their
        FLOPs to the run's, and stops on a loss that is not finite."""
        if not self._pending:
            return
        metrics = jax.device_get(self._pending)
        self._pending = []
        for step_metrics in metrics:  # one step at a time: a resumed run adds up the same
            self.flops += float(step_metrics["train_flops"])
        self._fetched.extend(metrics)
        self._check_finite(metrics)

    def _log(self, step: int, progress: tqdm) -> None:
        self._fetch()
        record = interval_record(self._fetched, self.clock.interval(), jax.device_count())
        self._fetched = []
        self.loss = record["loss"]
        shapes = {"compiled_shapes": len(self._seen_shapes)}  # this session's, bounded by buckets
        host = self._host_record()
        self.writer.write(step, {"kind": "train", **record, **shapes, **host, **self.progress()})
        progress.set_postfix(loss=f"{record['loss_mean']:.3f}")
        if progress.disable:
            steps = self.config.train.steps
            to_go = seconds_to_go(
                step, steps, record["step_seconds"], self.clock.elapsed, self.budget
            )
            logger.info(short_line(step, record, steps, to_go))

    def _check_finite(self, metrics: list[dict]) -> None:
        """Raises at the first of these steps whose loss is not finite."""
        for step_metrics in metrics:
            if math.isfinite(float(step_metrics["loss"])):
                continue
            latest = self.checkpoints.latest_step()
            saved = (
                "no checkpoint was saved"
                if latest is None
                else f"the last good checkpoint is step {latest}"
            )
            raise TrainingError(
                f"loss is not finite at step {int(step_metrics['step'])}; {saved}; lower "
                "train.learning_rate or check the data"
            )

    def _validation_due(self, step: int, before: float, now: float) -> bool:
        """Whether ``step``, which moved the clock from ``before`` to ``now`` seconds, ends
        a validation interval (in steps or in training minutes)."""
        evaluation = self.config.eval
        return self.validate is not None and _due(
            step, evaluation.every_steps, before, now, evaluation.every_minutes
        )

    def _validate(self, state: TrainState, step: int) -> dict:
        self._fetch()  # the steps in flight finish on the clock: they are training, not decoding
        with self.clock.off_the_clock("validation"):
            metrics = self.validate(state)
        self._validated_step = step
        if "bleu" in metrics:
            self.stopping.update(float(metrics["bleu"]), step)
        samples = metrics.pop("samples", [])
        self.writer.write(
            step, {"kind": "validation", **metrics, **self.progress()}, prefix="validation"
        )
        for i, sample in enumerate(samples):
            self.writer.write_text(step, f"samples/{i}", sample)
            logger.info("sample %d: %s", i, sample_line(sample))
        logger.info(validation_line(step, metrics, self.stopping))
        return metrics

    def save(
        self,
        state: TrainState,
        metrics: dict | None = None,
        final: bool = False,
        interrupted: bool = False,
    ) -> None:
        """Checkpoints ``state``, after making sure no NaN is about to be saved; ``interrupted``
        marks one written off schedule, to resume from
        (``seq2seq.checkpoints.store._Retention``)."""
        step = int(state.step)
        if final and self.steps_run == 0:  # nothing trained in this session: its budget or
            # steps were spent, and a checkpoint of this step saved; a signal may have stopped
            # that session before its final validation
            if self.validate is not None and self._final_validation_missing(step):
                self._validate(state, step)
            return
        self._fetch()  # unchecked steps: check them before their parameters are kept
        if final and self.validate is not None and self._validated_step != step:
            metrics = self._validate(state, step)
        with self.clock.off_the_clock("checkpoint"):
            progress = {**self.progress(), "early_stopping": self.stopping.state()}
            self.checkpoints.save(
                step,
                state,
                self.batches.get_state(),
                metrics=metrics,
                progress=progress,
                interrupted=interrupted,
            )
            if final or interrupted:  # the line after it says it is saved: make it true
                self.checkpoints.wait()

    def _final_validation_missing(self, step: int) -> bool:
        """Whether metrics.jsonl lacks a validation at ``step``, as process 0 (its one writer)
        reads it; every process gets that answer, since validating is a collective."""
        missing = not self.writer.recorded("validation", step)
        if jax.process_count() > 1:
            missing = bool(multihost_utils.broadcast_one_to_all(np.bool_(missing)))
        return missing

    def record_stop(self, state: TrainState) -> None:
        """Writes why the run ended (converged, or its budget ran out) to metrics.jsonl."""
        self.stop_reason = CONVERGED if self.stopping.converged else CAPPED
        if self.steps_run == 0 and self.writer.recorded("stop", int(state.step)):
            return  # nothing trained in this session: the session that did recorded the end
        step = int(state.step)
        capped = {} if self.stop_reason != CAPPED else {
            # which ran out: the steps, or first the training minutes (or a Deadline)
            "budget": "steps" if step >= self.config.train.steps else "minutes"
        }  # fmt: skip
        self.writer.write(
            step,
            {
                "kind": "stop",
                "reason": self.stop_reason,
                **capped,
                **self.stopping.state(),
                **self.progress(),
            },
            prefix="stop",
        )


def _due(step: int, every_steps: int, before: float, now: float, every_minutes: float) -> bool:
    """Whether an interval of ``every_steps`` steps or ``every_minutes`` training minutes
    ends at ``step``, which moved the training clock from ``before`` to ``now`` seconds."""
    if every_steps > 0 and step % every_steps == 0:
        return True
    if every_minutes > 0:
        period = every_minutes * 60
        return math.floor(now / period) > math.floor(before / period)
    return False
