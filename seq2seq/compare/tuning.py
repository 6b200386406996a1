"""Tuning as part of a comparison: every model gets the same trials, chosen on validation.

    python -m seq2seq.compare --suite multi30k --workdir runs/m30k --budget_minutes 25 \\
        --config.train.schedule=warmup_rsqrt --tune train.learning_rate=1e-3,3e-3 \\
        --tune train.warmup_steps=300,1000 --tune_minutes 5
    python -m seq2seq.compare --suite frontier --workdir runs/frontier --budget_minutes 150 \\
        --tune train.learning_rate=x0.5,x1 --tune model.dropout_rate=0.1,0.3 \\
        --tune_steps 1000 --tune_rungs 3     # factors of each size's own rate

Before the final runs, each config trains once per point of the grid (the Cartesian product of
the ``--tune`` lists, or ``--tune_samples N`` points of it drawn with a fixed seed: the same
points for every model), each trial with the same budget of ``--tune_minutes`` minutes of
training. With ``--tune_rungs R`` (successive halving, Jamieson & Talwalkar 2016; Li et al.
2018), the better half of each config's trials then trains on to twice the minutes, and so on
for R rungs, so that what only shows late in training (overfitting, and so the regularisation
that prevents it) can decide; every config gets the same rungs, trials and minutes. All trials
of a rung, every config's, train side by side in slices (``runner.train_in_slices``).
Trials that differ only in ``train.learning_rate`` share their compiled training steps (the rate is
an input of the step, not a constant in it: ``seq2seq.training.schedules``), so a learning-rate
grid costs one compile per batch shape and config; other keys, such as dropout or warm-up, compile
once per value. A trial is an ordinary run in ``WORKDIR/tuning/<config>/<key=value,...>``, so an
interrupted sweep resumes where it stopped (the budget counts across resumes) and a finished trial
is reused. Its score at a rung is its validation record at the end of that rung's budget in
``metrics.jsonl`` (greedy BLEU and perplexity on ``data.eval_split``, the first
``eval.num_examples`` sentences): nothing here decodes the test split. The point with the highest
validation BLEU (ties: the lower validation perplexity) becomes that config's overrides for its
final runs, applied after the config file and the suite's overrides; a ``--config`` override of a
tuned key is refused, so the tuned value is never silently replaced. The report lists each trial's
highest logged learning rate, since ``train.learning_rate`` is a multiplier of d_model^-0.5 under
the "transformer" schedule.

The grid (the ``--tune`` flags, factors, the checks before any trial) is
``seq2seq.compare.grid``; this module trains its points, halves them and reports them.

The grid, its fixed-seed sample and the halving rule are a few lines here rather than optuna's
``GridSampler`` and ``SuccessiveHalvingPruner``: a trial is a run directory, trained in slices by
separate processes and resumed, whose ``metrics.jsonl`` is the one record of its score; an optuna
study would be a second record of the same trials to keep in step, and its (asynchronous)
halving promotes trials in the order their results arrive, where here every config's rung must
see all of its trials before any goes on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections.abc import Sequence
from pathlib import Path

import ml_collections

from seq2seq import config as config_lib
from seq2seq.compare.grid import (
    SAMPLE_SEED,
    Point,
    Scale,
    Tuning,
    for_model,
    point_for,
    point_name,
    shown,
)
from seq2seq.compare.grid_ends import grid_edges
from seq2seq.compare.runner import RunOutcome, check_reuse, train_in_slices
from seq2seq.compare.settings import Settings, apply_budget, run_config
from seq2seq.compare.suites import RunSpec
from seq2seq.compare.workdir import TUNING_DIR  # trials: WORKDIR/tuning/<config>/<point>
from seq2seq.records.run_directory import RunDirectory
from seq2seq.report import figures

logger = logging.getLogger(__name__)

# A trial trained to convergence (--tune_to_convergence) is scored by the mean validation BLEU of
# its last 5 points: the plateau its early stopping waited out, and the stretch whose checkpoints
# the final score averages (--checkpoint average:5). Its best point would favour the run with
# more validations, the highest of more noisy draws: on Multi30k de->en, dropout 0.3's 37 points
# peaked 0.6 above dropout 0.1's 27, though the two scored within 0.2 on test.
CONVERGED_POINTS = 5


@dataclasses.dataclass
class Trial:
    """One config trained at one point of the grid, scored by its validation records."""

    point: Point
    run: RunDirectory
    config: ml_collections.ConfigDict | None = None  # None when the config cannot be built
    status: str = "ok"  # "ok", "failed", "preempted" or "unscored" (no validation record)
    reason: str = ""
    validation_bleu: float | None = None  # at the last rung it reached
    validation_perplexity: float | None = None
    validation_sentences: int | None = None
    step: int | None = None  # the step of the validation record that scores the trial
    train_minutes: float | None = None  # training time spent, across resumes
    # The highest learning rate of its logged steps: what train.learning_rate meant for this
    # config (a peak rate, or a multiplier of d_model^-0.5 under the "transformer" schedule).
    peak_learning_rate: float | None = None
    rungs: list[float | None] = dataclasses.field(default_factory=list)  # val BLEU per rung
    # The config's own train.steps and train.time_budget_minutes, before any rung set them:
    # where --tune_to_convergence trains the last rung, under the final runs' budget.
    own_budget: tuple[int, float] = (0, 0.0)

    @property
    def preempted(self) -> bool:
        return self.status == "preempted"


@dataclasses.dataclass
class ModelTuning:
    """A config's trials and the point its final runs use (None when no trial was scored)."""

    spec: RunSpec
    trials: list[Trial]
    split: str  # the validation split that scored the trials
    chosen: Point | None = None

    @property
    def preempted(self) -> bool:
        return any(trial.preempted for trial in self.trials)

    @property
    def train_minutes(self) -> float:
        """Training minutes spent on all of this config's trials."""
        return sum(trial.train_minutes or 0.0 for trial in self.trials)

    def tuned_spec(self) -> RunSpec:
        """``spec`` with the chosen point appended to its overrides (unchanged without one)."""
        if self.chosen is None:
            return self.spec
        trained = next(trial for trial in self.trials if trial.point == self.chosen)
        if trained.config is None:
            return self.spec
        overrides = tuple(  # the values the winning trial trained with (a Scale resolved)
            (key, config_lib.lookup(trained.config, key))
            for key in (for_model(key, trained.config.model.name) for key, _ in self.chosen)
        )
        return dataclasses.replace(self.spec, overrides=(*self.spec.overrides, *overrides))


def _score(trial: Trial, minutes: float | None, unit: str = "minutes") -> None:
    """Fills the trial's numbers from its own ``metrics.jsonl``, as they stood at ``minutes``
    training minutes (or steps, by ``unit``): the first validation at or after that point is the
    one written when a budget of ``minutes`` ran out (later ones belong to a later rung); a run
    that ended earlier (its steps, or early stopping) is scored by its last. ``minutes`` None:
    the run trained to convergence, and is scored by the mean of its last ``CONVERGED_POINTS``
    validations (see there), at the last one's step."""
    records = trial.run.read_metrics()
    trained = [record for record in records if record.get("kind") == "train"]
    validations = [record for record in records if record.get("kind") == "validation"]
    if trained:
        trial.train_minutes = trained[-1].get("elapsed_seconds", 0.0) / 60
        trial.peak_learning_rate = max(record["learning_rate"] for record in trained)
    if not validations:
        if trial.status == "ok":
            trial.status, trial.reason = "unscored", "no validation record in metrics.jsonl"
        return
    if minutes is None:
        tail = validations[-CONVERGED_POINTS:]
        record = dict(tail[-1])
        for key in ("bleu", "perplexity"):
            values = [r[key] for r in tail if r.get(key) is not None]
            record[key] = sum(values) / len(values) if values else None
    else:
        if unit == "steps":
            later = [r for r in validations if r["step"] >= minutes]
        else:
            later = [r for r in validations if r.get("elapsed_seconds", 0.0) >= minutes * 60]
        record = later[0] if later else validations[-1]
    trial.train_minutes = max(trial.train_minutes or 0.0, record.get("elapsed_seconds", 0) / 60)
    trial.step = record["step"]
    trial.validation_bleu = record.get("bleu")
    trial.validation_perplexity = record.get("perplexity")
    trial.validation_sentences = record.get("n")
    trial.rungs.append(trial.validation_bleu)


def make_trial(spec: RunSpec, point: Point, settings: Settings, root: Path) -> Trial:
    """A trial's folder and config (or the reason its config cannot be built)."""
    trial = Trial(point, RunDirectory(root / TUNING_DIR / spec.name / point_name(point)))
    try:
        family = run_config(spec, settings, 0)
        trial_spec = dataclasses.replace(
            spec, overrides=(*spec.overrides, *point_for(point, family))
        )
        trial.config = run_config(trial_spec, settings, 0)
        trial.own_budget = (trial.config.train.steps, trial.config.train.time_budget_minutes)
    except Exception as error:  # reported with the trial
        trial.status = "failed"
        trial.reason = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
    return trial


def run_trials(
    trials: Sequence[Trial], minutes: float, slice_minutes: float, unit: str = "minutes"
) -> bool:
    """Trains ``trials`` (every config's) side by side to ``minutes`` training minutes each (or
    steps, by ``unit``) and scores them there; a failure is recorded, not raised. True when
    preempted."""
    for trial in trials:
        if trial.config is None:
            continue
        if unit == "steps":
            trial.config.train.steps = int(minutes)
            trial.config.train.time_budget_minutes = 0.0
        else:
            trial.config.train.time_budget_minutes = minutes
    if train_in_slices(trials, slice_minutes):
        return True
    for trial in trials:
        _score(trial, minutes, unit)
    return False


def train_to_convergence(trials: Sequence[Trial], settings: Settings) -> bool:
    """Trains ``trials`` on under the final runs' budget (``settings``' over each config's own),
    so that each ends where its early stopping or that budget ends it, as a final run would,
    and scores each by the mean of its last ``CONVERGED_POINTS`` validations. True when
    preempted."""
    for trial in trials:
        if trial.config is None:
            continue
        trial.config.train.steps, trial.config.train.time_budget_minutes = trial.own_budget
        apply_budget(trial.config, settings)
    if train_in_slices(trials, settings.slice_minutes):
        return True
    for trial in trials:
        _score(trial, None)
    return False


def best_trial(trials: Sequence[Trial]) -> Trial | None:
    """The scored trial with the highest validation BLEU; ties go to the lower perplexity."""
    return next(iter(_ranked(trials)), None)


def halve(trials: Sequence[Trial], keep_each: str | None = None) -> list[Trial]:
    """The trials that go on to the next rung, best first.

    Plain successive halving keeps the better half (rounded up) by validation BLEU. With
    ``keep_each`` (a tuned key), the best scored trial of each of that key's values goes on
    first, whatever its rank, and the better half is filled from the rest: a value is then
    judged only at the last rung, where its effect has had time to show. Dropout is the case in
    point: at the first rungs no run overfits yet, so the lower rate always looks better.
    """
    ranked = _ranked(trials)
    keep = -(-len(trials) // 2)
    if keep_each is None:
        return ranked[:keep]
    kept: list[Trial] = []
    for trial in ranked:  # the best of each value, in rank order
        value = dict(trial.point).get(keep_each)
        if all(dict(other.point).get(keep_each) != value for other in kept):
            kept.append(trial)
    kept += [trial for trial in ranked if trial not in kept][: max(keep - len(kept), 0)]
    return sorted(kept, key=ranked.index)


def _ranked(trials: Sequence[Trial]) -> list[Trial]:
    scored = [t for t in trials if t.status == "ok" and t.validation_bleu is not None]
    return sorted(scored, key=lambda t: (-t.validation_bleu, t.validation_perplexity or 0.0))


def reuse_winners(results: Sequence[ModelTuning], outcomes: Sequence, tuning: Tuning) -> list[str]:
    """Final runs that start from their config's winning trial instead of from scratch.

    The winning trial is the beginning of the final run of its seed: the same config and seed
    (resuming is exact, so the rungs' pauses change nothing, and more steps or minutes do not
    change a run: ``config.NOT_IDENTITY``). Whenever the final run's budget reaches at least as
    far as the trial trained, the trial's folder is copied to that run's, and the final run
    continues it to its own budget or convergence; a trial already there is the final run. Only
    runs whose folder does not exist yet are filled this way. Picked for its validation BLEU,
    the copy may score a little luckier on the test set than a fresh seed would; every config
    gets the same treatment, and the report says which runs.

    Returns:
      The names of the runs copied, now and by earlier invocations of the same comparison.
    """
    copied = []
    for result in results:
        winner = next((t for t in result.trials if t.point == result.chosen), None)
        if winner is None or winner.status != "ok" or winner.config is None:
            continue
        for outcome in outcomes:
            if (
                outcome.spec.name == result.spec.name
                and _same_run(winner, outcome)
                and _budget_reaches(outcome.config, winner, tuning)
            ):
                _copy_winner(winner, outcome)
                if outcome.run.winning_trial_file.exists():
                    copied.append(outcome.name)
    return copied


def _same_run(winner: Trial, outcome: RunOutcome) -> bool:
    """Whether the final run ``outcome`` would train exactly what ``winner`` trained, for as
    long as it trained: the same seed, and no difference in any setting that changes a run."""
    if outcome.config is None or outcome.config.seed != winner.config.seed:
        return False
    return not config_lib.identity_differences(winner.config, outcome.config)


def _budget_reaches(final: ml_collections.ConfigDict, winner: Trial, tuning: Tuning) -> bool:
    """Whether a final run of config ``final`` trains at least as far as ``winner`` did: its
    last rung's horizon, in the unit the rungs count, and no fewer steps or minutes than the
    trial spent in the other."""
    if tuning.converge:  # the winner trained under the final runs' own budget
        return True
    horizon = tuning.rung_minutes(tuning.rungs - 1)
    steps, minutes = final.train.steps, final.train.time_budget_minutes or math.inf
    if tuning.unit == "steps":
        return horizon <= steps and (winner.train_minutes or 0.0) <= minutes
    return horizon <= minutes and (winner.step or 0) <= steps


def _copy_winner(winner: Trial, outcome: RunOutcome) -> None:
    """The winning trial's folder as the final run's, marked so; never over an existing run
    (a folder holding only the run's tuning record is not one)."""
    if outcome.run.config_file.exists():
        return
    logger.info(
        "== %s: starts from the winning trial %s (copied; trained on to the final budget)",
        outcome.name,
        winner.run.path.name,
    )
    # The config last: it makes the folder a run. A copy that a Ctrl-C cut short (minutes of
    # checkpoints) is then copied again by the rerun, instead of trained on as it was left.
    config_name = winner.run.config_file.name
    top = winner.run.path

    def not_the_config(folder, names) -> list[str]:
        return [config_name] if Path(folder) == top else []

    shutil.copytree(top, outcome.run.path, dirs_exist_ok=True, ignore=not_the_config)
    outcome.run.winning_trial_file.write_text(str(winner.run.path) + "\n")
    shutil.copy2(winner.run.config_file, outcome.run.config_file)


def _validation_splits(specs: Sequence[RunSpec], settings: Settings, tuning: Tuning) -> dict:
    """Each config's validation split (the one that scores its trials; "?" for a config that
    cannot be built). Warns when the configs read ``train.learning_rate`` under different
    schedules (the same values would then be different rates)."""
    splits, schedules = {}, set()
    for spec in specs:
        try:
            config = run_config(spec, settings, 0)
        except Exception:  # reported by each trial
            splits[spec.name] = "?"
            continue
        splits[spec.name] = config.data.eval_split
        schedules.add(config.train.schedule)
    rates = dict(tuning.grid).get("train.learning_rate", ())
    if rates and not isinstance(rates[0], Scale) and len(schedules) > 1:
        logger.warning(
            "the configs use the schedules %s, which read train.learning_rate differently; give "
            "them one (e.g. --config.train.schedule=warmup_rsqrt) to sweep the same peak rates",
            sorted(schedules),
        )
    return splits


def tune(
    specs: Sequence[RunSpec], settings: Settings, tuning: Tuning, root: Path
) -> list[ModelTuning]:
    """Runs every config's trials, rung by rung (stopping when preempted); returns what each
    config chose: its best trial at the last rung."""
    splits = _validation_splits(specs, settings, tuning)
    trial_settings = dataclasses.replace(settings, budget_minutes=None, budget_steps=None)
    results = [
        ModelTuning(
            spec,
            [make_trial(spec, point, trial_settings, root) for point in tuning.points()],
            splits[spec.name],
        )
        for spec in specs
    ]
    check_reuse([trial for result in results for trial in result.trials])
    survivors = {id(result): list(result.trials) for result in results}
    for rung in range(tuning.rungs):
        minutes = tuning.rung_minutes(rung)
        running = [trial for result in results for trial in survivors[id(result)]]
        converging = tuning.converge and rung + 1 == tuning.rungs
        logger.info(
            "== tuning, rung %d of %d: %d trials to %s",
            rung + 1,
            tuning.rungs,
            len(running),
            "convergence" if converging else f"{minutes:g} training {tuning.unit}",
        )
        if converging:
            if train_to_convergence(running, settings):
                return results
        elif run_trials(running, minutes, settings.slice_minutes, tuning.unit):
            return results
        if rung + 1 < tuning.rungs:
            for result in results:  # the better half goes on (the same count for every model)
                survivors[id(result)] = halve(survivors[id(result)], tuning.keep_each)
    for result in results:
        _choose(result, survivors[id(result)])
    summary = report_json(tuning, results)
    for line in grid_edges(summary["grid"], summary["models"]):
        logger.warning("== at the end of the grid: %s; nothing beyond it was tried", line)
    return results


def _choose(result: ModelTuning, last_rung: Sequence[Trial]) -> None:
    """Sets ``result.chosen`` to the best trial of the last rung, if any was scored."""
    best = best_trial(last_rung)
    if best is None:
        earlier = any(trial.rungs for trial in result.trials)  # scored before the last rung
        logger.warning(
            "== %s: no trial was scored%s; its final runs keep its own values (see the trials' "
            "reasons in the report)",
            result.spec.name,
            " at the last rung" if earlier else "",
        )
    else:
        result.chosen = best.point
        logger.info("== %s: chose %s", result.spec.name, point_name(best.point))


# The report's tuning section (called by seq2seq.compare.report).


def _trial_row(result: ModelTuning, trial: Trial) -> dict:
    return {
        "model": result.spec.name,
        **{key: shown(value) for key, value in trial.point},
        "status": trial.status if trial.status == "ok" else f"{trial.status}: {trial.reason}",
        "validation_bleu": trial.validation_bleu,
        "validation_perplexity": trial.validation_perplexity,
        "validation_sentences": trial.validation_sentences,
        "step": trial.step,
        "train_minutes": trial.train_minutes,
        "peak_learning_rate": trial.peak_learning_rate,
        "rung_bleu": list(trial.rungs),  # validation BLEU at the end of each rung it reached
        "chosen": "✓" if trial.point == result.chosen else "",
        "workdir": str(trial.run.path),
    }


def report_json(tuning: Tuning, results: Sequence[ModelTuning]) -> dict:
    """The tuning section of report.json."""
    return {
        "grid": {key: [shown(value) for value in values] for key, values in tuning.grid},
        "minutes_per_trial": tuning.minutes,
        "budget_unit": tuning.unit,
        "rungs": tuning.rungs,
        # the halving rule: "plain" (the better half) or "best of each KEY value, then the
        # better half" (--tune_keep_each)
        "halving": (
            f"keep the best of each {tuning.keep_each} value, then the better half"
            if tuning.keep_each
            else "the better half"
        ),
        "keep_each": tuning.keep_each,
        # --tune_to_convergence: the last rung trained to convergence, scored by the mean of its
        # last CONVERGED_POINTS validations
        "last_rung": "convergence" if tuning.converge else "its budget",
        "rung_minutes": [tuning.rung_minutes(rung) for rung in range(tuning.rungs)],
        "samples": tuning.samples or None,
        "sample_seed": SAMPLE_SEED if tuning.samples else None,
        "trials_per_model": {result.spec.name: len(result.trials) for result in results},
        "chosen_on": "validation",
        "models": [
            {
                "name": result.spec.name,
                "validation_split": result.split,
                "chosen": (
                    {key: shown(value) for key, value in result.chosen}
                    if result.chosen is not None
                    else None
                ),
                "trials": [_trial_row(result, trial) for trial in result.trials],
            }
            for result in results
        ],
    }


def write_tuning_records(
    tuning: Tuning, results: Sequence[ModelTuning], outcomes: Sequence[RunOutcome]
) -> None:
    """Writes into each final run's folder how its values were chosen: its config's trials and
    choice (``report_json`` for that config alone), and whether the run started from the
    winning trial (``reuse_winners``), so that the run's record carries them."""
    for result in results:
        record = report_json(tuning, [result])
        for outcome in outcomes:
            if outcome.spec.name == result.spec.name and outcome.status == "ok":
                outcome.run.create()
                started = outcome.run.winning_trial_file.exists()
                text = json.dumps({**record, "started_from_winning_trial": started}, indent=2)
                outcome.run.tuning_file.write_text(text + "\n")


def plot(tuning: Tuning, results: Sequence[ModelTuning], path: Path) -> Path:
    """The figure of validation BLEU against the (first) swept value; returns ``path``.

    With successive halving, one line per model and rung ("model, 4 min"): each line compares
    the trials that reached that rung, at that rung's minutes, never a trial stopped early
    beside one trained longer."""
    lines = {}
    for result in results:
        for rung in range(tuning.rungs):
            scored = [
                (_plotted(trial.point), trial.rungs[rung])
                for trial in result.trials
                if len(trial.rungs) > rung
            ]
            label = result.spec.name
            if tuning.rungs > 1:
                unit = "min" if tuning.unit == "minutes" else "steps"
                last = tuning.converge and rung + 1 == tuning.rungs
                label += ", converged" if last else f", {tuning.rung_minutes(rung):g} {unit}"
            if scored:
                lines[label] = scored
    figures.plot_tuning(lines, path, keys=[_axis_key(key, values) for key, values in tuning.grid])
    return path


def _axis_key(key: str, values: Sequence[object]) -> str:
    """A key as the figure names it: a relative one says its values are factors."""
    return f"{key} (factor of each config's)" if isinstance(values[0], Scale) else key


def _plotted(point: Point) -> dict[str, object]:
    """A trial's point as the figure draws it: a ``Scale`` as its factor."""
    return {
        _axis_key(key, [value]): value.factor if isinstance(value, Scale) else value
        for key, value in point
    }
