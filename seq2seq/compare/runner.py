"""Running the entries of a comparison: load their configs, train them side by side, evaluate.

The runs train in round-robin slices of a few training minutes (each resumed where its last
slice stopped), so a slow spell of the machine touches every model alike rather than the one
that happened to be training. A run that fails (a bad config, a NaN loss, missing data) is
recorded with a one-line reason and the others go on; Ctrl-C or SIGTERM stops the whole
comparison, and re-running it continues every run where it stopped (training time is carried
across, so equal budgets stay equal).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from collections.abc import Sequence
from pathlib import Path

import ml_collections

from seq2seq import config as config_lib
from seq2seq.compare.checks import scored_split
from seq2seq.compare.settings import Settings, run_config, run_names
from seq2seq.compare.suites import RunSpec
from seq2seq.data import sources
from seq2seq.evaluation.evaluate import evaluate
from seq2seq.evaluation.restore import checkpoint_choice
from seq2seq.evaluation.translator import Translator, with_decoding
from seq2seq.evaluation.validation import make_validate_fn
from seq2seq.records.run_directory import RunDirectory
from seq2seq.training.logs import duration
from seq2seq.training.stopping import CONVERGED
from seq2seq.training.trainer import Preemption, train

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunOutcome:
    name: str  # the run's folder under the comparison's work directory
    spec: RunSpec
    seed: int | None
    run: RunDirectory
    status: str = "ok"  # "ok", "failed", "preempted", or "unfinished" (a preempted sweep's)
    reason: str = ""  # the one line saying why a run failed
    result: dict | None = None  # its eval JSON
    config: ml_collections.ConfigDict | None = None


def prepare(spec: RunSpec, settings: Settings, seed_index: int, root: Path) -> RunOutcome:
    """One run's outcome before training: its folder and config, or the reason it failed."""
    try:
        config = run_config(spec, settings, seed_index)
    except Exception as error:  # one bad config must not end the comparison
        name = run_names(spec, settings.seeds)[seed_index]
        outcome = RunOutcome(name, spec, None, RunDirectory(root / name))
        _fail(outcome, error)
        return outcome
    name = run_names(spec, settings.seeds, config.seed - seed_index)[seed_index]
    return RunOutcome(name, spec, config.seed, RunDirectory(root / name), config=config)


def check_reuse(jobs: Sequence) -> None:
    """Refuses, before any training, to continue or reuse a run trained with other values.

    A job whose folder already holds a run continues it, or reuses it when finished; that is
    right only when every key of the run's identity (``config.identity_keys``: the model, the
    data and the optimisation) is unchanged. Extending the budget or the steps is a continuation,
    and so is a text corpus moved to another folder (``RunDirectory.identity_differences``).

    Raises:
      ConfigError: one line naming the run, the changed keys and how to start afresh.
    """
    for job in jobs:
        if job.config is None or not job.run.config_file.exists() or job.run.never_started():
            continue
        differences = job.run.identity_differences(job.config, sources.corpus_fingerprint)
        if differences:
            raise config_lib.ConfigError(
                f"{job.run.path} was trained with other values ({'; '.join(differences)}); "
                "it was left as it was: use a new --workdir to train afresh (or delete that run)"
            )


def _fail(job, error: Exception) -> None:
    job.status = "failed"
    job.reason = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
    logger.warning("== %s failed: %s", job.run.path.name, job.reason)


def _trained_minutes(run: RunDirectory) -> float:
    """Training minutes the run has spent so far, from its metrics (0 for a new run)."""
    records = run.read_metrics(drop_cut_end=True)  # a crash's cut line: the resume drops it
    return records[-1].get("elapsed_seconds", 0.0) / 60 if records else 0.0


def training_minutes_left(jobs: Sequence) -> float | None:
    """The training minutes ``jobs`` have left before their time budgets end, in all (what each
    has trained is read from its metrics); None when any of them is bounded by steps alone, whose
    time is not known before it trains."""
    budgets = [job.config.train.time_budget_minutes for job in jobs]
    if not all(budgets):
        return None
    return sum(
        max(0.0, b - _trained_minutes(job.run)) for b, job in zip(budgets, jobs, strict=True)
    )


def finished(job) -> bool:
    """Whether the job's run already validated at the end of its budget (its minutes or its
    steps), or converged under its patience: then training it again would only restore and
    compile, 15-20 s, to do nothing."""
    records = job.run.read_metrics(drop_cut_end=True)
    validations = [r for r in records if r.get("kind") == "validation"]
    if not validations:
        return False
    last, train = validations[-1], job.config.train
    saved = job.run.saved_steps()
    if not saved or saved[-1] < last.get("step", 0):
        return False  # its final checkpoint was never written (a signal during the save)
    stop = records[-1] if records[-1].get("kind") == "stop" else {}
    patience = train.early_stopping_patience
    if stop.get("reason") == CONVERGED and 0 < patience <= stop.get("points_since_best", 0):
        return True
    minutes = train.time_budget_minutes
    return last.get("step", 0) >= train.steps or bool(
        minutes and last.get("elapsed_seconds", 0.0) >= minutes * 60
    )


class PauseAt(Preemption):
    """A slice's end: the run saves and stops at ``minutes`` training minutes (counted across
    resumes) as if preempted, without its final validation, and the next slice resumes it.
    SIGTERM still stops it as it stops any run."""

    timed = True
    message = "paused: saved step %d; the next slice resumes it"
    log_level = logging.INFO

    def __init__(self, minutes: float):
        super().__init__()
        self.seconds = minutes * 60
        self.paused = False

    def _handle(self, signum, frame) -> None:
        """SIGTERM ends the command, not the slice (even while the slice's pause is saved):
        say so, as any run says it."""
        super()._handle(signum, frame)
        self.message, self.log_level = Preemption.message, Preemption.log_level

    def reached(self, step: int, elapsed_seconds: float = 0.0) -> bool:
        if not self.requested and elapsed_seconds >= self.seconds:
            logger.info("paused at %.2f training minutes (step %d)", elapsed_seconds / 60, step)
            self.requested = self.paused = True
        return super().reached(step, elapsed_seconds)


def train_in_slices(jobs: Sequence, slice_minutes: float) -> bool:
    """Trains every job whose status is "ok" to its end, in round-robin slices.

    Round k trains each unfinished job until ``k * slice_minutes`` training minutes (counted
    across resumes), then moves to the next; a job already past that mark waits for the next
    round. With ``slice_minutes`` 0 each job trains to its end in turn. A job is anything with
    ``run``, ``config``, ``status`` and ``reason`` (a ``RunOutcome``, a tuning trial); a failure
    sets its status to "failed" with a one-line reason, and the others go on.

    Returns:
      True when SIGTERM stopped a job (its status is then "preempted"): rerun to continue.
    """
    active = []
    for job in jobs:
        if job.status == "ok" and finished(job):  # said before the rounds count what is left
            logger.info(
                "== %s: %s",
                job.run.path.name,
                "its winning trial, copied, has trained to the final budget already"
                if job.run.winning_trial_file.exists()
                else "finished before, reused",
            )
        elif job.status == "ok":
            active.append(job)
    round_index = 1
    while active:
        if (left := training_minutes_left(active)) is not None and left > 0:
            logger.info(
                "== round %d: %d run%s to train, at most %s of training left in all "
                "(validation and decoding on top)",
                round_index, len(active), "" if len(active) == 1 else "s",
                duration(left * 60),
            )  # fmt: skip
        unfinished = []
        mark = round_index * slice_minutes if slice_minutes > 0 else None
        for job in active:
            budget = job.config.train.time_budget_minutes
            pause = mark if mark is not None and not (budget and mark >= budget) else None
            if pause is not None and _trained_minutes(job.run) >= pause:
                unfinished.append(job)  # resumed past this round's mark
                continue
            if finished(job):
                logger.info("== %s: finished before, reused", job.run.path.name)
                continue
            ending = _train_slice(job, pause, round_index)
            if ending == "paused":
                unfinished.append(job)
            elif ending == "preempted":
                return True
        active = unfinished
        round_index += 1
    return False


def _train_slice(job, pause: float | None, round_index: int) -> str:
    """Trains ``job`` until ``pause`` training minutes (None: its end). Returns how it ended:
    "paused", "done", "failed" (status and reason set) or "preempted" (SIGTERM; likewise)."""
    logger.info(
        "== %s: training%s",
        job.run.path.name,
        f" to {pause:g} min (slice {round_index})" if pause is not None else "",
    )
    stop = PauseAt(pause) if pause is not None else Preemption()
    try:
        summary = train(job.config, job.run, make_validate_fn, preemption=stop)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:  # one failed run must not end the comparison
        _fail(job, error)
        return "failed"
    if stop.signal_name and not summary.preempted:
        # It came while the run finished (its final validation or checkpoint), which finished
        # first; the command now stops as the signal asks, instead of training the next run.
        signal.raise_signal(signal.SIGINT if stop.signal_name == "Ctrl-C" else signal.SIGTERM)
    # A signal during a slice's pause stops the command too: the slice is saved to resume.
    if isinstance(stop, PauseAt) and stop.paused and not stop.signal_name:
        return "paused"
    if summary.preempted:
        stopped_by = stop.signal_name or "SIGTERM"  # several processes: JAX's service caught it
        job.status, job.reason = "preempted", f"stopped by {stopped_by}; rerun to resume"
        return "preempted"
    return "done"


def evaluate_outcome(outcome: RunOutcome, settings: Settings) -> None:
    """Scores a trained run on the comparison's split (its eval JSON into ``outcome.result``);
    a failure is recorded in the outcome, not raised."""
    if outcome.status != "ok":
        return
    try:
        outcome.result = _evaluation(outcome.run, outcome.config, settings)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:
        _fail(outcome, error)


def _evaluation(run: RunDirectory, config: ml_collections.ConfigDict, settings: Settings) -> dict:
    """The run's eval JSON for the comparison's split and decoding; reused when it is current
    (same checkpoint, beam, alpha and sentence count), else decoded now."""
    split = scored_split(config, settings.split)
    previous = run.read_eval_result(split, settings.checkpoint)
    choice = checkpoint_choice(run, config, settings.checkpoint)
    scored = choice.describe()
    if previous and _is_current(previous, scored, settings):
        logger.info("== %s: reusing its evaluation of %s", run.path.name, scored)
        return previous
    logger.info(
        "== %s: decoding %s with %s (beam %d)", run.path.name, split, scored, settings.beam_size
    )
    # The run's own config, as saved (what eval.py decodes with), under the comparison's decoding.
    decoding = with_decoding(run.load_config(), beam_size=settings.beam_size, alpha=settings.alpha)
    # One step by number, so that 'latest' and 'best' score exactly the step resolved above.
    step = str(choice.steps[0]) if len(choice.steps) == 1 else settings.checkpoint
    translator = Translator.from_run(run, decoding, step)
    return evaluate(
        translator,
        run,
        split,
        filed_as=settings.checkpoint,
        max_sentences=settings.max_test_sentences or None,
    )


def _is_current(result: dict, scored: str, settings: Settings) -> bool:
    return (
        result.get("checkpoint") == scored
        and result.get("beam_size") == settings.beam_size
        and result.get("alpha") == settings.alpha
        and result.get("max_sentences") == (settings.max_test_sentences or None)
    )
