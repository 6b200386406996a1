"""``bench profile``: operations sorted into kinds by their HLO, and the trace's time per kind."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from seq2seq.bench.profile import classify, parse_hlo, summarise
from tests.conftest import REPO, subprocess_env
from tests.test_bench import TINY_TRAIN


def test_each_operation_gets_the_kind_of_what_its_hlo_computes():
    def f(a, b, c):
        return a @ b, jnp.swapaxes(c, 0, 1), jnp.sum(c, axis=1), jnp.tanh(c) * 2.0

    x = jnp.ones((64, 32))
    hlo = jax.jit(f).lower(x, x.T, x).compile().as_text()
    entry = next(ops for name, ops in parse_hlo(hlo).items() if name.startswith("main"))
    kinds = classify(hlo)
    assert set(kinds) <= set(entry), "instructions inside fusions were classified"
    assert sorted(kind for kind, _ in kinds.values()) == sorted(
        ["products", "data movement", "reductions", "element-wise"]
    )  # one product, one transposed copy, one sum, one tanh-and-multiply: four operations
    by_source = {source: kind for kind, source in kinds.values() if source}
    assert by_source["jit(f)/dot_general"] == "products"
    assert by_source["jit(f)/reduce_sum"] == "reductions"


def test_kinds_sum_operation_time_and_gaps_count_as_no_operation():
    kinds = {"dot.1": ("products", "jit(f)/dot_general"), "fusion.2": ("element-wise", "")}
    events = [
        {"ph": "X", "name": "dot.1", "ts": 0, "dur": 10},
        {"ph": "X", "name": "fusion.2", "ts": 5, "dur": 10},  # beside dot.1 on another core
        {"ph": "X", "name": "dot.1", "ts": 20, "dur": 5},  # after 5 us with nothing running
        {"ph": "X", "name": "ThunkExecutor::Execute", "ts": 0, "dur": 100},  # not an operation
        {"ph": "i", "name": "dot.1", "ts": 3},
    ]
    figures = summarise(events, kinds, steps=2)
    assert figures["by_kind_ms"]["products"] == pytest.approx(15e-3 / 2)
    assert figures["by_kind_ms"]["element-wise"] == pytest.approx(10e-3 / 2)
    assert figures["by_kind_ms"]["reductions"] == 0.0
    assert figures["no_operation_ms"] == pytest.approx(5e-3 / 2)
    assert figures["traced_span_ms"] == pytest.approx(25e-3 / 2)
    top = figures["operations"][0]
    assert (top["name"], top["calls"], top["source"]) == ("dot.1", 1.0, "jit(f)/dot_general")


def test_gpu_kernels_count_for_the_operation_they_ran():
    # A GPU trace names each event after its kernel; the HLO operation rides in args.hlo_op.
    kinds = {"fusion.7": ("products", "jit(step)/dot_general"), "loop.3": ("element-wise", "")}
    events = [
        {"ph": "X", "name": "sm90_gemm_bf16", "ts": 0, "dur": 8, "args": {"hlo_op": "fusion.7"}},
        {"ph": "X", "name": "loop_add_fusion", "ts": 8, "dur": 2, "args": {"hlo_op": "loop.3"}},
        {"ph": "X", "name": "cudaLaunchKernel", "ts": 0, "dur": 1, "args": {"correlation_id": 4}},
    ]
    figures = summarise(events, kinds, steps=1)
    assert figures["by_kind_ms"]["products"] == pytest.approx(8e-3)
    assert figures["by_kind_ms"]["element-wise"] == pytest.approx(2e-3)
    assert [op["name"] for op in figures["operations"]] == ["fusion.7", "loop.3"]


def test_a_gpus_operations_are_timed_on_the_device_not_at_their_launch():
    # The host's thread that launches a kernel names the operation too: counted once, on the GPU.
    kinds = {"fusion.7": ("products", "")}
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "X", "pid": 1, "name": "fusion.7", "ts": 0, "dur": 3},
        {"ph": "X", "pid": 2, "name": "k", "ts": 2, "dur": 8, "args": {"hlo_op": "fusion.7"}},
        {"ph": "X", "pid": 1, "name": "PjitFunction(jit(step))", "ts": 0, "dur": 12},
    ]
    figures = summarise(events, kinds, steps=1)
    assert figures["by_kind_ms"]["products"] == pytest.approx(8e-3)
    assert figures["traced_span_ms"] == pytest.approx(8e-3)
    assert figures["unmapped"] == []  # the host's own events are not the device's time
    cpu = [dict(event, pid=1) for event in events[2:]]  # on a CPU the host runs the operation
    assert summarise(cpu, kinds, steps=1)["by_kind_ms"]["products"] == pytest.approx(11e-3)


GPU_HLO = """\
ENTRY %main.9 (p0: bf16[8,8], p1: bf16[8,8]) -> bf16[8,8] {
  %p0 = bf16[8,8]{1,0} parameter(0)
  %p1 = bf16[8,8]{1,0} parameter(1)
  %custom-call.1 = (bf16[8,8]{1,0}, s8[0]{0}) custom-call(%p0, %p1), custom_call_target="__cublas$gemm", metadata={op_name="jit(f)/dot_general"}
  %custom-call.2 = (bf16[8,8]{1,0}, u8[0]{0}) custom-call(%p0, %p1, %p1), custom_call_target="__cudnn$fmhaSoftmax", metadata={op_name="jit(f)/dot_product_attention"}
  ROOT %custom-call.3 = bf16[8,8]{1,0} custom-call(%p0), custom_call_target="my_callback"
}
"""  # noqa: E501  (HLO's lines are as long as XLA writes them)


def test_a_gpus_library_kernels_count_as_products():
    kinds = classify(GPU_HLO)
    assert kinds["custom-call.1"] == ("products", "jit(f)/dot_general")  # cuBLAS
    assert kinds["custom-call.2"][0] == "products"  # cuDNN's attention
    assert kinds["custom-call.3"][0] == "element-wise"  # any other library call


def test_the_longest_unmapped_events_are_listed_with_their_args():
    kinds = {"fusion.7": ("products", "")}
    events = [
        {"ph": "X", "name": "k", "ts": 0, "dur": 10, "args": {"hlo_op": "fusion.7"}},
        {"ph": "X", "name": "sm90_xmma_gemm", "ts": 10, "dur": 30, "args": {"stream": 7}},
        {"ph": "X", "name": "sm90_xmma_gemm", "ts": 40, "dur": 30, "args": {"stream": 7}},
        {"ph": "X", "name": "flash_fprop", "ts": 70, "dur": 20},
        {"ph": "X", "name": "k", "ts": 90, "dur": 10, "args": {"hlo_op": "fusion.7"}},
        {"ph": "X", "name": "python startup", "ts": -500, "dur": 400},  # before the steps
    ]
    unmapped = summarise(events, kinds, steps=1)["unmapped"]
    assert unmapped == [
        {"name": "sm90_xmma_gemm", "ms": pytest.approx(60e-3), "args": ["stream"]},
        {"name": "flash_fprop", "ms": pytest.approx(20e-3), "args": []},
    ]


def _profile(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.bench", "profile", *TINY_TRAIN, *flags],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_bench_profile_writes_the_trace_and_never_over_an_earlier_one(tmp_path):
    directory = tmp_path / "profile"
    result = _profile(f"--profile_dir={directory}", "--profile_steps=2", "--warmup=1", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    hlo = (directory / "step.hlo.txt").read_text()
    assert "ENTRY" in hlo
    assert list((directory / "trace").glob("**/*.trace.json.gz"))
    assert figures["by_kind_ms"]["products"] > 0
    assert figures["operations"], "no operation of the step in the trace"
    for op in figures["operations"]:
        assert f"%{op['name']} = " in hlo, op["name"]
    before = sorted(p.name for p in directory.rglob("*"))

    again = _profile(f"--profile_dir={directory}", "--json")
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"error: --profile_dir {directory} already holds files; name a new directory to keep them"
    ]
    assert sorted(p.name for p in directory.rglob("*")) == before


def test_bench_profile_refuses_zero_steps_in_one_line():
    result = _profile("--profile_steps=0")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: --profile_steps must be at least 1, got 0"
    ]
