"""``python -m seq2seq.bench.rnnsearch_bound`` (issue 55, item 5) on a tiny RNNsearch: the same
code path as on the accelerator, its figures printed and written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seq2seq.bench import rnnsearch_bound
from seq2seq.bench.settings import parse_matmul_sizes
from seq2seq.config import ConfigError
from tests.conftest import REPO, SHRINK, subprocess_env, tiny_config

TINY = [
    "--config=configs/wmt14_enfr_rnnsearch50.py",
    *SHRINK["rnnsearch"],
    "--config.data.source=synthetic",
    "--config.data.tokenizer=word",
    "--config.data.vocab_size=100",
]


def test_tiny_shapes_are_timed_against_their_floors(tmp_path):
    out = tmp_path / "bound.json"
    done = subprocess.run(
        [sys.executable, "-m", "seq2seq.bench.rnnsearch_bound", *TINY]
        + ["--shapes=4x6x1,4x5x4:joint:inloop", "--steps=2", "--warmup=1", "--matmul_sizes=64"]
        + [f"--out={out}", "--json"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text()) == printed
    shapes = printed["shapes"]
    assert [
        (s["batch"], s["length"], s["unroll"], s["encoder_loops"], s["weight_gradients"])
        for s in shapes
    ] == [(4, 6, 1, 2, "after loop"), (4, 5, 4, 1, "in loop")]
    assert printed["skipped"] == []
    for shape in shapes:
        assert shape["target_tokens"] == shape["batch"] * shape["length"]  # every position real
        assert shape["step_ms"] > 0 and shape["tokens_per_s"] > 0 and shape["mfu"] > 0
        # Timed, both: which is larger on tiny shapes is the machine's moment, not the code's
        # (a CI run measured the empty loop's 114 us above the real step's 74 us), and timings
        # belong in the benchmark's figures, not in a test's assertions.
        assert shape["floor_empty_us_per_step"] > 0 and shape["step_us_per_recurrence_step"] > 0
        assert shape["floor_product_us_per_step"] > 0
    assert shapes[0]["recurrence_steps"] == 2 * (2 * 6 + 6)  # S = T = 6, forward and backward
    assert shapes[1]["recurrence_steps"] == 2 * (5 + 5)  # one loop steps both directions


def test_a_spent_budget_skips_every_shape_and_names_them():
    config = tiny_config("rnnsearch")
    result = rnnsearch_bound.bound_benchmark(
        config,
        [(4, 6, 1, False, False), (2, 4, 2, True, True)],
        budget_s=0.0,
        matmul_sizes=(32,),
    )
    assert result["shapes"] == []
    assert result["skipped"] == ["4x6x1", "2x4x2:joint:inloop"]


@pytest.mark.parametrize(
    "text", ["80x51", "80x0x1", "ax51x1", "80x51x1x2", "80x51x1:fast", "x:", "8x5x1:joint:joint"]
)
def test_a_malformed_shape_is_one_line(text):
    with pytest.raises(ConfigError, match=r"is not BATCHxLENGTHxUNROLL\[:joint\]\[:inloop\]"):
        rnnsearch_bound.parse_shape(text)
    assert rnnsearch_bound.parse_shape("80X51x4") == (80, 51, 4, False, False)
    assert rnnsearch_bound.parse_shape("80x51x4:Joint") == (80, 51, 4, True, False)
    assert rnnsearch_bound.parse_shape("80x51x4:inloop:joint") == (80, 51, 4, True, True)


@pytest.mark.parametrize("values", [["4096", "big"], ["0"], ["-8"], []])
def test_matmul_sizes_that_are_not_positive_integers_are_one_line(values):
    with pytest.raises(ConfigError, match=r"--matmul_sizes .*: give positive integers"):
        parse_matmul_sizes(values)
    assert parse_matmul_sizes(["4096", " 8192"]) == (4096, 8192)


def test_the_default_shapes_put_the_paper_batch_first_and_sweep_every_unroll():
    shapes = [rnnsearch_bound.parse_shape(text) for text in rnnsearch_bound.DEFAULT_SHAPES]
    # Bahdanau et al.'s 80 sentences of RNNsearch-50's 51 tokens, then with the weight
    # gradients summed inside the loops, then with one encoder loop: each measured against the
    # plain step before the budget can end.
    assert shapes[:3] == [
        (80, 51, 1, False, False),
        (80, 51, 1, False, True),
        (80, 51, 1, True, False),
    ]
    paper = [(u, joint) for b, length, u, joint, _ in shapes if (b, length) == (80, 51)]
    assert {unroll for unroll, _ in paper} == {1, 2, 4, 8}
    assert (4, False) in paper and (4, True) in paper
    same_tokens = {batch * length for batch, length, *_ in shapes if batch != 80}
    assert 80 * 51 in same_tokens and len(shapes) <= 14  # bounded: each shape is a compile


def made_up(
    batch, length, unroll, loops, tokens_per_s, mfu, iteration, empty, product, where="after loop"
):
    """A shape's figures as ``shape_figures`` returns them, the ones the reading uses."""
    return {
        "batch": batch,
        "length": length,
        "unroll": unroll,
        "encoder_loops": loops,
        "weight_gradients": where,
        "target_tokens": batch * length,
        "tokens_per_s": tokens_per_s,
        "mfu": mfu,
        "step_us_per_recurrence_step": iteration,
        "floor_empty_us_per_step": empty,
        "floor_product_us_per_step": product,
    }


def test_the_reading_measures_against_the_paper_batch_and_names_the_floor_in_the_way():
    shapes = [
        made_up(40, 51, 1, 2, 700.0, 0.04, 90.0, 30.0, 45.0),  # measured first, yet not the base
        made_up(80, 51, 1, 2, 1000.0, 0.06, 80.0, 20.0, 40.0),
        made_up(80, 51, 4, 2, 1500.0, 0.09, 50.0, 10.0, 40.0),
        made_up(80, 51, 1, 1, 1200.0, 0.07, 70.0, 20.0, 40.0),
        made_up(160, 51, 1, 2, 1800.0, 0.11, 60.0, 20.0, 45.0),
        made_up(80, 51, 1, 2, 900.0, 0.054, 89.0, 20.0, 40.0, where="in loop"),
    ]
    floors, speeds, goal = rnnsearch_bound.reading(shapes)
    # 20 and 40 of 80 us; 0.06 * 80 / 40 and 0.06 * 80 / 20.
    assert floors.startswith("At 80x51x1 (MFU 0.060) an iteration of the step takes 80.0 us")
    assert "20.0 us (25.0% of it)" in floors and "40.0 us (50.0%)" in floors
    assert "MFU could reach 0.120 at this batch; only the launch, 0.240." in floors
    # 40 x 51 has 2,040 tokens an update, 160 x 51 8,160: both apart from the base's 4,080.
    assert speeds == (
        "Tokens/s over 80x51x1's, at its 4,080 target tokens per update: 80x51x4 1.50, "
        "80x51x1:joint 1.20, 80x51x1 1.00, 80x51x1:inloop 0.90; at other batch sizes: "
        "160x51x1 1.80, 40x51x1 0.70."
    )
    # The best at 4,080 tokens is U = 4 at 0.09; its products alone allow 0.09 * 50 / 40 = 0.1125.
    assert "not reached: the best, 80x51x4, has MFU 0.090" in goal
    assert "cap it at 0.113" in goal and "sequential products at this batch prevent it" in goal

    shapes[2]["floor_product_us_per_step"] = 20.0  # now they would allow 0.09 * 50 / 20 = 0.225
    assert "would allow 0.225: the rest of each iteration" in rnnsearch_bound.reading(shapes)[2]
    shapes[3]["mfu"] = 0.125  # the joint loop passes the goal: the larger batch does not count
    assert rnnsearch_bound.reading(shapes)[2].endswith("reached by 80x51x1:joint (MFU 0.125).")
    shapes[1]["floor_empty_us_per_step"] = 0.5  # 0.06 * 80 / 0.5 = 9.6: no bound at all
    assert (
        "only the launch, above 1 (that floor does not bind)." in rnnsearch_bound.reading(shapes)[0]
    )
    assert rnnsearch_bound.reading([]) == []


def test_the_markdown_ends_with_the_reading():
    shapes = [made_up(80, 51, 1, 2, 1000.0, 0.06, 80.0, 20.0, 50.0)]
    for shape in shapes:
        shape.update(step_ms=25.0, recurrence_steps=306, compile_s=14.5)
    result = {
        "model": "rnnsearch",
        "device_kind": "made up",
        "dtype": "bfloat16",
        "peak_gflops": 700_000.0,
        "iterations_counted_as": "2 (2 S + T)",
        "shapes": shapes,
        "skipped": ["80x51x8"],
        "reading": rnnsearch_bound.reading(shapes),
    }
    text = rnnsearch_bound.markdown(result)
    assert text.index("skipped (out of budget): 80x51x8") < text.index("At 80x51x1 (MFU 0.060)")
    # Alone, the base is also the best; its products would cap MFU at 0.06 * 80 / 50 = 0.096.
    assert text.rstrip().endswith(
        "cap it at 0.096: the recurrence's own sequential products at this batch prevent it."
    )
