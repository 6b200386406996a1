"""``python -m seq2seq.bench.step_alone``: each frontier row's step with the device to itself,
on its own batches, the same code path as on the accelerator with tiny models."""

from __future__ import annotations

import json
import subprocess
import sys

from seq2seq.bench import step_alone
from tests.conftest import REPO, SHRINK, subprocess_env

TINY = [
    *SHRINK["transformer"],
    *SHRINK["rnnsearch"],
    "--config.data.max_train_examples=400",
    "--config.data.vocab_size=200",
]


def command(*args):
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.bench.step_alone", *args],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def test_both_rows_alone_on_their_own_batches(tmp_path, multi30k):
    out = tmp_path / "out"
    done = command(*TINY, f"--data={multi30k}", "--batches=3", f"--out={out}", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads((out / "step_alone.json").read_text()) == printed
    assert printed["reading"][0] in (out / "step_alone.md").read_text()
    rows = printed["rows"]
    assert list(rows) == ["transformer-small", "rnnsearch-medium"]
    assert [rows[row]["model"] for row in rows] == ["transformer", "rnnsearch"]
    for figures in rows.values():
        assert figures["replay_batches"] == 3 and figures["replay_step_ms"] > 0
    # The Transformer's rows are packed to one length; RNNsearch's come in length buckets of 8.
    assert len({length for _, length in rows["transformer-small"]["replay_shapes"]}) == 1
    assert all(length % 8 == 0 for _, length in rows["rnnsearch-medium"]["replay_shapes"])
    # The two rows read the same data with the same tokenizer settings: one tokenizer, trained once.
    assert done.stderr.count("tokenizer on") == 1, done.stderr[-3000:]
    ratio = rows["rnnsearch-medium"]["replay_step_ms"] / rows["transformer-small"]["replay_step_ms"]
    (sentence,) = printed["reading"]
    assert sentence.startswith(
        f"With the device to itself, a step of rnnsearch-medium takes {ratio:.2f} times"
    )


def test_rows_after_the_budget_are_not_started(tmp_path, multi30k):
    out = tmp_path / "out"
    done = command(
        *TINY, f"--data={multi30k}", "--batches=2", "--budget_s=0.001", f"--out={out}", "--json",
        "--rows=transformer-small,rnnsearch-medium,transformer-medium",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    # The first row always starts; by its end the 1 ms had passed, so neither other row did.
    assert list(printed["rows"]) == ["transformer-small"]
    assert printed["skipped"] == ["rnnsearch-medium", "transformer-medium"]
    assert printed["reading"] == []
    assert (
        (out / "step_alone.md")
        .read_text()
        .rstrip()
        .endswith(
            "Not started, 0.001 s (--budget_s) having passed: rnnsearch-medium, transformer-medium."
        )
    )
    negative = command("--budget_s=-1", f"--data={multi30k}")
    assert negative.returncode == 1
    assert negative.stderr.strip().splitlines()[-1] == (
        "error: --budget_s=-1 must be 0 (no limit) or more"
    )


def test_the_reading_puts_every_row_against_the_first():
    rows = {
        "transformer-small": {"replay_step_ms": 4.0},
        "rnnsearch-medium": {"replay_step_ms": 10.0},
        "transformer-medium": {"replay_step_ms": 5.0},
    }
    assert step_alone.reading(rows) == [
        "With the device to itself, a step of rnnsearch-medium takes 2.50 times one of "
        "transformer-small (10.00 ms against 4.00).",
        "With the device to itself, a step of transformer-medium takes 1.25 times one of "
        "transformer-small (5.00 ms against 4.00).",
    ]
    assert step_alone.reading({"transformer-small": {"replay_step_ms": 4.0}}) == []


def test_a_bad_row_or_data_folder_is_one_line_before_any_work(tmp_path):
    bad_row = command("--rows=transformer-huge", f"--data={tmp_path}")
    assert bad_row.returncode == 1
    assert bad_row.stderr.strip().splitlines()[-1] == (
        "error: --rows 'transformer-huge' matches no run; the runs are: transformer-small, "
        "transformer-medium, transformer-large, rnnsearch-small, rnnsearch-medium, rnnsearch-large"
    )
    no_data = command(f"--data={tmp_path}")
    assert no_data.returncode == 1
    assert no_data.stderr.strip().splitlines()[-1] == (
        f"error: --data {tmp_path} lacks train.de, train.en, val.de, val.en, "
        "test_2016_flickr.de, test_2016_flickr.en; run `make device-data` (copies Multi30k there "
        "from ../shared/data/multi30k) or pass the folder that has them"
    )
    zero = command("--batches=0")
    assert zero.returncode == 1 and "--batches=0 must be at least 1" in zero.stderr
