"""Running one entry of a comparison: load its config, train (or resume, or reuse), evaluate.

A run that fails (a bad config, a NaN loss, missing data) is recorded with a one-line reason
and the comparison goes on; Ctrl-C or SIGTERM stops the whole comparison, and re-running it
continues every run where it stopped (training time is carried across, so equal budgets stay
equal).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import ml_collections

from seq2seq import cli
from seq2seq import config as config_lib
from seq2seq.compare.suites import RunSpec
from seq2seq.evaluation.averaging import average_count, choose_checkpoints
from seq2seq.evaluation.evaluate import evaluate
from seq2seq.evaluation.validation import make_validate_fn
from seq2seq.run_directory import RunDirectory
from seq2seq.training.checkpoints import Checkpoints
from seq2seq.training.trainer import train

logger = logging.getLogger(__name__)


# Which checkpoint of every run is scored, and how the report says it; ``average:K`` (below)
# scores the mean of each run's last K, as Vaswani et al. evaluate their base (5) and big (20).
CHECKPOINTS = {
    "latest": "each run's last",
    "best": "each run's best by validation BLEU",
}


def describe_checkpoint_rule(rule: str) -> str:
    """How the report names ``rule`` (a key of CHECKPOINTS or ``average:K``).

    Raises:
      ValueError: any other rule (a step number would name a different point of every run).
    """
    if rule in CHECKPOINTS:
        return CHECKPOINTS[rule]
    if (count := average_count(rule)) is not None:
        return f"the parameter mean of each run's last {count}"
    raise ValueError(
        f"checkpoint={rule!r}: a comparison applies one rule to every run, use one of "
        f"{', '.join(CHECKPOINTS)} or average:K (the mean of each run's last K checkpoints)"
    )


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every run of one comparison shares, so that the comparison is fair."""

    overrides: tuple[tuple[str, object], ...] = ()  # --config.KEY=VALUE, applied to every run
    budget_minutes: float | None = None  # the same training-time budget for every run
    seeds: int = 1  # runs per config, seeds config.seed, config.seed + 1, ...
    beam_size: int = 4  # the same decoding for every run
    alpha: float = 0.6
    split: str | None = None  # default: the configs' test split
    max_test_sentences: int = 0  # score only the first N test sentences; 0: all
    checkpoint: str = "latest"  # a key of CHECKPOINTS, or average:K

    def __post_init__(self):
        describe_checkpoint_rule(self.checkpoint)  # refuses any other rule


@dataclasses.dataclass
class RunOutcome:
    name: str  # the run's folder under the comparison's work directory
    spec: RunSpec
    seed: int | None
    run: RunDirectory
    status: str = "ok"  # "ok", "failed" or "preempted"
    reason: str = ""  # the one line saying why a run failed
    result: dict | None = None  # its eval JSON
    config: ml_collections.ConfigDict | None = None


def run_config(spec: RunSpec, settings: Settings, seed_index: int) -> ml_collections.ConfigDict:
    """The config of one run: the file, the suite's overrides, then the comparison's."""
    try:
        config = config_lib.load_config_file(spec.config)
    except config_lib.ConfigError:
        raise
    except Exception as error:  # an error inside the config file: name the file and line
        message = cli.config_file_error_message(error, [str(spec.config)])
        raise config_lib.ConfigError(message or f"{spec.config}: {error}") from error
    for key, value in (*spec.overrides, *settings.overrides):
        config_lib.set_value(config, key, value)
    if settings.budget_minutes is not None:
        config.train.time_budget_minutes = settings.budget_minutes
    config.seed = config.seed + seed_index
    return config_lib.validate(config)


def run_names(spec: RunSpec, seeds: int) -> list[str]:
    return [spec.name] if seeds == 1 else [f"{spec.name}-seed{k}" for k in range(seeds)]


def train_and_evaluate(
    spec: RunSpec, settings: Settings, seed_index: int, root: Path
) -> RunOutcome:
    """Trains (resumes, or reuses a finished run) and evaluates one run; never raises for a
    failure of the run itself (the outcome says why), only for an interruption."""
    name = run_names(spec, settings.seeds)[seed_index]
    outcome = RunOutcome(name, spec, None, RunDirectory(root / name))
    try:
        config = run_config(spec, settings, seed_index)
        outcome.config, outcome.seed = config, config.seed
        logger.info("== %s: training (%s)", name, spec.config.name)
        summary = train(config, outcome.run, make_validate_fn)
        if summary.preempted:
            outcome.status, outcome.reason = "preempted", "stopped by SIGTERM; rerun to resume"
            return outcome
        outcome.result = _evaluation(outcome.run, config, settings)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:  # one failed run must not end the comparison
        outcome.status = "failed"
        outcome.reason = (
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        )
        logger.warning("== %s failed: %s", name, outcome.reason)
    return outcome


def _evaluation(run: RunDirectory, config: ml_collections.ConfigDict, settings: Settings) -> dict:
    """The run's eval JSON for the comparison's split and decoding; reused when it is current
    (same checkpoint, beam, alpha and sentence count), else decoded now."""
    split = settings.split or config.data.test_split
    previous = run.read_eval_result(split, settings.checkpoint)
    checkpoints = Checkpoints(run.checkpoints_dir, keep=config.checkpoint.keep)
    try:
        choice = choose_checkpoints(
            settings.checkpoint, checkpoints.all_steps(), run.path, keep=checkpoints.keep
        )
    finally:
        checkpoints.close()
    scored = choice.describe()
    if previous and _is_current(previous, scored, settings):
        logger.info("== %s: reusing its evaluation of %s", run.path.name, scored)
        return previous
    logger.info(
        "== %s: decoding %s with %s (beam %d)", run.path.name, split, scored, settings.beam_size
    )
    # One step by number, so that 'latest' and 'best' score exactly the step resolved above.
    return evaluate(
        run.path,
        split,
        checkpoint=str(choice.steps[0]) if len(choice.steps) == 1 else settings.checkpoint,
        beam_size=settings.beam_size,
        alpha=settings.alpha,
        max_sentences=settings.max_test_sentences or None,
        filed_as=settings.checkpoint,
    )


def _is_current(result: dict, scored: str, settings: Settings) -> bool:
    return (
        result.get("checkpoint") == scored
        and result.get("beam_size") == settings.beam_size
        and result.get("alpha") == settings.alpha
        and result.get("max_sentences") == (settings.max_test_sentences or None)
    )
