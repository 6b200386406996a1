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
A trial is an ordinary run in ``WORKDIR/tuning/<config>/<key=value,...>``, so an
interrupted sweep resumes where it stopped (the budget counts across resumes) and a finished
trial is reused. Its score at a rung is its validation record at the end of that rung's budget
in ``metrics.jsonl`` (greedy BLEU and perplexity on ``data.eval_split``, the first
``eval.num_examples`` sentences): nothing here decodes the test split. The point with the highest
validation BLEU (ties: the lower validation perplexity) becomes that config's overrides for its
final runs, applied after the config file and the suite's overrides; a ``--config`` override of a
tuned key is refused, so the tuned value is never silently replaced. The report lists each trial's
highest logged learning rate, since ``train.learning_rate`` is a multiplier of d_model^-0.5 under
the "transformer" schedule.

The grid, its fixed-seed sample and the halving rule are a few lines here rather than optuna's
``GridSampler`` and ``SuccessiveHalvingPruner``: a trial is a run directory, trained in slices by
separate processes and resumed, whose ``metrics.jsonl`` is the one record of its score; an optuna
study would be a second record of the same trials to keep in step, and its (asynchronous)
halving promotes trials in the order their results arrive, where here every config's rung must
see all of its trials before any goes on.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import random
import shutil
from collections.abc import Sequence
from pathlib import Path

import ml_collections

from seq2seq import config as config_lib
from seq2seq.compare.runner import (
    RunOutcome,
    Settings,
    check_reuse,
    run_config,
    train_in_slices,
)
from seq2seq.compare.suites import RunSpec
from seq2seq.report import figures
from seq2seq.run_directory import RunDirectory

logger = logging.getLogger(__name__)

SAMPLE_SEED = 0  # draws the --tune_samples points (the same for every model and every rerun)
TUNING_DIR = "tuning"  # trials live in WORKDIR/tuning/<config name>/<point>
# Set by the trial budget itself; a --tune of them would make the budgets unequal.
UNTUNABLE = frozenset({"train.time_budget_minutes", "train.steps"})
WINNER_MARK = "winning_trial.txt"  # in a final run copied from its winning trial: the trial

Point = tuple[tuple[str, object], ...]  # (dotted key, value) per swept key, in grid order


@dataclasses.dataclass(frozen=True)
class Scale:
    """A grid value relative to each config's own: ``x0.5`` is half of what the config (with its
    suite's overrides) sets. One grid then gives every size and family the same trials around
    its own rate, whatever its schedule."""

    factor: float

    def __repr__(self) -> str:
        return f"x{self.factor:g}"

    def of(self, value: int | float) -> int | float:
        return round(value * self.factor) if isinstance(value, int) else value * self.factor


def shown(value: object) -> object:
    """A grid value as report.json keeps it: ``"x0.5"`` for a ``Scale``, else itself."""
    return repr(value) if isinstance(value, Scale) else value


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The grid every config of a comparison is tuned over, and each trial's budget."""

    grid: tuple[tuple[str, tuple[object, ...]], ...]  # (dotted key, its values), --tune order
    minutes: float  # every trial's budget at the first rung, in ``unit`` (doubled at each rung)
    samples: int = 0  # 0: every point of the grid; N: N points drawn with SAMPLE_SEED
    rungs: int = 1  # successive-halving rungs; 1: every trial trains ``minutes`` and is scored
    # "minutes" of training (--tune_minutes), or "steps" (--tune_steps): the same trials at
    # every model size, whatever each size's speed, e.g. all past the longest warm-up.
    unit: str = "minutes"

    def rung_minutes(self, rung: int) -> float:
        """The budget, in ``unit``, of a trial that reaches ``rung`` (0-based)."""
        return self.minutes * 2**rung

    @property
    def keys(self) -> list[str]:
        return [key for key, _ in self.grid]

    def points(self) -> list[Point]:
        """The points every config is trained at, the same list for every config."""
        keys = self.keys
        product = [
            tuple(zip(keys, values, strict=True))
            for values in itertools.product(*(values for _, values in self.grid))
        ]
        if not self.samples:
            return product
        chosen = sorted(random.Random(SAMPLE_SEED).sample(range(len(product)), self.samples))
        return [product[index] for index in chosen]


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


def _parse_value(key: str, text: str, kind: type) -> object:
    """``text`` as a value of the schema field ``key`` (whose default is of type ``kind``)."""
    try:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        return kind(text)
    except ValueError:
        raise config_lib.ConfigError(
            f"--tune {key}: {text!r} is not {_KINDS.get(kind, kind.__name__)}, as "
            f"config.{key} needs"
        ) from None


def parse_tune_flag(text: str) -> tuple[str, tuple[object, ...]]:
    """``"train.learning_rate=1e-3,3e-3"`` -> ``("train.learning_rate", (0.001, 0.003))``.

    Values take the type of the schema's field (``float`` for a learning rate, ``int`` for
    warm-up steps) and must pass ``config.validate`` on their own.

    Raises:
      ConfigError: one line naming the key or value at fault and the expected form.
    """
    key, equals, listed = text.partition("=")
    key = key.strip()
    if not equals or not key:
        raise config_lib.ConfigError(f"--tune {text!r} is not KEY=V1,V2,...")
    schema = config_lib.default_config()
    defaults = dict(config_lib.flatten(schema))
    family_keys = [for_model(key, name) for name in config_lib.MODEL_NAMES]
    if key not in defaults and all(k in defaults for k in family_keys):
        defaults[key] = defaults[family_keys[0]]  # model.FIELD: each config's own model's FIELD
    if key not in defaults:
        raise config_lib.ConfigError(f"--tune: {config_lib.unknown_key_message(key, schema)}")
    if key in UNTUNABLE:
        raise config_lib.ConfigError(
            f"--tune {key}: every trial trains for --tune_minutes or --tune_steps; tune another key"
        )
    texts = [value.strip() for value in listed.split(",") if value.strip()]
    if not texts:
        raise config_lib.ConfigError(f"--tune {key}= lists no values; give KEY=V1,V2,...")
    if any(text.startswith("x") for text in texts):
        return key, _parse_scales(key, texts, type(defaults[key]))
    values = tuple(_parse_value(key, value, type(defaults[key])) for value in texts)
    if len(set(values)) != len(values):
        raise config_lib.ConfigError(f"--tune {key} repeats a value: {listed}")
    for value, name in itertools.product(values, config_lib.MODEL_NAMES):
        config = config_lib.default_config()
        config.model.name = name
        config_lib.set_value(config, for_model(key, name), value)
        try:
            config_lib.validate(config)
        except config_lib.ConfigError as error:
            raise config_lib.ConfigError(f"--tune {key}={value!r}: {error}") from None
    return key, values


def _parse_scales(key: str, texts: list[str], kind: type) -> tuple[Scale, ...]:
    """``["x0.5", "x2"]`` as factors of each config's own value of ``key`` (a number field);
    every value of one key is relative, or none. A scaled value is checked when its trial's
    config is built (a bad one fails that trial, with its reason)."""
    if kind not in (int, float):
        raise config_lib.ConfigError(
            f"--tune {key}: x-factors scale a number, and config.{key} is "
            f"{_KINDS.get(kind, kind.__name__)}; list its values"
        )
    try:
        if not all(text.startswith("x") for text in texts):
            raise ValueError
        factors = tuple(float(text[1:]) for text in texts)
    except ValueError:
        raise config_lib.ConfigError(
            f"--tune {key}: give every value as a factor of each config's own (x0.5,x1,x2) or "
            f"none, not {','.join(texts)}"
        ) from None
    if any(not factor > 0 for factor in factors) or len(set(factors)) != len(factors):
        raise config_lib.ConfigError(
            f"--tune {key}: factors must be distinct and above 0, not {','.join(texts)}"
        )
    return tuple(Scale(factor) for factor in factors)


def for_model(key: str, model_name: str) -> str:
    """A tuned key as one model family reads it: ``model.FIELD`` (a field every family has, such
    as ``model.dropout_rate``) is ``model.<model_name>.FIELD``; any other key is itself. So one
    grid tunes the same idea in a Transformer and an RNNsearch, with the same trials."""
    parts = key.split(".")
    if len(parts) == 2 and parts[0] == "model" and parts[1] != "name":
        return f"model.{model_name}.{parts[1]}"
    return key


def _point_for(point: Point, config: ml_collections.ConfigDict) -> Point:
    """``point`` as overrides of ``config``: its keys as ``config``'s model family reads them
    (see ``for_model``), and a ``Scale`` as that factor of ``config``'s own value."""
    overrides = []
    for key, value in point:
        key = for_model(key, config.model.name)
        if isinstance(value, Scale):
            value = value.of(config_lib.lookup(config, key))
        overrides.append((key, value))
    return tuple(overrides)


def make_tuning(
    flags: Sequence[str],
    minutes: float | None,
    samples: int = 0,
    rungs: int = 1,
    steps: int | None = None,
) -> Tuning | None:
    """The ``Tuning`` of ``--tune`` flags, ``--tune_minutes`` or ``--tune_steps``,
    ``--tune_samples`` and ``--tune_rungs``; None without ``--tune``.

    Raises:
      ConfigError: a bad flag, or a combination that cannot run (one line).
    """
    if not flags:
        if minutes is not None or steps is not None or samples or rungs != 1:
            raise config_lib.ConfigError(
                "--tune_minutes, --tune_steps, --tune_samples and --tune_rungs need --tune "
                "KEY=V1,V2,... (what to tune)"
            )
        return None
    budget, unit = _budget(minutes, steps)
    grid = [parse_tune_flag(flag) for flag in flags]
    keys = [key for key, _ in grid]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise config_lib.ConfigError(f"--tune {repeated[0]} is given twice; list its values once")
    _check_points(grid, samples, rungs)
    return Tuning(tuple(grid), budget, samples, rungs, unit=unit)


def _budget(minutes: float | None, steps: int | None) -> tuple[float, str]:
    """Every trial's first-rung budget and its unit, from ``--tune_minutes`` or ``--tune_steps``."""
    if minutes is not None and steps is not None:
        raise config_lib.ConfigError(
            "give --tune_minutes or --tune_steps, not both: every trial gets one kind of budget"
        )
    if steps is not None:
        if steps < 1:
            raise config_lib.ConfigError(f"--tune_steps {steps}: give at least 1 step per trial")
        return float(steps), "steps"
    if minutes is None or minutes <= 0:
        raise config_lib.ConfigError(
            "--tune needs --tune_minutes M > 0 or --tune_steps N: every trial's equal budget"
        )
    return float(minutes), "minutes"


def _check_points(grid: list, samples: int, rungs: int) -> None:
    """Refuses a sample of the grid larger than the grid, and more halvings than trials allow."""
    size = 1
    for _, values in grid:
        size *= len(values)
    if samples < 0 or samples >= size and samples:
        raise config_lib.ConfigError(
            f"--tune_samples {samples}: the grid has {size} points; sample 1 to {size - 1} of "
            "them, or drop --tune_samples to train them all"
        )
    points = samples or size
    if rungs < 1 or points < 2 ** (rungs - 1):
        raise config_lib.ConfigError(
            f"--tune_rungs {rungs}: {points} trials per model can be halved at most "
            f"{max(points.bit_length() - 1, 0)} times; use 1 to {points.bit_length()} rungs"
        )


# The schedules that ramp up over train.warmup_steps (the others have no warm-up to outlast).
WARMUP_SCHEDULES = ("transformer", "warmup_rsqrt", "warmup_cosine")


def check_trials_outlast_warmup(
    specs: Sequence[RunSpec], settings: Settings, tuning: Tuning
) -> None:
    """Refuses trials in steps whose first rung ends inside a config's warm-up: scored there,
    a trial would compare rates before any of them had been reached. (Trials in minutes cannot
    be checked before they run; their report shows each trial's step.)

    Raises:
      ConfigError: one line naming the config, its warm-up and the least ``--tune_steps``.
    """
    if tuning.unit != "steps":
        return
    for spec in specs:
        for point in tuning.points():
            try:
                family = run_config(spec, settings, 0)
                trial_spec = dataclasses.replace(
                    spec, overrides=(*spec.overrides, *_point_for(point, family))
                )
                train = run_config(trial_spec, settings, 0).train
            except Exception:  # noqa: BLE001 (a config that cannot be built fails as its trial)
                continue
            if train.schedule in WARMUP_SCHEDULES and tuning.minutes <= train.warmup_steps:
                raise config_lib.ConfigError(
                    f"--tune_steps {tuning.minutes:g} ends inside {spec.name}'s warm-up "
                    f"({train.warmup_steps:,} steps at {point_name(point)}): give every trial "
                    f"more, at least --tune_steps {train.warmup_steps + 1}"
                )


def check_overrides(tuning: Tuning, settings: Settings) -> None:
    """Refuses a ``--config`` override of a tuned key (it would replace the tuned value)."""
    for key, value in settings.overrides:
        for tuned in tuning.keys:
            if key in {for_model(tuned, name) for name in config_lib.MODEL_NAMES}:
                raise config_lib.ConfigError(
                    f"--config.{key}={value} would replace the value --tune {tuned} chooses; "
                    "drop one"
                )


def point_name(point: Point) -> str:
    """A trial's folder name: ``train.learning_rate=0.001,train.warmup_steps=300``."""
    return ",".join(f"{key}={value!r}".replace("/", "_").replace("'", "") for key, value in point)


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


def _score(trial: Trial, minutes: float, unit: str = "minutes") -> None:
    """Fills the trial's numbers from its own ``metrics.jsonl``, as they stood at ``minutes``
    training minutes (or steps, by ``unit``): the first validation at or after that point is the
    one written when a budget of ``minutes`` ran out (later ones belong to a later rung); a run
    that ended earlier (its steps, or early stopping) is scored by its last."""
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
            spec, overrides=(*spec.overrides, *_point_for(point, family))
        )
        trial.config = run_config(trial_spec, settings, 0)
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


def best_trial(trials: Sequence[Trial]) -> Trial | None:
    """The scored trial with the highest validation BLEU; ties go to the lower perplexity."""
    return next(iter(_ranked(trials)), None)


def _ranked(trials: Sequence[Trial]) -> list[Trial]:
    scored = [t for t in trials if t.status == "ok" and t.validation_bleu is not None]
    return sorted(scored, key=lambda t: (-t.validation_bleu, t.validation_perplexity or 0.0))


def reuse_winners(
    results: Sequence[ModelTuning], outcomes: Sequence, settings: Settings, tuning: Tuning
) -> list[str]:
    """Final runs that are their config's winning trial, copied instead of trained again.

    When the last rung's minutes equal the final budget, the winning trial is exactly the final
    run of its seed (the same config, seed and minutes; resuming is exact, so the rungs' pauses
    change nothing): its folder is copied to that run's, and the comparison reuses it as it
    reuses any finished run. Only runs whose folder does not exist yet are filled this way.
    Picked for its validation BLEU, the copy may score a little luckier on the test set than a
    fresh seed would; every config gets the same treatment, and the report says which runs.

    Returns:
      The names of the runs copied, now and by earlier invocations of the same comparison.
    """
    last = tuning.rung_minutes(tuning.rungs - 1)
    final = settings.budget_steps if tuning.unit == "steps" else settings.budget_minutes
    other = settings.budget_minutes if tuning.unit == "steps" else settings.budget_steps
    if other is not None or final != last:
        return []
    copied = []
    for result in results:
        winner = next((t for t in result.trials if t.point == result.chosen), None)
        if winner is None or winner.status != "ok" or winner.config is None:
            continue
        for outcome in outcomes:
            if outcome.spec.name == result.spec.name and _same_run(winner, outcome):
                _copy_winner(winner, outcome)
                if (outcome.run.path / WINNER_MARK).exists():
                    copied.append(outcome.name)
    return copied


def _same_run(winner: Trial, outcome: RunOutcome) -> bool:
    """Whether the final run ``outcome`` would train exactly what ``winner`` trained: the same
    seed, and no difference in any setting that changes a run."""
    if outcome.config is None or outcome.config.seed != winner.config.seed:
        return False
    return not config_lib.identity_differences(winner.config, outcome.config)


def _copy_winner(winner: Trial, outcome: RunOutcome) -> None:
    """The winning trial's folder as the final run's, marked so; never over an existing run
    (a folder holding only the run's tuning record is not one)."""
    if outcome.run.config_file.exists():
        return
    logger.info(
        "== %s: the winning trial %s, copied (trained to the final budget)",
        outcome.name,
        winner.run.path.name,
    )
    shutil.copytree(winner.run.path, outcome.run.path, dirs_exist_ok=True)
    (outcome.run.path / WINNER_MARK).write_text(str(winner.run.path) + "\n")


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
        logger.info(
            "== tuning, rung %d of %d: %d trials to %g training %s",
            rung + 1,
            tuning.rungs,
            len(running),
            minutes,
            tuning.unit,
        )
        if run_trials(running, minutes, settings.slice_minutes, tuning.unit):
            return results
        if rung + 1 < tuning.rungs:
            for result in results:  # the better half goes on (the same count for every model)
                keep = -(-len(survivors[id(result)]) // 2)
                survivors[id(result)] = _ranked(survivors[id(result)])[:keep]
    for result in results:
        _choose(result, survivors[id(result)])
    return results


def _choose(result: ModelTuning, last_rung: Sequence[Trial]) -> None:
    """Sets ``result.chosen`` to the best trial of the last rung, if any was scored."""
    best = best_trial(last_rung)
    if best is None:
        logger.warning(
            "== %s: no trial was scored; its final runs keep its own values", result.spec.name
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
    choice (``report_json`` for that config alone), so that the run's record carries them."""
    for result in results:
        record = report_json(tuning, [result])
        for outcome in outcomes:
            if outcome.spec.name == result.spec.name and outcome.status == "ok":
                outcome.run.create()
                outcome.run.tuning_file.write_text(json.dumps(record, indent=2) + "\n")


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
                label += f", {tuning.rung_minutes(rung):g} {unit}"
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
