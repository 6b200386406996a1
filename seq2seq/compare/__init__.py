"""Compare models the way the papers do: the same data, budget and decoding, one report.

    python -m seq2seq.compare --suite quickstart --workdir runs/quickstart
    python -m seq2seq.compare --configs configs/a.py configs/b.py --workdir runs/ab \\
        [--budget_minutes 25] [--seeds 3] [--config.train.warmup_steps=300 ...]
    python -m seq2seq.compare --suite table3 --base configs/quickstart_transformer.py \\
        --workdir runs/table3
    python -m seq2seq.compare --suite multi30k --workdir runs/m30k --budget_minutes 25 \\
        --config.train.schedule=warmup_rsqrt --tune train.learning_rate=1e-3,3e-3 \\
        --tune train.warmup_steps=300,1000 --tune_minutes 5

Each config trains into ``WORKDIR/<name>`` (``<name>-seed<k>`` with several seeds), or resumes,
or reuses a finished run there; every run is decoded on the same test split with the same beam
and length penalty; ``WORKDIR/report.md`` (table and figures), ``WORKDIR/report.json`` and
``WORKDIR/figures/*.png`` follow. See ``runner`` for failures and interruptions, ``report``
for where each number comes from, ``suites`` for the named sets of runs and ``tuning`` for
``--tune`` (the same trials for every config, chosen on the validation split).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from seq2seq.compare.report import write_report
from seq2seq.compare.runner import RunOutcome, Settings, run_names, train_and_evaluate
from seq2seq.compare.suites import RunSpec, expand_suite, suite_names
from seq2seq.compare.tuning import Tuning, check_overrides, make_tuning, tune

__all__ = [
    "RunOutcome",
    "RunSpec",
    "Settings",
    "Tuning",
    "compare",
    "expand_suite",
    "make_tuning",
    "suite_names",
]

logger = logging.getLogger(__name__)


def compare(
    specs: Sequence[RunSpec],
    workdir: Path,
    settings: Settings,
    title: str = "Comparison",
    tuning: Tuning | None = None,
) -> tuple[list[RunOutcome], Path]:
    """Trains and evaluates every run of ``specs`` (each seed), then writes the report.

    With ``tuning``, each config is first tuned on its validation split (see ``tuning``) and
    its final runs take the chosen values.

    Returns the outcomes, in order, and the path of ``report.md``.
    """
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(
            f"two runs would share the folder {duplicates[0]!r}; give the configs distinct names"
        )
    if tuning is not None:
        check_overrides(tuning, settings)
    workdir.mkdir(parents=True, exist_ok=True)
    tuned = tune(specs, settings, tuning, workdir) if tuning is not None else None
    if tuned and tuned[-1].preempted:
        logger.warning("preempted while tuning: writing the report so far; rerun to continue")
        trial = tuned[-1].trials[-1]
        stopped = RunOutcome(
            str(trial.run.path.relative_to(workdir)),
            tuned[-1].spec,
            None,
            trial.run,
            "preempted",
            trial.reason,
        )
        return [stopped], write_report(workdir, [stopped], settings, title, tuning, tuned)
    if tuned:
        specs = [result.tuned_spec() for result in tuned]
    outcomes = []
    total = len(specs) * settings.seeds
    for spec in specs:
        for seed_index in range(settings.seeds):
            name = run_names(spec, settings.seeds)[seed_index]
            logger.info("== run %d of %d: %s", len(outcomes) + 1, total, name)
            outcome = train_and_evaluate(spec, settings, seed_index, workdir)
            outcomes.append(outcome)
            if outcome.status == "preempted":
                logger.warning("preempted: writing the report so far; rerun to continue")
                return outcomes, write_report(workdir, outcomes, settings, title, tuning, tuned)
    return outcomes, write_report(workdir, outcomes, settings, title, tuning, tuned)
