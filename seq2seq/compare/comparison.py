"""``compare``: the main job of ``python -m seq2seq.compare``, as one function.

Checks the runs, tunes them on validation (``tuning``) if asked, trains them side by side in
slices (``runner``), scores each on the test split, then writes the report (``report``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from seq2seq.compare.checks import check_comparison
from seq2seq.compare.grid import Tuning
from seq2seq.compare.report import build_report, write_report
from seq2seq.compare.runner import (
    RunOutcome,
    check_reuse,
    evaluate_outcome,
    finished,
    prepare,
    train_in_slices,
)
from seq2seq.compare.settings import Settings
from seq2seq.compare.suites import RunSpec
from seq2seq.compare.tuning import reuse_winners, tune, write_tuning_records
from seq2seq.compare.workdir import LOCK_FILE
from seq2seq.records.run_directory import held

logger = logging.getLogger(__name__)


def compare(
    specs: Sequence[RunSpec],
    workdir: Path,
    settings: Settings,
    title: str = "Comparison",
    tuning: Tuning | None = None,
) -> tuple[list[RunOutcome], Path]:
    """Trains and evaluates every run of ``specs`` (each seed), then writes the report.

    Before any training, the configs are checked (a scored split that training or validation
    reads is refused). With ``tuning``, each config is first tuned on its validation split (see
    ``tuning``) and its final runs take the chosen values. The runs then train side by side in
    slices of ``settings.slice_minutes`` and are scored one by one. A second comparison in
    the same folder is refused while this one runs (its runs' reports would be written over).

    Returns the outcomes, in order, and the path of ``report.md``.
    """
    check_comparison(specs, settings, tuning)
    workdir = workdir.resolve()  # the report's paths then hold wherever it is read from
    workdir.mkdir(parents=True, exist_ok=True)
    with held(workdir / LOCK_FILE, f"{workdir} is being compared by"):
        return _compare(specs, workdir, settings, title, tuning)


def _compare(
    specs: Sequence[RunSpec],
    workdir: Path,
    settings: Settings,
    title: str,
    tuning: Tuning | None,
) -> tuple[list[RunOutcome], Path]:
    tuned = tune(specs, settings, tuning, workdir) if tuning is not None else None
    if tuned and any(result.preempted for result in tuned):
        logger.warning("preempted while tuning: writing the report so far; rerun to continue")
        outcomes, copied = [_stopped_trial(tuned)], []
    else:
        specs = [result.tuned_spec() for result in tuned] if tuned else specs
        outcomes = [
            prepare(spec, settings, seed_index, workdir)
            for spec in specs
            for seed_index in range(settings.seeds)
        ]
        copied = reuse_winners(tuned, outcomes, tuning) if tuned else []
        check_reuse(outcomes)
        if tuned:
            write_tuning_records(tuning, tuned, outcomes)
        _train_and_score(outcomes, settings)
    report = build_report(workdir, outcomes, settings, title, tuning, tuned, copied)
    return outcomes, write_report(workdir, report)


def _stopped_trial(tuned) -> RunOutcome:
    """The trial SIGTERM stopped, as the report's one outcome until the sweep is rerun."""
    stopped = [trial for result in tuned for trial in result.trials if trial.preempted]
    trial = stopped[0]
    return RunOutcome(
        trial.run.path.name, tuned[0].spec, None, trial.run, "preempted", trial.reason
    )


def _train_and_score(outcomes: Sequence[RunOutcome], settings: Settings) -> None:
    """Trains the runs side by side in slices, then scores each, unless SIGTERM stopped them
    (the report then shows the runs so far; a rerun continues)."""
    if len(outcomes) == 1:
        logger.info("== training one run")
    else:
        logger.info(
            "== training %d runs %s",
            len(outcomes),
            f"in turns of {settings.slice_minutes:g} training minutes"
            if settings.slice_minutes
            else "one after another",
        )
    if train_in_slices(outcomes, settings.slice_minutes):
        logger.warning("preempted: writing the report so far; rerun to continue")
        for outcome in outcomes:  # the runs not reached, or paused between slices
            if outcome.status == "ok" and not finished(outcome):
                outcome.status, outcome.reason = "unfinished", "not trained to its end yet"
        return
    for index, outcome in enumerate(outcomes, start=1):
        logger.info("== scoring run %d of %d: %s", index, len(outcomes), outcome.name)
        evaluate_outcome(outcome, settings)
