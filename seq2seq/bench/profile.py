"""``bench profile``: where a training step's time goes, by what each XLA operation computes.

A few steps of the trainer's compiled step (``measure.compile_train_step``) run under
``jax.profiler``; the trace is written for Perfetto or TensorBoard's profile plugin, the compiled
HLO beside it, and every operation's time is summed into one of a few kinds, read from the HLO
(not from the operation's name):

- ``products``: a dot or convolution, with whatever XLA fused into it;
- ``communication``: a collective (all-reduce, all-gather, ...);
- ``reductions``: a reduce (softmax and layer-norm statistics, loss sums, gradient norms);
- ``data movement``: nothing but transposes, copies, slices, concatenations, gathers, scatters
  (and the reshapes and broadcasts around them);
- ``element-wise``: everything else (activations, dropout, residual adds, the optimizer, and
  movement fused with any of them).

Two caveats keep the figures honest. On a CPU, XLA runs independent operations side by side on
the cores, so the kinds' times can add up to more than the step. And a product handed to Eigen
returns at once and finishes in the background: its time shows up as ``no operation running``,
the part of the traced span that no operation covers.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import time
from pathlib import Path
from typing import NamedTuple

import jax
import ml_collections

from seq2seq.bench.collectives import COMPUTATION as _COMPUTATION
from seq2seq.bench.measure import compile_train_step

KINDS = ("products", "communication", "reductions", "data movement", "element-wise")
_CONTAINERS = {"while", "conditional", "async-start", "async-done"}  # their bodies are timed apart
_NO_WORK = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element"}  # never executed
_PRODUCTS = {"dot", "convolution"}
_COLLECTIVES = {
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "all-reduce-start",
    "all-gather-start",
    "collective-permute-start",
}
_REDUCTIONS = {"reduce", "reduce-window"}
_MOVEMENT = {
    "transpose",
    "copy",
    "slice",
    "dynamic-slice",
    "dynamic-update-slice",
    "concatenate",
    "pad",
    "gather",
    "scatter",
    "reverse",
}
_PLUMBING = {  # move or make no data by themselves
    "parameter",
    "constant",
    "bitcast",
    "broadcast",
    "reshape",
    "iota",
    "convert",
    "tuple",
    "get-tuple-element",
}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+.*?\s([a-z][\w\-]*)\((.*)$")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_TO_APPLY = re.compile(r"to_apply=%?([\w.\-]+)")
_SOURCE = re.compile(r'op_name="([^"]*)"')
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
# A custom call is a library's kernel: on a GPU, cuBLAS's products (``__cublas$gemm``,
# ``__cublas$lt$matmul``) and cuDNN's attention (``__cudnn$fmha...``), mostly products too.
_PRODUCT_TARGETS = ("gemm", "matmul", "fmha", "conv")


class Operation(NamedTuple):
    """One HLO instruction: its opcode, the computations it calls, the JAX op it came from."""

    opcode: str
    calls: str | None  # a fusion's computation
    applies: str | None  # a reduction's (or scatter's) combining computation
    source: str
    target: str = ""  # a custom call's target (the library function it calls)


def parse_hlo(hlo_text: str) -> dict[str, dict[str, Operation]]:
    """``{computation: {instruction: Operation}}`` of a compiled module's HLO text."""
    computations: dict[str, dict[str, Operation]] = {}
    current = None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            current = computations.setdefault(header.group(1), {})
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            name, opcode, rest = instruction.groups()
            found = [p.search(rest) for p in (_CALLS, _TO_APPLY, _SOURCE, _TARGET)]
            calls, applies, source, target = (m and m.group(1) for m in found)
            current[name] = Operation(opcode, calls, applies, source or "", target or "")
    return computations


def _kind_of_opcodes(opcodes: set[str]) -> str:
    if opcodes & _PRODUCTS:
        return "products"
    if opcodes & _COLLECTIVES:
        return "communication"
    if opcodes & _REDUCTIONS:
        return "reductions"
    if opcodes & _MOVEMENT and opcodes <= _MOVEMENT | _PLUMBING:
        return "data movement"
    return "element-wise"


def classify(hlo_text: str) -> dict[str, tuple[str, str]]:
    """``{instruction: (kind, JAX source op)}`` for every instruction the profiler can time.

    Those are the instructions of the entry computation and of the bodies of its loops and
    branches, not the insides of fusions or reductions. A fusion's kind is that of the opcodes
    inside the computation it calls (one level down, which is where XLA puts them). Loops and
    branches are left out, since the operations of their bodies are timed on their own, and so
    are parameters, constants and bitcasts, which run no code.
    """
    computations = parse_hlo(hlo_text)
    inner = {  # a call's body is not inner: XLA on CPU runs a small call as one operation
        called
        for instructions in computations.values()
        for op in instructions.values()
        for called in (op.calls, None if op.opcode == "call" else op.applies)
        if called
    }
    kinds = {}
    for computation, instructions in computations.items():
        if computation in inner:
            continue
        for name, op in instructions.items():
            if op.opcode in _CONTAINERS or op.opcode in _NO_WORK:
                continue
            if op.opcode == "fusion" and op.calls in computations:
                opcodes = {fused.opcode for fused in computations[op.calls].values()}
            elif op.opcode == "custom-call" and any(t in op.target for t in _PRODUCT_TARGETS):
                opcodes = {"dot"}
            else:
                opcodes = {op.opcode}
            kinds[name] = (_kind_of_opcodes(opcodes), op.source)
    return kinds


def _trace_events(trace_dir: Path) -> list[dict]:
    files = sorted(trace_dir.glob("**/*.trace.json.gz"))
    if not files:
        raise RuntimeError(f"jax.profiler wrote no *.trace.json.gz under {trace_dir}")
    with gzip.open(files[-1]) as f:
        return json.load(f)["traceEvents"]


def operation_name(event: dict, kinds: dict[str, tuple[str, str]]) -> str | None:
    """The HLO operation a trace event ran, or None: a CPU trace names the operation itself; a
    GPU kernel's event is named after the kernel and carries the operation as ``args.hlo_op``."""
    if event.get("ph") != "X" or "dur" not in event:
        return None
    for name in (event.get("name"), event.get("args", {}).get("hlo_op")):
        if name in kinds:
            return name
    return None


def on_the_device(events: list[dict], kinds: dict[str, tuple[str, str]]) -> list[dict]:
    """The events of the processes that ran the step's operations.

    A GPU's trace names an operation twice: in the kernels of the device's streams, and in the
    host's launches of them. Counting both put 101 ms of operations in an 85 ms step of
    Transformer-big on an H100. Where a device process (``/device:...``) ran operations, only
    its events are kept; a CPU's trace, whose operations run on host threads, keeps them all."""
    processes = {
        event["pid"]: event.get("args", {}).get("name", "")
        for event in events
        if event.get("ph") == "M" and event.get("name") == "process_name"
    }
    devices = {pid for pid, name in processes.items() if name.startswith("/device:")}
    if not any(e.get("pid") in devices and operation_name(e, kinds) for e in events):
        return events
    return [event for event in events if event.get("pid") in devices]


def summarise(events: list[dict], kinds: dict[str, tuple[str, str]], steps: int) -> dict:
    """Per-step milliseconds by kind and by operation, from a trace's complete ("X") events
    (a device's own, where it has any: ``on_the_device``)."""
    events = on_the_device(events, kinds)
    named = ((event, operation_name(event, kinds)) for event in events)
    spans = [(e["ts"], e["ts"] + e["dur"], name) for e, name in named if name is not None]
    if not spans:
        raise RuntimeError("the trace holds no operation of the compiled step")
    by_kind = dict.fromkeys(KINDS, 0.0)
    by_op: dict[str, float] = collections.Counter()
    calls: dict[str, int] = collections.Counter()
    for start, end, name in spans:
        by_kind[kinds[name][0]] += end - start
        by_op[name] += end - start
        calls[name] += 1
    covered, reach = 0.0, None  # the union of the operations' intervals
    for start, end, _ in sorted(spans):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    first, last = min(s[0] for s in spans), max(s[1] for s in spans)
    per_step_ms = 1e-3 / steps  # trace times are microseconds
    return {
        "by_kind_ms": {kind: us * per_step_ms for kind, us in by_kind.items()},
        "no_operation_ms": (last - first - covered) * per_step_ms,
        "traced_span_ms": (last - first) * per_step_ms,
        "unmapped": _unmapped(events, kinds, first, last, per_step_ms),
        "operations": [
            {
                "name": name,
                "kind": kinds[name][0],
                "ms": us * per_step_ms,
                "calls": calls[name] / steps,
                "source": kinds[name][1],
            }
            for name, us in by_op.most_common()
        ],
    }


def _unmapped(events, kinds, first, last, per_step_ms, top=15) -> list[dict]:
    """The longest events inside the traced span that name no operation of the step, by name,
    with the keys of their args: what a trace calls its kernels when the mapping misses them."""
    time_by_name: dict[str, float] = collections.Counter()
    args_by_name: dict[str, list[str]] = {}
    for event in events:
        if event.get("ph") != "X" or "dur" not in event or operation_name(event, kinds):
            continue
        if event["ts"] < first or event["ts"] + event["dur"] > last:
            continue
        time_by_name[event["name"]] += event["dur"]
        args_by_name.setdefault(event["name"], sorted(event.get("args", {})))
    return [
        {"name": name, "ms": us * per_step_ms, "args": args_by_name[name]}
        for name, us in time_by_name.most_common(top)
    ]


def profile_benchmark(
    config: ml_collections.ConfigDict, profile_dir: Path, steps: int = 3, warmup: int = 3
) -> dict:
    """Traces ``steps`` training steps of ``config`` (after ``warmup``) into ``profile_dir``.

    Returns the figures of ``summarise`` with the traced steps' wall time (``step_ms``, the
    profiler's overhead included), the top operations, and where the trace and HLO went.
    """
    compiled = compile_train_step(config)
    state = compiled.state
    for _ in range(warmup):
        state, metrics = compiled.step(state, compiled.batch)
    jax.block_until_ready(state)
    hlo_file = profile_dir / "step.hlo.txt"
    hlo_text = compiled.step.as_text()
    hlo_file.write_text(hlo_text)
    trace_dir = profile_dir / "trace"
    jax.profiler.start_trace(str(trace_dir))
    start = time.perf_counter()
    try:
        # Each step waited for, as ``bench train`` and the trainer do: dispatched back to back,
        # the host's work on the next step takes a core from the one being traced.
        for _ in range(steps):
            state, metrics = compiled.step(state, compiled.batch)
            jax.block_until_ready(metrics)
        seconds = time.perf_counter() - start
    finally:
        jax.profiler.stop_trace()
    figures = summarise(_trace_events(trace_dir), classify(hlo_text), steps)
    return {
        "model": config.model.name,
        "steps_profiled": steps,
        "step_ms": 1e3 * seconds / steps,
        "compile_s": compiled.compile_seconds,  # a hit when the persistent cache holds the step
        **figures,
        "trace_dir": str(trace_dir),
        "hlo_file": str(hlo_file),
    }
