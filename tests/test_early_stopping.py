"""Early stopping: a run ends once validation BLEU has not improved for ``patience`` points."""

import math

import pytest

from seq2seq.config import ConfigError, validate
from seq2seq.records.run_directory import RunDirectory
from seq2seq.training.stopping import EarlyStopping, stopping_point
from seq2seq.training.trainer import train
from tests.conftest import tiny_config

# A made-up validation curve: rises to its best at point 4 (index), wobbles below it, then a
# late best at point 9.
CURVE = [10.0, 15.0, 18.0, 19.0, 21.0, 20.5, 20.9, 21.0, 19.0, 22.0, 21.0, 20.0, 21.5, 20.0]


def test_stops_after_patience_points_without_a_new_best():
    # Best 21.0 at index 4; 20.5, 20.9, 21.0 (equal is no gain) are three points without one.
    assert stopping_point(CURVE, patience=3) == 7
    # With four, the 19.0 at index 8 is the fourth: still stopped before the late best.
    assert stopping_point(CURVE, patience=4) == 8
    # With five, the late best at index 9 resets the count; 4 points follow, so no stop.
    assert stopping_point(CURVE, patience=5) is None
    assert stopping_point(CURVE, patience=0) is None  # off


def test_min_delta_counts_small_gains_as_none():
    # 21.0 -> 22.0 at index 9 is a gain of 1.0: not a new best when 1.5 is required.
    assert stopping_point(CURVE, patience=5, min_delta=1.5) == 9
    assert stopping_point([1.0, 1.2, 1.3, 1.4, 1.5], patience=2, min_delta=0.25) == 4


def test_the_count_survives_a_checkpoint_round_trip():
    whole = EarlyStopping(patience=3)
    for step, bleu in enumerate(CURVE[:6]):
        whole.update(bleu, step)
    resumed = EarlyStopping(patience=3)
    resumed.restore(whole.state())
    assert (resumed.best, resumed.since_best, resumed.best_step) == (21.0, 1, 4)
    assert [resumed.update(b) for b in CURVE[6:8]] == [False, True]
    fresh = EarlyStopping(patience=3)
    fresh.restore({})  # a run saved before early stopping existed
    assert fresh.best == -math.inf and not fresh.converged


def test_patience_needs_validation_points():
    config = tiny_config("transformer")
    config.train.early_stopping_patience = 3
    with pytest.raises(ConfigError, match="eval.every_steps"):
        validate(config)
    config.eval.every_steps = 10
    validate(config)
    config.train.early_stopping_patience = -1
    with pytest.raises(ConfigError, match="must be >= 0"):
        validate(config)


@pytest.mark.slow
def test_training_stops_at_the_converged_point_and_stays_stopped(tmp_path):
    config = tiny_config("transformer")
    config.train.steps = 200  # the cap, far beyond the stop
    config.eval.every_steps = 5
    config.checkpoint.every_steps = 1_000
    config.train.early_stopping_patience = 3
    config.data.pack = True  # one batch shape: one compile
    curve = iter(CURVE)
    validate_fn = lambda *args: lambda state: {"bleu": next(curve)}  # noqa: E731

    summary = train(config, tmp_path, validate_fn)
    # Index 7 of the curve is the 8th validation point: step 40, where the run ends.
    assert summary.step == 40 and summary.stop_reason == "converged"
    records = RunDirectory(tmp_path).read_metrics()
    assert [r["bleu"] for r in records if r["kind"] == "validation"] == CURVE[:8]
    stop = records[-1]
    assert stop["kind"] == "stop" and stop["reason"] == "converged"
    assert (stop["best_step"], stop["best_bleu"], stop["step"]) == (25, 21.0, 40)

    again = train(config, tmp_path, validate_fn)  # resumed: converged, so nothing more
    assert again.step == 40 and again.stop_reason == "converged"
    assert len(RunDirectory(tmp_path).read_metrics()) == len(records)


@pytest.mark.slow
def test_a_run_that_keeps_improving_ends_at_its_cap(tmp_path):
    config = tiny_config("transformer")
    config.train.steps = 20
    config.eval.every_steps = 5
    config.checkpoint.every_steps = 1_000
    config.train.early_stopping_patience = 2
    config.data.pack = True
    rising = iter(range(100))
    summary = train(config, tmp_path, lambda *args: lambda state: {"bleu": float(next(rising))})
    assert summary.step == 20 and summary.stop_reason == "cap"
    stop = RunDirectory(tmp_path).read_metrics()[-1]
    assert (stop["reason"], stop["budget"]) == ("cap", "steps")
