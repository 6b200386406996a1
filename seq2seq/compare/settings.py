"""What every run of one comparison shares (``Settings``), checked where it is built.

Apart from the runner, which trains, so that ``python -m seq2seq.compare`` refuses a bad budget,
beam or checkpoint rule before JAX is imported (tests/test_cli_errors.py).
"""

from __future__ import annotations

import dataclasses

from seq2seq import cli
from seq2seq import config as config_lib
from seq2seq.checkpoints.rule import describe_checkpoint_rule


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
