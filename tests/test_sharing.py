"""``python -m seq2seq.compare.sharing``: runs that shared one device, their seconds split into
steps and the time a step, and the families' steps where every run was training."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seq2seq.compare import sharing
from seq2seq.config import ConfigError
from tests.conftest import REPO, subprocess_env


def train(elapsed, step_seconds, **off_the_clock):
    return {"kind": "train", "elapsed_seconds": elapsed, "step_seconds": step_seconds} | {
        f"{clock}_seconds": seconds for clock, seconds in off_the_clock.items()
    }


def validation(step, bleu, elapsed):
    return {"kind": "validation", "step": step, "bleu": bleu, "elapsed_seconds": elapsed}


# Estimated wall clocks: slow at 11, 12 and 14 s (10 s compiling, then 1 s validating); fast at
# 3, 11 and 14 s. In windows of 5 s, slow logs in window 2 alone and fast in 0 and 2: the runs
# share window 2, where slow's steps take 20, 20 and 30 ms and fast's 10 and 14 ms.
RUNS = {
    "slow-seed0": (
        "rnn",
        [
            train(1.0, 0.020, compile=10.0),
            train(2.0, 0.020, compile=10.0),
            train(3.0, 0.030, compile=10.0, validation=1.0),
            validation(150, 40.5, 3.0),
        ],
    ),
    "fast-seed0": (
        "attention",
        [
            train(1.0, 0.010, compile=2.0),
            validation(400, 39.0, 5.0),  # below the level: not the one timed
            train(9.0, 0.010, compile=2.0),
            train(10.0, 0.014, compile=2.0, validation=2.0),
            validation(1000, 40.2, 12.0),
        ],
    ),
    "never-seed1": ("attention", [train(1.0, 0.5, compile=11.0), validation(10, 3.0, 1.0)]),
}


def test_seconds_split_into_steps_and_the_time_a_step_at_equal_sharing():
    result = sharing.sharing(RUNS, level=40.0, window=5.0)
    assert result["runs"]["slow-seed0"]["to_level"] == {
        "step": 150,
        "seconds": 3.0,
        "ms_a_step": 20.0,
    }
    assert result["runs"]["fast-seed0"]["to_level"] == {
        "step": 1000,
        "seconds": 12.0,
        "ms_a_step": 12.0,
    }
    assert result["runs"]["never-seed1"]["to_level"] is None
    # never-seed1 logs at 12 s, window 2, like the others: still one shared window.
    assert result["shared_seconds"] == 5.0
    assert result["shared_ms_a_step"]["rnn"] == (20 + 20 + 30) / 3
    assert result["shared_ms_a_step"]["attention"] == (10 + 14 + 500) / 3

    text = sharing.markdown(result)
    assert "| never-seed1 | attention | not reached | not reached | not reached |" in text
    assert "| slow-seed0 | rnn | 150 | 3.0 | 20.00 |" in text
    # attention's steps (174.67 ms, with never-seed1's) are the slower at equal sharing here.
    assert text.rstrip().endswith(
        "To 40, attention over rnn (means over seeds): 4.00 times the training seconds = 6.67 "
        "times the steps x 0.60 times the time a step as it came; at equal sharing a step is "
        "7.49 times, which would make the seconds 49.90 times."
    )


def test_a_window_without_every_run_is_left_out():
    runs = {name: RUNS[name] for name in ("slow-seed0", "fast-seed0")}
    shifted = [dict(record) for record in runs["fast-seed0"][1]]
    for record in shifted:
        if record["kind"] == "train":
            record["compile_seconds"] = 20.0  # fast now logs at 21, 29 and 32 s: windows 4, 5, 6
    runs["fast-seed0"] = ("attention", shifted)
    result = sharing.sharing(runs, level=40.0, window=5.0)
    assert result["shared_seconds"] == 0.0
    assert result["shared_ms_a_step"] == {"attention": None, "rnn": None}
    # No steps at equal sharing, but the seconds still split into steps and the time a step.
    assert (
        sharing.markdown(result)
        .rstrip()
        .endswith(
            "To 40, attention over rnn (means over seeds): 4.00 times the training seconds = 6.67 "
            "times the steps x 0.60 times the time a step as it came."
        )
    )


def run_command(*args):
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.compare.sharing", *args],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_committed_gpu_records_and_a_bad_folder():
    done = run_command("docs/records/multi30k_frontier_gpu")
    assert done.returncode == 0, done.stderr[-2000:]
    # transformer-small-seed1's first validation at 40 or above: step 2,000 (40.08 BLEU).
    assert "| transformer-small-seed1 | transformer | 2,000 |" in done.stdout
    assert "rnnsearch over transformer" in done.stdout

    missing = run_command("docs/records/no_such_folder")
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1] == (
        "error: docs/records/no_such_folder is not a folder; give a folder of run records"
    )
    bad = run_command("docs/records/multi30k_frontier_gpu", "--window=0")
    assert bad.returncode == 1 and "--window=0 must be a positive number" in bad.stderr


def test_the_time_each_line_was_written_is_the_clock_where_every_run_has_it():
    runs = {name: (family, [dict(r) for r in records]) for name, (family, records) in RUNS.items()}
    del runs["never-seed1"]
    # Written at 96, 99 and 109 s (slow) and 104, 108 and 111 s (fast): in windows of 5 s they
    # share only window 21 (105-110 s), where slow's step took 30 ms and fast's 10.
    written = {"slow-seed0": [96.0, 99.0, 109.0], "fast-seed0": [104.0, 108.0, 111.0]}
    for name, times in written.items():
        for record, second in zip(
            (r for r in runs[name][1] if r["kind"] == "train"), times, strict=True
        ):
            record["time"] = second
    result = sharing.sharing(runs, level=40.0, window=5.0)
    assert result["clock"] == "logged" and result["shared_seconds"] == 5.0
    assert result["shared_ms_a_step"] == {"attention": 10.0, "rnn": 30.0}
    assert "windows of 5 s of the time the lines were written" in sharing.markdown(result)
    # One run without it, and every run is placed by the estimate instead.
    del runs["fast-seed0"][1][0]["time"]
    assert sharing.sharing(runs, level=40.0, window=5.0)["clock"] == "estimated"


STEPS_ALONE = {
    "device_kind": "TPU v9",
    "rows": {"slow": {"replay_step_ms": 30.0}, "fast": {"replay_step_ms": 10.0}},
}


def test_steps_timed_alone_give_the_seconds_ratio_they_would_make():
    runs = {name: RUNS[name] for name in ("slow-seed0", "fast-seed0")}
    result = sharing.sharing(runs, level=40.0, window=5.0)
    alone = sharing.with_steps_alone(result, STEPS_ALONE, records_device="TPU v9")
    assert alone["steps_alone"]["families"] == {
        "attention": {"row": "fast", "ms_a_step": 10.0},
        "rnn": {"row": "slow", "ms_a_step": 30.0},
    }
    # attention took the more seconds to 40 (12 against 3), so it comes first: its 1,000 steps
    # are 6.67 times rnn's 150, and alone its step (row fast) is a third of rnn's (row slow).
    text = sharing.markdown(alone).rstrip()
    assert text.endswith(
        "With the device to itself (TPU v9; step_alone), a step of fast takes 0.33 times one "
        "of slow (10.00 ms against 30.00), which would make the seconds 6.67 x 0.33 = 2.22 times."
    )
    elsewhere = sharing.with_steps_alone(result, STEPS_ALONE, records_device="TPU v8")
    assert "(TPU v9, not the records' TPU v8; step_alone)" in sharing.markdown(elsewhere)


def test_steps_alone_needs_one_timed_row_a_family():
    result = sharing.sharing(RUNS, level=40.0, window=5.0)  # attention: rows fast and never
    with pytest.raises(ConfigError, match="attention's runs come from rows fast, never"):
        sharing.with_steps_alone(result, STEPS_ALONE, records_device=None)
    runs = {name: RUNS[name] for name in ("slow-seed0", "never-seed1")}
    result = sharing.sharing(runs, level=40.0, window=5.0)
    with pytest.raises(
        ConfigError, match="the step_alone file has no row never .it has slow, fast"
    ):
        sharing.with_steps_alone(result, STEPS_ALONE, records_device=None)
    with pytest.raises(ConfigError, match="run folder slow is not named <row>-seed<N>"):
        sharing.row_of("slow")


def test_the_committed_gpu_records_with_a_step_alone_file(tmp_path):
    steps = {
        "device_kind": "NVIDIA H100 80GB HBM3",
        "rows": {
            "transformer-small": {"replay_step_ms": 8.0},
            "rnnsearch-medium": {"replay_step_ms": 10.0},
        },
    }
    (tmp_path / "step_alone.json").write_text(json.dumps(steps))
    done = run_command(
        "docs/records/multi30k_frontier_gpu", f"--steps_alone={tmp_path / 'step_alone.json'}"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # 6,000 and 6,500 steps against 3,500 and 2,000: 2.27 times the steps; alone 1.25 times a step.
    assert done.stdout.rstrip().endswith(
        "(NVIDIA H100 80GB HBM3; step_alone), a step of rnnsearch-medium takes 1.25 times one of "
        "transformer-small (10.00 ms against 8.00), which would make the seconds 2.27 x 1.25 = "
        "2.84 times."
    )
    (tmp_path / "broken.json").write_text("{")
    broken = run_command(
        "docs/records/multi30k_frontier_gpu", f"--steps_alone={tmp_path / 'broken.json'}"
    )
    assert broken.returncode == 1
    assert broken.stderr.strip().splitlines()[-1].endswith("is not JSON; give device-steps' file")
