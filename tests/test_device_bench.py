"""``make device-bench`` (seq2seq/bench/device.py): parts in their own processes, figures against
issue 41's targets, and a failing or late part that leaves the others' figures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seq2seq.bench import device
from tests.conftest import REPO, subprocess_env
from tests.test_bench import TINY_TRAIN

TINY_PART = device.Part(
    "train_tiny",
    ("seq2seq.bench", "train", *TINY_TRAIN, "--json", "--steps=2", "--warmup=1",
     "--noyardstick", "--matmul_sizes=64"),
    limit_s=600,
)  # fmt: skip


def test_pytest_counts_read_the_summary_line():
    output = "....s.F\nFAILED tests/x.py::test_y\n1 failed, 5 passed, 1 skipped in 41.20s\n"
    assert device.pytest_counts(output) == {"failed": 1, "passed": 5, "skipped": 1}
    assert device.pytest_counts("") == {}


def test_targets_say_met_not_met_and_why_a_figure_is_missing():
    results = {
        "train_big": {"status": "ok", "mfu": 0.41, "compile_s": 58.0},
        "train_base": {"status": "failed", "stderr_tail": "boom"},
        "decode_base": {"status": "ok", "compile_s": 31.0},
    }
    rows = {(part, key): rest for part, key, *rest in device.target_rows(results)}
    assert rows["train_big", "mfu"] == ["0.41", ">= 0.5: NOT met"]
    assert rows["train_big", "compile_s"] == ["58", "<= 60: met"]
    assert rows["decode_base", "compile_s"] == ["31", "<= 30: NOT met"]
    assert rows["train_base", "compile_s"] == ["-", "<= 60: not measured (failed)"]
    assert rows["train_rnnsearch50", "compile_s"] == ["-", "<= 60: not measured (not run)"]


def test_the_shipped_parts_share_one_cache_and_each_variant_has_its_own(tmp_path):
    by_name = {part.name: dict(part.env) for part in device.parts(tmp_path)}
    shared = str(tmp_path / "shared")
    assert by_name["train_big"]["JAX_COMPILATION_CACHE_DIR"] == shared
    assert by_name["profile_big"]["JAX_COMPILATION_CACHE_DIR"] == shared  # a restart's compile
    variants = ["train_big_triton", "decode_base_triton", "train_big_scan", "train_big_chunk1024"]
    caches = {by_name[name]["JAX_COMPILATION_CACHE_DIR"] for name in variants}
    assert len(caches) == len(variants) and shared not in caches
    assert by_name["train_big_triton"]["XLA_FLAGS"] == "--xla_gpu_enable_triton_gemm=true"
    assert "XLA_FLAGS" not in by_name["train_big"]  # the commands' own default: cuBLAS


def test_the_profiles_are_kept_in_the_output_folder_and_one_runs_without_cuda_graphs(tmp_path):
    by_name = {part.name: part for part in device.parts(tmp_path / "c", keep=tmp_path / "out")}
    assert f"--profile_dir={tmp_path / 'out' / 'profile'}" in by_name["profile_big"].args
    kernels = by_name["profile_big_kernels"]
    assert f"--profile_dir={tmp_path / 'out' / 'profile_kernels'}" in kernels.args
    assert dict(kernels.env)["XLA_FLAGS"] == "--xla_gpu_enable_command_buffer="


def test_a_part_runs_in_its_own_process_and_returns_its_figures(monkeypatch):
    for key, value in subprocess_env().items():
        monkeypatch.setenv(key, value)
    figures = device.run_part(TINY_PART, seconds_left=600)
    assert figures["status"] == "ok", figures.get("stderr_tail")
    assert figures["steps_timed"] == 2 and figures["step_ms"] > 0
    assert "linen_step_ms" not in figures  # --noyardstick: no second model compiled


def test_a_failing_part_is_reported_and_the_next_one_still_runs(tmp_path, monkeypatch):
    for key, value in subprocess_env().items():
        monkeypatch.setenv(key, value)
    broken = device.Part("broken", ("seq2seq.bench", "train", "--config=configs/none.py"), 300)
    matmul = device.Part("matmul", ("seq2seq.bench", "matmul", "--matmul_sizes=64", "--json"), 300)
    monkeypatch.setattr(device, "parts", lambda cache, keep: [broken, matmul])
    results = device.bench(tmp_path, minutes=10)
    assert results["broken"]["status"] == "failed"
    assert "none.py" in results["broken"]["stderr_tail"]
    assert results["matmul"]["status"] == "ok" and results["matmul"]["float32"]["peak_gflops"] > 0
    assert json.loads((tmp_path / "device_bench.json").read_text())["broken"]["status"] == "failed"
    assert "not measured (not run)" in (tmp_path / "device_bench.md").read_text()


def test_a_part_is_not_started_with_too_little_time_left():
    never = device.Part("never", ("no_such_module",), 600)
    assert device.run_part(never, seconds_left=device.MIN_PART_SECONDS - 1) == {
        "status": "skipped",
        "reason": f"{device.MIN_PART_SECONDS - 1} s of the budget left",
    }


def test_an_unknown_part_is_one_error_line():
    done = subprocess.run(
        [sys.executable, "-m", "seq2seq.bench.device", "--parts=train_huge", "--out=/nonexistent"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: unknown --parts ['train_huge']; choose from "
        + ", ".join(part.name for part in device.parts(REPO))
    ]


@pytest.mark.parametrize("name", ["train_big", "train_base", "train_rnnsearch50"])
def test_every_training_part_leaves_out_the_linen_yardstick(name, tmp_path):
    part = next(part for part in device.parts(tmp_path) if part.name == name)
    assert "--noyardstick" in part.args and "--persistent_cache" in part.args


def test_issue_55_parts_stay_within_a_loan_and_keep_their_files_in_the_output(tmp_path):
    by_name = {part.name: part for part in device.parts(tmp_path / "c", keep=tmp_path / "out")}
    loop, bound = by_name["real_loop_base"], by_name["rnnsearch_bound"]
    assert loop.args[0] == "seq2seq.bench.real_loop" and f"--config={device.BASE}" in loop.args
    assert f"--out={tmp_path / 'out'}" in loop.args  # real_loop.json and .md come back
    assert not any(arg.startswith(f"--workdir={tmp_path / 'out'}") for arg in loop.args)
    assert f"--out={tmp_path / 'out' / 'rnnsearch_bound.json'}" in bound.args
    assert f"--config={device.RNNSEARCH}" in bound.args
    # Both, one after the other, fit the prepared command's 7.5 minutes with its budget flag.
    assert loop.limit_s + bound.limit_s <= 8 * 60
    names = [part.name for part in device.parts(tmp_path)]
    assert names.index("real_loop_base") < names.index("rnnsearch_bound")


def test_a_part_with_shapes_gets_a_row_per_shape():
    results = {
        "environment": {"gpu": None, "packages": {}},
        "rnnsearch_bound": {
            "status": "ok",
            "shapes": [
                {"batch": 80, "length": 51, "unroll": 1, "step_ms": 24.31},
                {"batch": 80, "length": 51, "unroll": 4, "step_ms": 19.0},
            ],
            "reading": ["At 80x51x1 ...", "The goal ..."],
        },
    }
    text = device.markdown(results)
    assert "| batch | length | unroll | step_ms |" in text
    assert "| 80 | 51 | 4 | 19 |" in text and "| 80 | 51 | 1 | 24.3 |" in text
    # The part's reading follows its table, one paragraph a sentence.
    assert text.index("| 80 | 51 | 4 | 19 |") < text.index("\n\nAt 80x51x1 ...\n\nThe goal ...")
