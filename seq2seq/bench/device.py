"""The paper configs on an accelerator, in one command (``make device-bench``)::

    python -m seq2seq.bench.device --out DIR [--minutes 8.5]

Each part is its own process (``python -m seq2seq.bench ... --json``), so that a failure or a
timeout leaves the other parts' figures, in the order of what matters most:

1. Transformer-big's training step in bfloat16: step time, MFU against the matmul peak measured
   in the same process, compile time, peak device memory;
2. beam search (beam 4) with Transformer-base on 256 sentences, and its compile time;
3. Transformer-base's training step; 4. RNNsearch-50's;
5. the fused-attention tests that need a GPU (``tests/test_fused_attention.py``: cuDNN against
   the equations) and the step traced with the CPU backend failing;
6. Transformer-big under ``bench profile``: a restart's compile (the first part filled the
   persistent cache) and where the step's time goes, by kind of operation; then the same with
   XLA's command buffers off, so each kernel's event names its operation;
7. variants beside parts 1-2: XLA's own (Triton) matrix products instead of cuBLAS's for
   Transformer-big's step and the search, Transformer-big's layers in a scan, and its loss in
   chunks of 1,024 tokens (the CPU's default) instead of the whole batch at once;
8. issue 55's measurements (``make device-bounds`` runs these two alone): ``train.py``'s loop
   for Transformer-base on a WMT-like corpus against the jitted step alone on the same batches
   (``seq2seq.bench.real_loop``; needs ``data/multi30k``), and what bounds RNNsearch-50's
   step: batch, length and scan unroll against a loop's launch floor
   (``seq2seq.bench.rnnsearch_bound``).

This process never loads JAX: it would take the accelerator's memory from its parts. A part
starts only while enough of ``--minutes`` is left and gets no more than what is left.
``DIR/device_bench.json`` is written after every part; ``DIR/device_bench.md`` at the end holds
the figures beside issue 41's targets. How to bring the packages the accelerator's image lacks:
docs/benchmarks.md, "On an accelerator".
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before anything else loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from absl import flags

from seq2seq.records.whole import write_whole

REPO = Path(__file__).resolve().parents[2]
BIG = "configs/wmt14_ende_transformer_big.py"
BASE = "configs/wmt14_ende_transformer_base.py"
RNNSEARCH = "configs/wmt14_enfr_rnnsearch50.py"
# Recorded with every device figure: the image's own JAX, flax, optax, orbax-checkpoint and
# tensorstore (whatever versions it brings, not the lock's), and grain from .whl/.
PACKAGES = (
    "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax", "optax",
    "orbax-checkpoint", "tensorstore", "grain",
)  # fmt: skip
MIN_PART_SECONDS = 45  # a part is not started with less than this left
BOUND_BUDGET_S = 90  # seconds in which rnnsearch_bound starts shapes (about 6 of its 14 on an H100)
REAL_LOOP_MINUTES = 2.0  # training minutes of real_loop_base (issue 55: two minutes)

# Issue 41's targets on one H100: (part, figure, bound, "min" or "max").
TARGETS = (
    ("train_big", "mfu", 0.50, "min"),
    ("train_big", "compile_s", 60.0, "max"),
    ("train_base", "compile_s", 60.0, "max"),
    ("train_rnnsearch50", "compile_s", 60.0, "max"),
    ("decode_base", "compile_s", 30.0, "max"),
)


@dataclasses.dataclass(frozen=True)
class Part:
    """One process: ``python -m ARGS`` with ``env`` added, at most ``limit_s`` seconds."""

    name: str
    args: tuple[str, ...]
    limit_s: float
    env: tuple[tuple[str, str], ...] = ()
    pytest: bool = False  # its figures are pytest's counts, not a JSON line


def _bench(command: str, config: str, *flags_: str) -> tuple[str, ...]:
    return ("seq2seq.bench", command, f"--config={config}", "--json", *flags_)


def parts(
    cache: Path, tests: str = "tests/test_fused_attention.py", keep: Path | None = None
) -> list[Part]:
    """The parts in order. Parts 1-6 share one persistent compilation cache, empty at the start
    (so every first compile is a real one, and part 6's is a restart's); each variant after them
    has its own, so its compile is a real one too. The profiles' traces and HLO go under
    ``keep`` (default: ``cache``)."""
    keep = cache if keep is None else keep
    shared = (("JAX_COMPILATION_CACHE_DIR", str(cache / "shared")),)
    train = ("--persistent_cache", "--noyardstick", "--steps=10", "--warmup=3")
    big = ("--matmul_sizes=4096,8192", *train)

    def variant(name: str, command: str, config: str, *flags_: str, triton=False) -> Part:
        env = [("JAX_COMPILATION_CACHE_DIR", str(cache / name))]
        if triton:
            env.append(("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=true"))
        return Part(name, _bench(command, config, *flags_), 200, tuple(env))

    decode = ("--persistent_cache", "--beam_size=4", "--sentences=256")
    return [
        Part("train_big", _bench("train", BIG, *big), 240, shared),
        Part("decode_base", _bench("decode", BASE, *decode), 150, shared),
        Part("train_base", _bench("train", BASE, *big), 150, shared),
        Part("train_rnnsearch50", _bench("train", RNNSEARCH, *big), 150, shared),
        Part(
            "tests",
            ("pytest", "-q", "-p", "no:cacheprovider", tests, "-k", "cudnn or without_a_cpu"),
            150,
            pytest=True,
        ),
        Part(
            "profile_big",
            _bench("profile", BIG, "--persistent_cache", f"--profile_dir={keep / 'profile'}"),
            120,
            shared,
        ),
        # The profile again with XLA's command buffers (CUDA graphs) off: kernels a graph
        # launches may carry no operation's name in the trace.
        Part(
            "profile_big_kernels",
            _bench("profile", BIG, f"--profile_dir={keep / 'profile_kernels'}"),
            150,
            (("XLA_FLAGS", "--xla_gpu_enable_command_buffer="),),
        ),
        # Variants of parts 1-2: XLA's own (Triton) matrix products instead of cuBLAS's
        # (seq2seq.runtime.xla_flags), Transformer-big's layers in a scan, and its loss in chunks of
        # 1,024 tokens (a CPU's default) instead of the whole batch at once.
        variant("train_big_triton", "train", BIG, *big, triton=True),
        variant("decode_base_triton", "decode", BASE, *decode, triton=True),
        variant(
            "train_big_scan", "train", BIG, *big, "--config.model.transformer.scan_layers=True"
        ),
        variant("train_big_chunk1024", "train", BIG, *big, "--config.train.loss_chunk_tokens=1024"),
        # Issue 55: train.py's loop against the step alone for Transformer-base
        # (seq2seq.bench.real_loop, 2 minutes of training), then what bounds RNNsearch-50's
        # step (seq2seq.bench.rnnsearch_bound: batch, length, scan unroll and the encoder's
        # loops, against a loop's launch floor; its JSON is written after every shape, should
        # the part be stopped).
        Part(
            "real_loop_base",
            (
                "seq2seq.bench.real_loop",
                f"--config={BASE}",
                "--json",
                f"--out={keep}",
                f"--workdir={cache / 'real_loop'}",
                f"--minutes={REAL_LOOP_MINUTES}",
            ),
            60 * REAL_LOOP_MINUTES + 200,  # tokenizer, 4-5 bucket compiles, validation, replay
            (("JAX_COMPILATION_CACHE_DIR", str(cache / "real_loop_cache")),),
        ),  # fmt: skip
        Part(
            "rnnsearch_bound",
            (
                "seq2seq.bench.rnnsearch_bound",
                f"--config={RNNSEARCH}",
                "--json",
                f"--budget_s={BOUND_BUDGET_S}",
                f"--out={keep / 'rnnsearch_bound.json'}",
            ),
            BOUND_BUDGET_S + 70,  # the last shape's compile may start just before the budget
            (("JAX_COMPILATION_CACHE_DIR", str(cache / "rnnsearch_bound")),),
        ),  # fmt: skip
    ]


def pytest_counts(output: str) -> dict[str, int]:
    """``{"passed": 9, "skipped": 1, ...}`` from pytest's last summary line."""
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}


def run_part(part: Part, seconds_left: float) -> dict:
    """Runs ``part`` for at most ``seconds_left`` (and its own limit); its figures, or why not."""
    limit = min(part.limit_s, seconds_left)
    if limit < MIN_PART_SECONDS:
        return {"status": "skipped", "reason": f"{seconds_left:.0f} s of the budget left"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", *part.args],
            cwd=REPO,
            env={**os.environ, **dict(part.env)},
            capture_output=True,
            text=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired as expired:
        tail = (expired.stderr or b"") + (expired.stdout or b"")
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"status": "timeout", "seconds": limit, "stderr_tail": tail[-2000:]}
    seconds = time.perf_counter() - start
    if part.pytest:
        counts = pytest_counts(done.stdout)
        status = "ok" if done.returncode == 0 else "failed"
        return {"status": status, "seconds": seconds, **counts, "tail": done.stdout[-3000:]}
    if done.returncode != 0:
        return {"status": "failed", "seconds": seconds, "stderr_tail": done.stderr[-3000:]}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if part.name.startswith("profile"):
        figures["operations"] = figures["operations"][:25]
    return {"status": "ok", "seconds": seconds, **figures}


def environment() -> dict:
    """Package versions, the accelerator as nvidia-smi names it, and the commit, where known."""
    versions = {}
    for package in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)

    def output(*command: str) -> str | None:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=REPO)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    gpu_query = "--query-gpu=name,driver_version,memory.total"
    return {
        "packages": versions,
        "gpu": output("nvidia-smi", gpu_query, "--format=csv,noheader"),
        "commit": output("git", "rev-parse", "--short", "HEAD"),
        "cpus": os.cpu_count(),
    }


def _figure(results: dict, part: str, key: str) -> float | None:
    value = results.get(part, {}).get(key)
    return value if isinstance(value, (int, float)) else None


def target_rows(results: dict) -> list[tuple[str, str, str, str]]:
    """(part, figure, measured, "<= bound: met" / "NOT met" / "not measured") per target."""
    rows = []
    for part, key, bound, sense in TARGETS:
        value = _figure(results, part, key)
        sign = ">=" if sense == "min" else "<="
        if value is None:
            status = results.get(part, {}).get("status", "not run")
            verdict = f"{sign} {bound:g}: not measured ({status})"
            rows.append((part, key, "-", verdict))
            continue
        met = value >= bound if sense == "min" else value <= bound
        rows.append((part, key, f"{value:.3g}", f"{sign} {bound:g}: {'met' if met else 'NOT met'}"))
    return rows


_SHOWN = (
    "status", "device_kind", "dtype", "batch", "params", "step_ms", "tokens_per_s",
    "achieved_gflops", "peak_gflops", "mfu", "compile_s", "peak_memory_mb", "sentences_per_s",
    "batch_s", "passed", "failed", "skipped", "seconds", "loop_steady_tokens_per_s",
    "loop_wall_tokens_per_s", "replay_tokens_per_s", "synthetic_tokens_per_s",
    "loop_over_replay", "loop_over_synthetic",
)  # fmt: skip


def shapes_table(shapes: list[dict]) -> list[str]:
    """A part's per-shape figures (``rnnsearch_bound``), one row each, numbers to 3 figures."""
    if not shapes:
        return []
    keys = list(shapes[0])

    def cell(value) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    return [
        "",
        "| " + " | ".join(keys) + " |",
        "|" + "---:|" * len(keys),
        *("| " + " | ".join(cell(shape.get(key)) for key in keys) + " |" for shape in shapes),
    ]


def markdown(results: dict) -> str:
    """The targets table, then each part's main figures, then the profile's kinds."""
    lines = [
        f"device bench: {results['environment'].get('gpu')}, packages "
        + ", ".join(f"{k} {v}" for k, v in results["environment"]["packages"].items()),
        "",
        "| part | figure | measured | target |",
        "|---|---|---:|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in target_rows(results)]
    for name, figures in results.items():
        if name == "environment":
            continue
        lines += ["", f"**{name}**", "", "| figure | value |", "|---|---:|"]
        lines += [f"| {key} | {figures[key]} |" for key in _SHOWN if key in figures]
        if "by_kind_ms" in figures:
            lines += [f"| {kind} (ms) | {ms:.2f} |" for kind, ms in figures["by_kind_ms"].items()]
            lines += [f"| no operation (ms) | {figures['no_operation_ms']:.2f} |"]
            lines += [
                f"| unmapped: {event['name'][:60]} (ms) | {event['ms']:.2f} |"
                for event in figures.get("unmapped", [])[:8]
            ]
        lines += shapes_table(figures.get("shapes", []))
        for sentence in figures.get("reading", []):  # rnnsearch_bound's verdict, in words
            lines += ["", sentence]
        for key in ("reason", "stderr_tail"):
            if key in figures:
                lines += ["", "```", figures[key][-1500:], "```"]
    return "\n".join(lines) + "\n"


def bench(out: Path, minutes: float, selected: list[str] | None = None) -> dict:
    """Runs the parts (those named in ``selected``, or all) within ``minutes``; writes DIR/."""
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.perf_counter() + 60 * minutes
    results = {"environment": environment()}
    with tempfile.TemporaryDirectory(prefix="seq2seq-device-bench-") as cache:
        for part in parts(Path(cache), keep=out):
            if selected and part.name not in selected:
                continue
            print(f"device bench: {part.name} ...", file=sys.stderr, flush=True)
            results[part.name] = run_part(part, deadline - time.perf_counter())
            print(f"device bench: {part.name} {results[part.name]['status']}", file=sys.stderr)
            write_whole(out / "device_bench.json", json.dumps(results, indent=1))
    write_whole(out / "device_bench.md", markdown(results))
    return results


def main() -> None:
    out = flags.DEFINE_string("out", "device-bench", "Folder for device_bench.json and .md.")
    minutes = flags.DEFINE_float("minutes", 8.5, "Wall-clock budget for all the parts.")
    only = flags.DEFINE_list("parts", [], "Run only these parts (default: all), by name.")

    def run(argv: list[str]) -> None:
        known = [part.name for part in parts(Path("."))]
        unknown = sorted(set(only.value) - set(known))
        if unknown:
            choices = ", ".join(known)
            print(f"error: unknown --parts {unknown}; choose from {choices}", file=sys.stderr)
            sys.exit(1)
        if not minutes.value > 0:  # every part would be skipped, and an empty table written
            print(f"error: --minutes={minutes.value:g}: give a budget above 0", file=sys.stderr)
            sys.exit(1)
        results = bench(Path(out.value), minutes.value, only.value or None)
        print(markdown(results))

    cli.run(run)


if __name__ == "__main__":
    main()
