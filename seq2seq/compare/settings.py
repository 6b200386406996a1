"""What every run of one comparison shares (``Settings``), checked where it is built, and the
config each run gets from it (``run_config``).

Kept apart from the runner, which trains and imports JAX, so that ``python -m seq2seq.compare``
refuses a bad budget, beam, checkpoint rule or tuning grid before JAX loads
(tests/test_cli_errors.py).
"""

from __future__ import annotations

import dataclasses

import ml_collections

from seq2seq import cli
from seq2seq import config as config_lib
from seq2seq.checkpoints.rule import describe_checkpoint_rule
from seq2seq.compare.suites import RunSpec


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every run of one comparison shares, so that the comparison is fair."""

    overrides: tuple[tuple[str, object], ...] = ()  # --config.KEY=VALUE, applied to every run
    budget_minutes: float | None = None  # the same training-time budget for every run
    budget_steps: int | None = None  # or the same number of steps (the papers' protocol)
    seeds: int = 1  # runs per config, seeds config.seed, config.seed + 1, ...
    beam_size: int = 4  # the same decoding for every run
    alpha: float = 0.6
    split: str | None = None  # default: the configs' test split; a role name is resolved
    max_test_sentences: int = 0  # score only the first N test sentences; 0: all
    checkpoint: str = "latest"  # a key of CHECKPOINTS, or average:K
    slice_minutes: float = 5.0  # runs take turns this many training minutes; 0: one by one

    def __post_init__(self):
        describe_checkpoint_rule(self.checkpoint)  # refuses any other rule
        if self.budget_minutes is not None and self.budget_steps is not None:
            raise config_lib.ConfigError(
                "--budget_minutes and --budget_steps are two different budgets; give one"
            )
        if self.budget_steps is not None and self.budget_steps < 1:
            raise config_lib.ConfigError(f"--budget_steps {self.budget_steps} must be >= 1")
        if self.budget_minutes is not None and self.budget_minutes <= 0:
            raise config_lib.ConfigError(f"--budget_minutes {self.budget_minutes} must be > 0")
        # decoding and scoring, which come only after every run has trained
        cli.check_decoding_flags(self.beam_size, self.alpha)
        if self.max_test_sentences < 0:
            raise config_lib.ConfigError(
                f"--max_test_sentences {self.max_test_sentences} must be >= 0 (0: all of them)"
            )
        if self.slice_minutes < 0:
            raise config_lib.ConfigError(
                f"--slice_minutes {self.slice_minutes} must be >= 0 (0: one run after another)"
            )


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
    apply_budget(config, settings)
    config.seed = config.seed + seed_index
    return config_lib.validate(config)


def apply_budget(config: ml_collections.ConfigDict, settings: Settings) -> None:
    """The comparison's budget (``--budget_minutes`` or ``--budget_steps``) over the config's."""
    if settings.budget_minutes is not None:
        config.train.time_budget_minutes = settings.budget_minutes
    if settings.budget_steps is not None:
        config.train.steps = settings.budget_steps
        config.train.time_budget_minutes = 0.0  # equal steps: no clock may cut a run short


def run_names(spec: RunSpec, seeds: int, first_seed: int = 0) -> list[str]:
    """The folders of ``spec``'s runs in a comparison's work directory: its name, or one per
    seed, named by the seed it trains (``NAME-seedK``: with ``--config.seed=5 --seeds 2``,
    ``-seed5`` and ``-seed6``)."""
    if seeds == 1:
        return [spec.name]
    return [f"{spec.name}-seed{first_seed + k}" for k in range(seeds)]


def first_seed(spec: RunSpec, settings: Settings) -> int:
    """The seed of ``spec``'s first run (its config's, after every override); 0 for a config
    that fails to load, whose runs are reported as failed under that name."""
    try:
        return int(run_config(spec, settings, 0).seed)
    except Exception:  # noqa: BLE001 (the comparison reports the config's error, run by run)
        return 0
