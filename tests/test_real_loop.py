"""``python -m seq2seq.bench.real_loop`` (issue 55, item 4): the training loop's tokens/s against
the jitted step alone, here with a tiny Transformer for a few seconds of Multi30k."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seq2seq.bench import real_loop
from tests.conftest import REPO, SHRINK, subprocess_env


def test_captions_are_joined_one_to_four_each_used_once_in_order():
    sources = [f"s{i}" for i in range(400)]
    targets = [f"t{i}" for i in range(400)]
    joined_sources, joined_targets = real_loop.join_captions(sources, targets, seed=0)
    sizes = [len(line.split()) for line in joined_sources]
    assert set(sizes) == {1, 2, 3, 4}
    assert " ".join(joined_sources).split() == sources  # all of them, in order, once
    assert [line.replace("s", "t") for line in joined_sources] == joined_targets  # same groups
    assert real_loop.join_captions(sources, targets, seed=0) == (joined_sources, joined_targets)
    assert real_loop.join_captions(sources, targets, seed=1)[0] != joined_sources


def test_loop_figures_leave_the_first_interval_out_of_the_steady_rate(tmp_path):
    lines = [
        {"step": 10, "kind": "train", "target_tokens": 100.0, "step_seconds": 1.0},  # compiling
        {"step": 20, "kind": "train", "target_tokens": 100.0, "step_seconds": 0.1},
        {"step": 40, "kind": "train", "target_tokens": 50.0, "step_seconds": 0.1},
        {"step": 40, "kind": "stop", "elapsed_seconds": 7.0, "validation_seconds": 2.5},
    ]
    for line in lines[:3]:
        line |= {"padding_share": 0.25, "compiled_shapes": 2}
    # The host's milliseconds a step: the first (compiling) interval is left out, the others
    # weighted by their steps (10 and 20); a part a line lacks is left out.
    lines[0] |= {"host_input_ms": 90.0, "host_dispatch_ms": 90.0}
    lines[1] |= {"host_input_ms": 2.0, "host_dispatch_ms": 7.0}
    lines[2] |= {"host_input_ms": 5.0, "host_dispatch_ms": 4.0, "host_waiting_ms": 30.0}
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    figures = real_loop.loop_figures(metrics)
    assert figures["loop_steps"] == 40 and figures["loop_log_lines"] == 3
    assert figures["loop_target_tokens"] == 10 * 100 + 10 * 100 + 20 * 50
    assert figures["loop_tokens_per_s"] == pytest.approx(3000 / (10 + 1 + 2))
    assert figures["loop_steady_tokens_per_s"] == pytest.approx(2000 / 3)
    assert figures["validation_seconds"] == 2.5
    assert figures["loop_host_input_ms"] == pytest.approx((10 * 2.0 + 20 * 5.0) / 30)
    assert figures["loop_host_dispatch_ms"] == pytest.approx((10 * 7.0 + 20 * 4.0) / 30)
    assert figures["loop_host_waiting_ms"] == pytest.approx(30.0)
    assert "loop_host_placing_ms" not in figures


def test_the_reading_says_whether_the_host_or_the_batches_fall_short():
    result = {
        "loop_over_replay": 0.95,
        "loop_over_synthetic": 0.76,
        "replay_tokens_per_s": 80_000.0,
        "synthetic_tokens_per_s": 100_000.0,
        "replay_step_ms": 40.0,
        "compiled_shapes": 5,
        "loop_padding_share": 0.183,
        "loop_host_input_ms": 1.5,
        "loop_host_waiting_ms": 35.0,  # the device's time, not the host's work
        "loop_host_dispatch_ms": 6.0,
    }
    host, bench = real_loop.reading(result)
    assert host == (
        "The host: the loop reaches 95% (goal 90%: met) of the step alone on the same batches; "
        "its work a step, input 1.50 + dispatch 6.00 = 7.50 ms, against 40.00 ms for the step "
        "alone, so with steps in flight the device need not wait for it."
    )
    # The step alone on the loop's batches makes 80% of the full batch's tokens/s.
    assert bench.startswith("Against the device bench's full batch (every position real): the")
    assert "loop reaches 76% (goal 90%: NOT met), the step alone on the loop's batches 80%" in bench
    assert bench.endswith(
        "(5 batch shapes, padding 18.3%): the shortfall lies in the batches (padding, shorter "
        "rows)."
    )

    result |= {
        "loop_over_replay": 0.5,
        "loop_host_dispatch_ms": 50.0,
        "replay_tokens_per_s": 95_000.0,
    }
    host, bench = real_loop.reading(result)
    assert host.endswith(
        "= 51.50 ms, against 40.00 ms for the step alone, so the device waits for it, most of "
        "all for its dispatch."
    )
    assert "(goal 90%: NOT met) of the step alone" in host
    assert bench.endswith("the shortfall lies in the host.")
    result |= {"loop_over_synthetic": 0.91}
    assert real_loop.reading(result)[1].endswith("(5 batch shapes, padding 18.3%).")


def test_a_data_folder_without_multi30k_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"lacks train\.en, train\.de, val\.en, val\.de; run"):
        real_loop.write_joined_corpus(tmp_path, tmp_path / "out", ("en", "de"), seed=0)


def test_a_tiny_transformer_loop_against_its_step_alone(tmp_path, multi30k):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "seq2seq.bench.real_loop"]
        + ["--config=configs/wmt14_ende_transformer_base.py", *SHRINK["transformer"]]
        + ["--config.data.vocab_size=300", "--config.data.max_train_examples=600"]
        + ["--config.data.tokens_per_batch=1024", "--config.train.log_every_steps=4"]
        + ["--config.data.bucket_width=64"]  # 4 shapes to compile instead of the config's 8
        + ["--config.eval.num_examples=4", "--config.decode.min_rows=1024"]
        + [f"--data={multi30k}", f"--out={out}", f"--workdir={tmp_path / 'work'}"]
        + ["--minutes=0.15", "--replay_batches=4", "--synthetic_steps=2", "--json"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads((out / "real_loop.json").read_text()) == printed
    assert "loop / replay" in (out / "real_loop.md").read_text()
    # The reading is written with the figures, and read from them: its percentages are theirs.
    host, bench = printed["reading"]
    assert f"loop reaches {printed['loop_over_replay']:.0%} (goal 90%" in host
    assert f"loop reaches {printed['loop_over_synthetic']:.0%} (goal 90%" in bench
    assert bench in (out / "real_loop.md").read_text()
    assert printed["loop_steps"] > 0 and printed["loop_log_lines"] >= 2
    for key in ("loop_steady_tokens_per_s", "replay_tokens_per_s", "synthetic_tokens_per_s"):
        assert printed[key] > 0, key
    # The wall clock holds the tokenizer, compiles, validation and checkpoints as well.
    assert printed["loop_wall_tokens_per_s"] < printed["loop_tokens_per_s"]
    assert printed["validation_seconds"] > 0 and printed["checkpoint_seconds"] > 0
    assert printed["compile_seconds"] > 0
    # The replayed batches are the loop's: bucketed lengths within the limit, at the run's
    # own vocabulary.
    for _, length in printed["replay_shapes"]:
        assert length % 64 == 0 and length <= 256
    assert printed["synthetic_batch"] == [1024 // 256, 256]
    assert 0 < printed["vocab_size"] <= 300
    corpus = (tmp_path / "work" / "corpus" / "train.en").read_text().splitlines()
    source = (multi30k / "train.en").read_text().splitlines()
    assert len(source) / 3 < len(corpus) < len(source) / 2  # 2.5 captions a line on average
