"""The grid a comparison is tuned over: ``--tune`` flags parsed into points (values, or factors
of each config's own value), each trial's budget, and the checks made before any trial trains.

``seq2seq.compare.tuning`` trains the points; this module only says which they are.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Sequence

import ml_collections

from seq2seq import config as config_lib
from seq2seq.compare.settings import Settings, run_config
from seq2seq.compare.suites import FRONTIER_TUNED, RunSpec
from seq2seq.config import for_model

SAMPLE_SEED = 0  # draws the --tune_samples points (the same for every model and every rerun)
# Set by the trial budget itself; a --tune of them would make the budgets unequal.
UNTUNABLE = frozenset({"train.time_budget_minutes", "train.steps"})

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
    # --tune_keep_each KEY: every halving keeps the best trial of each value of KEY (a tuned key)
    # before the better half of the rest, so that no value of KEY (e.g. dropout, which decides
    # only once runs overfit) is dropped before the last rung. None: plain halving.
    keep_each: str | None = None
    # --tune_to_convergence: the last rung trains its trials on to convergence (each run's early
    # stopping, within the final runs' budget) and scores each by the mean validation BLEU of its
    # last points (tuning.CONVERGED_POINTS), so that a regularisation value is judged where the
    # runs have had time to overfit; a fixed last rung can end before that (docs/results.md).
    # The winner is its seed's final run.
    converge: bool = False

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


def scaled_tuned_values(specs: Sequence[RunSpec], tuning: Tuning | None) -> list[str]:
    """Where ``--tune``'s x-factors scale a value that ``FRONTIER_TUNED`` already chose and a run
    of ``specs`` holds (``--suite frontier_tuned``'s rows): ``"transformer-medium's
    train.learning_rate 0.002"`` for each. The committed trials scaled ``--suite frontier``'s
    untuned rows, so such trials are not theirs."""
    if tuning is None:
        return []
    scaled = [key for key, values in tuning.grid if values and isinstance(values[0], Scale)]
    found = []
    for spec in specs:
        chosen = FRONTIER_TUNED.get(spec.name, {})
        family = spec.name.split("-")[0]
        holds = dict(spec.overrides)
        for key in scaled:
            resolved = for_model(key, family)
            if resolved in chosen and holds.get(resolved) == chosen[resolved]:
                found.append(f"{spec.name}'s {resolved} {chosen[resolved]:g}")
    return found


def point_for(point: Point, config: ml_collections.ConfigDict) -> Point:
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
    keep_each: str | None = None,
    converge: bool = False,
) -> Tuning | None:
    """The ``Tuning`` of ``--tune`` flags, ``--tune_minutes`` or ``--tune_steps``,
    ``--tune_samples``, ``--tune_rungs``, ``--tune_keep_each`` and ``--tune_to_convergence``;
    None without ``--tune``.

    Raises:
      ConfigError: a bad flag, or a combination that cannot run (one line).
    """
    if not flags:
        if minutes is not None or steps is not None or samples or rungs != 1 or keep_each:
            raise config_lib.ConfigError(
                "--tune_minutes, --tune_steps, --tune_samples, --tune_rungs and --tune_keep_each "
                "need --tune KEY=V1,V2,... (what to tune)"
            )
        if converge:
            raise config_lib.ConfigError(
                "--tune_to_convergence needs --tune KEY=V1,V2,... (what to tune)"
            )
        return None
    budget, unit = _budget(minutes, steps)
    grid = [parse_tune_flag(flag) for flag in flags]
    keys = [key for key, _ in grid]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise config_lib.ConfigError(f"--tune {repeated[0]} is given twice; list its values once")
    _check_points(grid, samples, rungs)
    if keep_each is not None and keep_each not in keys:
        raise config_lib.ConfigError(
            f"--tune_keep_each {keep_each}: not a tuned key; give one of {', '.join(keys)}"
        )
    return Tuning(
        tuple(grid), budget, samples, rungs, unit=unit, keep_each=keep_each, converge=converge
    )


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
    for spec, point, train in _trial_trains(specs, settings, tuning):
        if train.schedule in WARMUP_SCHEDULES and tuning.minutes <= train.warmup_steps:
            raise config_lib.ConfigError(
                f"--tune_steps {tuning.minutes:g} ends inside {spec.name}'s warm-up "
                f"({train.warmup_steps:,} steps at {point_name(point)}): give every trial "
                f"more, at least --tune_steps {train.warmup_steps + 1}"
            )


def check_rungs_keep_each_schedule(
    specs: Sequence[RunSpec], settings: Settings, tuning: Tuning
) -> None:
    """Refuses rungs in steps for a config whose schedule decays over ``train.steps``
    (``warmup_cosine``): a trial taken on to the next rung gets more steps, which is another
    schedule and so another run, and its own folder refused it after the first rung's training.

    Raises:
      ConfigError: one line naming the config and the choices.
    """
    if tuning.unit != "steps" or tuning.rungs < 2:
        return
    for spec, _, train in _trial_trains(specs, settings, tuning):
        if train.schedule == "warmup_cosine":
            raise config_lib.ConfigError(
                f"--tune_rungs {tuning.rungs} with --tune_steps: {spec.name}'s warmup_cosine "
                "decays over train.steps, so a trial that goes on to a longer rung would be "
                "another run; use --tune_rungs 1, --tune_minutes, or another train.schedule"
            )


def check_trials_can_converge(specs: Sequence[RunSpec], settings: Settings, tuning: Tuning) -> None:
    """Refuses ``--tune_to_convergence`` for a config without early stopping: its last rung
    would train every trial to the final runs' whole budget, and the report would call that
    convergence.

    Raises:
      ConfigError: one line naming the config and the key to set.
    """
    if not tuning.converge:
        return
    for spec, _, train in _trial_trains(specs, settings, tuning):
        if not train.early_stopping_patience:
            raise config_lib.ConfigError(
                f"--tune_to_convergence trains trials until their early stopping, but "
                f"{spec.name} has none (train.early_stopping_patience=0); set it, e.g. "
                "--config.train.early_stopping_patience=4"
            )


def _trial_trains(specs: Sequence[RunSpec], settings: Settings, tuning: Tuning):
    """``(spec, point, train section)`` of every trial whose config can be built (one that
    cannot fails as its trial)."""
    for spec in specs:
        for point in tuning.points():
            try:
                family = run_config(spec, settings, 0)
                trial_spec = dataclasses.replace(
                    spec, overrides=(*spec.overrides, *point_for(point, family))
                )
                train = run_config(trial_spec, settings, 0).train
            except Exception:  # noqa: BLE001 (a config that cannot be built fails as its trial)
                continue
            yield spec, point, train


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
