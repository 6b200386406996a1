"""The checks a comparison passes before anything is written or trained.

They read the configs and this process's devices only, so ``python -m seq2seq.compare`` runs
them before it loads the training and decoding code: a bad invocation is refused in two to
three seconds (on 2 CPU cores), not after the whole package has loaded (five to six).
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_collections

from seq2seq import config as config_lib
from seq2seq.checkpoints.rule import average_count
from seq2seq.compare.grid import (
    Tuning,
    check_overrides,
    check_rungs_keep_each_schedule,
    check_trials_can_converge,
    check_trials_outlast_warmup,
)
from seq2seq.compare.settings import Settings, run_config
from seq2seq.compare.suites import RunSpec
from seq2seq.data.sources import DataError, available_splits, check_split_keys, resolve_split
from seq2seq.training.sharding import build_checked_mesh


def check_comparison(specs: Sequence[RunSpec], settings: Settings, tuning: Tuning | None) -> None:
    """Refuses, before any training, runs that would share a folder, a scored split that
    training or validation reads, a ``--config`` override of a tuned key, trials in steps that
    would end inside a warm-up, rungs in steps that would change a cosine's length, and trials
    sent to a convergence their config's early stopping never declares."""
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(
            f"two runs would share the folder {duplicates[0]!r}; give the configs distinct names"
        )
    check_splits(specs, settings)
    if tuning is not None:
        check_overrides(tuning, settings)
        check_trials_outlast_warmup(specs, settings, tuning)
        check_rungs_keep_each_schedule(specs, settings, tuning)
        check_trials_can_converge(specs, settings, tuning)


def scored_split(config: ml_collections.ConfigDict, split: str | None) -> str:
    """The split a comparison scores: ``split`` (a role such as ``validation`` is resolved to the
    config's split for it, Multi30k's ``val``), or the config's test split."""
    return resolve_split(config.data, split or "test")


def check_splits(specs: Sequence[RunSpec], settings: Settings) -> None:
    """Refuses, before any training, a comparison that could not score its runs, or would
    score a split they read.

    Training reads ``data.train_split``, and validation (the curves, ``--checkpoint best`` and
    every tuning trial) reads ``data.eval_split``: scores on either would not be test scores.
    A ``--split`` the data lacks, a training or validation stem its folder lacks (Multi30k's
    ``val`` where a corpus says ``valid``), ``--checkpoint average:K`` beyond the checkpoints
    a run keeps, and a mesh this process's devices cannot hold would fail each run only once
    it had started. A config that cannot
    be built, or whose data folder is missing, is passed over here; its runs fail with the
    reason. When no config passes ``seq2seq.config.validate`` (a bad ``--config`` value applies
    to all of them), the first reason is the error, and nothing is written.

    Raises:
      ConfigError: one line naming the config, the problem and the fix.
    """
    count = average_count(settings.checkpoint)
    invalid = []
    for spec in specs:
        try:
            config = run_config(spec, settings, 0)
        except config_lib.ConfigError as error:
            invalid.append(f"{spec.name}: {error}")
            continue
        except Exception:  # reported by its runs
            continue
        if count is not None and count > config.checkpoint.keep:
            raise config_lib.ConfigError(
                f"{spec.name}: --checkpoint {settings.checkpoint} averages the last {count} "
                f"checkpoints but its runs keep {config.checkpoint.keep} (checkpoint.keep); "
                f"lower K or pass --config.checkpoint.keep={count}"
            )
        mesh = config.mesh
        if not (mesh.distributed or mesh.coordinator_address):  # one process: its devices
            try:
                build_checked_mesh(config)  # the mesh, and sentences that split over it
            except ValueError as error:
                raise config_lib.ConfigError(f"{spec.name}: {error}") from error
        try:  # the stems training and validation read, then the one scored
            check_split_keys(config.data, ("train_split", "eval_split"))
        except DataError as error:
            raise config_lib.ConfigError(f"{spec.name}: {error}") from error
        try:
            scored = scored_split(config, settings.split)
        except DataError as error:  # a split that data on this machine lacks
            if available_splits(config.data):
                raise config_lib.ConfigError(f"{spec.name}: --split: {error}") from error
            continue  # no data here at all: reported by its runs
        except Exception:  # reported by its runs
            continue
        for key, use in (("eval_split", "validates (and tunes) on"), ("train_split", "trains on")):
            if config.data[key] == scored:
                given = f"--split {settings.split} resolves to" if settings.split else "scoring"
                raise config_lib.ConfigError(
                    f"{spec.name}: {given} {scored!r}, the split it {use} (data.{key}); score "
                    "another split (e.g. --split test) or set a separate data." + key
                )
    if invalid and len(invalid) == len(specs):
        raise config_lib.ConfigError(f"{invalid[0]} (nothing was trained)")
