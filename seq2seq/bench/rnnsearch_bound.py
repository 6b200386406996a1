"""What bounds RNNsearch's training step on an accelerator (docs/benchmarks.md)::

    python -m seq2seq.bench.rnnsearch_bound --config=configs/wmt14_enfr_rnnsearch50.py \\
        [--shapes=80x51x1,80x51x1:joint,...] [--budget_s=170] [--out=FILE] [--json]

For each shape ``BxLxU`` (B sentences, L tokens on both sides, every position real; the
recurrences' ``scan_unroll`` U), or ``BxLxU:joint`` with both encoder directions in one loop
(``model.rnnsearch.joint_encoder_loop``), or ``BxLxU:inloop`` with the recurrent weights'
gradients summed inside each backward loop as ``jax.lax.scan``'s own rule does, not after it
(``model.rnnsearch.weight_gradients_after_loop``; both suffixes may be given), the trainer's
step (``measure.compile_train_step``) is compiled and timed, and beside it two floors, jitted
loops of the same number of iterations and the same unroll:

* ``floor_empty``: each iteration one element-wise update of a [B, n_dec] state: what a loop
  iteration costs on the device with next to nothing in it (the launch floor);
* ``floor_product``: each iteration the decoder GRU's recurrent products alone,
  ``[B, n_dec] @ [n_dec, 3 n_dec]`` and a ``tanh``: the work a recurrence cannot batch
  over time, at the batch's width.

A step's sequential iterations (``recurrence_steps``) are those of its loops, counted as
``2 (2 S + T)``: the encoder's two directions over S source positions and the decoder over T
target positions, run once forward and once more in the gradient's backward pass; ``2 (S + T)``
with the joint encoder loop, whose S iterations each step both directions. A step's
time over that count (``step_us_per_recurrence_step``) against the floors' per-iteration time
says how much of the step the loop's own cost explains; MFU (analytic FLOPs over the step's
time, against the matmul peak measured in the same process) says how far the products are from
the machine. The default shapes, the paper's batch (80 x 51) first:

* the weight gradients: 80x51 with U = 1, after the loops and inside them (``:inloop``);
* the encoder's loops: 80x51 with U = 1 and 4, each as two loops and as one (``:joint``);
* the unroll: 80x51 with U = 2, 8;
* the batch at the paper's length: 40, 160, 320 sentences of 51;
* the same tokens per update (4,080 a side) in shorter rows: 120x34, 240x17, as token-based
  batching would give the short buckets;
* the length at the paper's batch: 80x17, 80x34.

Under the table (``reading``): the share of the paper batch's iteration that each floor
explains, the MFU each floor would allow, every shape's speed over that batch's, and whether
a shape at its tokens per update reached ``GOAL_MFU`` or which floor stands in the way.

That is 14 compiled steps; RNNsearch-50's compiled in 14.5 s on an H100, so with 10 timed
steps each (25 ms) the whole is about 2.5-3 minutes. ``--budget_s`` skips (and names) the
shapes that would start after it: the figures come in the order above, the most telling first.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before anything else loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import ml_collections
from absl import flags
from ml_collections import config_flags

from seq2seq.bench.settings import parse_matmul_sizes
from seq2seq.config import ConfigError, validate
from seq2seq.models import compute_dtype
from seq2seq.records.whole import write_whole

# JAX is imported where it is used, so that a command line refused on its flags ends before it
# (tests/test_cli_errors.py).

DEFAULT_SHAPES = (
    "80x51x1", "80x51x1:inloop", "80x51x1:joint", "80x51x4", "80x51x4:joint",
    "160x51x1", "80x51x2", "80x51x8",
    "40x51x1", "320x51x1",
    "120x34x1", "240x17x1",
    "80x17x1", "80x34x1",
)  # fmt: skip
MATMUL_SIZES = (4096, 8192)  # the accelerator's peak; a CPU test passes smaller ones
GOAL_MFU = 0.12  # issue 55: twice RNNsearch-50's 0.059 on the H100 at the paper's 80 x 51


# sentences, tokens, unroll, joint encoder loop, weight gradients summed inside the loops
Shape = tuple[int, int, int, bool, bool]
SUFFIXES = ("joint", "inloop")


def parse_shape(text: str) -> Shape:
    """``"80x51x4"`` -> (80 sentences, 51 tokens, unroll 4, two encoder loops, weight gradients
    after the loops); ``":joint"`` both encoder directions in one loop; ``":inloop"`` the
    weight gradients summed inside them.

    Raises:
      ConfigError: one line naming the shape and the form it must take.
    """
    sizes, *suffixes = text.lower().split(":")
    parts = sizes.split("x")
    if (
        len(parts) != 3
        or not all(part.isdigit() and int(part) > 0 for part in parts)
        or not set(suffixes) <= set(SUFFIXES)
        or len(set(suffixes)) != len(suffixes)
    ):
        raise ConfigError(
            f"--shapes {text!r} is not BATCHxLENGTHxUNROLL[:joint][:inloop] with positive "
            "integers, e.g. 80x51x4 or 80x51x4:joint"
        )
    batch, length, unroll = (int(part) for part in parts)
    return batch, length, unroll, "joint" in suffixes, "inloop" in suffixes


def shape_name(shape: Shape) -> str:
    """The inverse of ``parse_shape``."""
    batch, length, unroll, joint, in_loop = shape
    return (
        f"{batch}x{length}x{unroll}" + (":joint" if joint else "") + (":inloop" if in_loop else "")
    )


def recurrence_steps(source_length: int, target_length: int, joint: bool = False) -> int:
    """Sequential loop iterations of one training step: the encoder's directions over the
    source (two loops, or one for both) and the decoder over the target, forward and again in
    the backward pass."""
    encoder = source_length if joint else 2 * source_length
    return 2 * (encoder + target_length)


def shaped_config(config: ml_collections.ConfigDict, shape: Shape) -> ml_collections.ConfigDict:
    """``config`` with batches of exactly ``batch`` sentences of ``length`` tokens, the
    recurrences unrolled ``unroll`` steps per loop iteration, and the encoder's loops."""
    batch, length, unroll, joint, in_loop = shape
    shaped = config.copy_and_resolve_references()
    shaped.data.sentences_per_batch = batch
    shaped.data.max_length = length
    shaped.model.rnnsearch.scan_unroll = unroll
    shaped.model.rnnsearch.joint_encoder_loop = joint
    shaped.model.rnnsearch.weight_gradients_after_loop = not in_loop
    return validate(shaped)


def _loop(body: Callable, iterations: int, unroll: int) -> Callable:
    """A jitted ``jax.lax.scan`` of ``iterations`` steps of ``body(state, x) -> state``."""
    import jax

    def run(state, inputs):
        def step(carry, x):
            return body(carry, x), None

        final, _ = jax.lax.scan(step, state, inputs, length=iterations, unroll=unroll)
        return final

    return jax.jit(run)


def loop_floors(
    batch: int, width: int, iterations: int, unroll: int, dtype: str, repeats: int
) -> dict[str, float]:
    """Median seconds of the two floor loops (module docstring) of ``iterations`` steps on a
    [batch, width] state: ``{"floor_empty_s", "floor_product_s"}``."""
    import jax
    import jax.numpy as jnp

    from seq2seq.bench import measure

    key = jax.random.PRNGKey(0)
    state = jax.random.normal(key, (batch, width), jnp.float32).astype(dtype)
    inputs = jax.random.normal(key, (iterations, batch, width), jnp.float32).astype(dtype)
    recurrent = jax.random.normal(key, (width, 3 * width), jnp.float32).astype(dtype)
    recurrent = recurrent / jnp.sqrt(width).astype(dtype)

    def empty(carry, x):
        return carry * 0.5 + x

    def product(carry, x):
        gates = carry @ recurrent  # [B, 3n]: U_z, U_r and U together
        return jnp.tanh(gates[:, :width] + x)

    floors = {}
    for name, body in (("floor_empty_s", empty), ("floor_product_s", product)):
        loop = _loop(body, iterations, unroll)
        jax.block_until_ready(loop(state, inputs))  # compile and warm up
        floors[name] = statistics.median(
            measure.time_calls(lambda loop=loop: loop(state, inputs), repeats)
        )
    return floors


def shape_figures(
    config: ml_collections.ConfigDict, steps: int, warmup: int, peak_flops: float
) -> dict:
    """The step of ``config`` (already shaped) timed, with its two floors and MFU."""
    from seq2seq.bench import measure

    rows, length = measure.batch_shape(config)
    unroll = config.model.rnnsearch.scan_unroll
    joint = config.model.rnnsearch.joint_encoder_loop
    compiled = measure.compile_train_step(config)
    seconds, _, metrics = measure.time_steps(
        compiled.step, compiled.state, compiled.batch, steps, warmup
    )
    step_s = statistics.median(seconds)
    iterations = recurrence_steps(length, length, joint)
    width = config.model.rnnsearch.decoder_hidden_size
    floors = loop_floors(rows, width, iterations, unroll, compute_dtype(config), steps)
    per_step_us = 1e6 * step_s / iterations
    return {
        "batch": rows,
        "length": length,
        "unroll": unroll,
        "encoder_loops": 1 if joint else 2,
        "weight_gradients": (
            "after loop" if config.model.rnnsearch.weight_gradients_after_loop else "in loop"
        ),
        "target_tokens": compiled.target_tokens,
        "compile_s": compiled.compile_seconds,
        "step_ms": 1e3 * step_s,
        "tokens_per_s": compiled.target_tokens / step_s,
        "mfu": measure.model_flops_utilization(compiled.flops, step_s, peak_flops),
        "recurrence_steps": iterations,
        "step_us_per_recurrence_step": per_step_us,
        "floor_empty_us_per_step": 1e6 * floors["floor_empty_s"] / iterations,
        "floor_product_us_per_step": 1e6 * floors["floor_product_s"] / iterations,
        "final_loss": float(metrics["loss"]),
    }


def bound_benchmark(
    config: ml_collections.ConfigDict,
    shapes: list[Shape],
    *,
    steps: int = 10,
    warmup: int = 2,
    budget_s: float = 170.0,
    matmul_sizes: tuple[int, ...] = MATMUL_SIZES,
    on_shape: Callable[[dict], None] | None = None,
) -> dict:
    """Every shape's figures (``shape_figures``) in order while ``budget_s`` lasts: a shape is
    skipped where the slowest one so far would end past it. ``on_shape(result)`` after each."""
    import jax

    from seq2seq.bench import measure

    start = time.perf_counter()
    peak = measure.matmul_peak(compute_dtype(config), matmul_sizes)
    result = {
        "model": config.model.name,
        "device_kind": jax.devices()[0].device_kind,
        "dtype": compute_dtype(config),
        "peak_gflops": peak["peak_gflops"],
        "iterations_counted_as": (
            "2 * (2 * source length + target length), 2 * (source length + target length) "
            "with one encoder loop"
        ),
        "shapes": [],
        "skipped": [],
        "reading": [],  # rewritten after every shape
    }
    slowest = 0.0
    for shape in shapes:
        if time.perf_counter() - start + slowest > budget_s:
            result["skipped"].append(shape_name(shape))
            continue
        begun = time.perf_counter()
        shaped = shaped_config(config, shape)
        result["shapes"].append(shape_figures(shaped, steps, warmup, peak["peak_gflops"] * 1e9))
        slowest = max(slowest, time.perf_counter() - begun)
        result["seconds"] = time.perf_counter() - start
        result["reading"] = reading(result["shapes"])
        if on_shape:
            on_shape(result)
    result["seconds"] = time.perf_counter() - start
    return result


def _label(figures: dict) -> str:
    """``shape_name`` of a measured shape's figures."""
    return shape_name(
        (
            figures["batch"],
            figures["length"],
            figures["unroll"],
            figures["encoder_loops"] == 1,
            figures.get("weight_gradients") == "in loop",
        )
    )


def _speeds(shapes: list[dict], base: dict) -> str:
    """``"80x51x4 1.31, 80x51x2 1.12"``: tokens/s over ``base``'s, fastest first."""
    ranked = sorted(shapes, key=lambda shape: -shape["tokens_per_s"])
    return ", ".join(f"{_label(s)} {s['tokens_per_s'] / base['tokens_per_s']:.2f}" for s in ranked)


def _ceiling(mfu: float) -> str:
    return f"{mfu:.3f}" if mfu < 1 else "above 1 (that floor does not bind)"


def reading(shapes: list[dict]) -> list[str]:
    """What the measured shapes say, in sentences, so that one loan's figures answer item 5.

    The first shape of ``DEFAULT_SHAPES`` (the paper's batch, two encoder loops, no unroll) is
    the base where it was measured, else the first measured. For the base: how much of one
    iteration of the step the two floors explain, and the MFU the step could reach at most were
    each iteration only a floor (its MFU times the iteration's time over the floor's: the
    ceiling the recurrence sets at that batch). Then every shape's tokens/s over the base's,
    those at the base's tokens per update apart from those at other batch sizes, and the
    verdict against ``GOAL_MFU`` at the base's tokens per update.
    """
    if not shapes:
        return []
    first = shape_name(parse_shape(DEFAULT_SHAPES[0]))
    base = next((shape for shape in shapes if _label(shape) == first), shapes[0])
    iteration = base["step_us_per_recurrence_step"]
    empty, product = base["floor_empty_us_per_step"], base["floor_product_us_per_step"]
    lines = [
        f"At {_label(base)} (MFU {base['mfu']:.3f}) an iteration of the step takes "
        f"{iteration:.1f} us: an empty loop's iteration {empty:.1f} us ({empty / iteration:.1%} "
        f"of it), the decoder GRU's recurrent products alone {product:.1f} us "
        f"({product / iteration:.1%}). Were every iteration only those products, MFU could "
        f"reach {_ceiling(base['mfu'] * iteration / product)} at this batch; only the launch, "
        f"{_ceiling(base['mfu'] * iteration / empty)}."
    ]
    same = [s for s in shapes if s["target_tokens"] == base["target_tokens"]]
    other = [s for s in shapes if s["target_tokens"] != base["target_tokens"]]
    lines.append(
        f"Tokens/s over {_label(base)}'s, at its {base['target_tokens']:,} target tokens per "
        f"update: {_speeds(same, base)}"
        + (f"; at other batch sizes: {_speeds(other, base)}." if other else ".")
    )
    best = max(same, key=lambda shape: shape["mfu"])
    ceiling = best["mfu"] * best["step_us_per_recurrence_step"] / best["floor_product_us_per_step"]
    if best["mfu"] >= GOAL_MFU:
        verdict = f"reached by {_label(best)} (MFU {best['mfu']:.3f})"
    elif ceiling < GOAL_MFU:
        verdict = (
            f"not reached: the best, {_label(best)}, has MFU {best['mfu']:.3f}, and its "
            f"recurrent products alone would cap it at {ceiling:.3f}: the recurrence's own "
            "sequential products at this batch prevent it"
        )
    else:
        verdict = (
            f"not reached: the best, {_label(best)}, has MFU {best['mfu']:.3f}, while its "
            f"recurrent products alone would allow {_ceiling(ceiling)}: the rest of each iteration "
            "(attention, the gates' element-wise work, their gradients) is what to cut"
        )
    lines.append(f"The goal, MFU >= {GOAL_MFU:g} at the same tokens per update: {verdict}.")
    return lines


COLUMNS = (
    ("batch", "B", "d"), ("length", "L", "d"), ("unroll", "U", "d"),
    ("encoder_loops", "encoder loops", "d"), ("weight_gradients", "weight gradients", "s"),
    ("step_ms", "step ms", ".2f"),
    ("tokens_per_s", "tokens/s", ",.0f"), ("mfu", "MFU", ".3f"),
    ("recurrence_steps", "iterations", "d"), ("step_us_per_recurrence_step", "us/iteration", ".1f"),
    ("floor_empty_us_per_step", "empty floor us", ".1f"),
    ("floor_product_us_per_step", "product floor us", ".1f"), ("compile_s", "compile s", ".1f"),
)  # fmt: skip


def markdown(result: dict) -> str:
    """One row per shape; the skipped ones named below."""
    lines = [
        f"{result['model']} on {result['device_kind']}, {result['dtype']}, matmul peak "
        f"{result['peak_gflops']:,.0f} GFLOP/s; iterations = {result['iterations_counted_as']}",
        "",
        "| " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|" + "---:|" * len(COLUMNS),
    ]
    for shape in result["shapes"]:
        lines.append("| " + " | ".join(format(shape[k], f) for k, _, f in COLUMNS) + " |")
    if result["skipped"]:
        lines += ["", f"skipped (out of budget): {', '.join(result['skipped'])}"]
    for sentence in result.get("reading", []):
        lines += ["", sentence]
    return "\n".join(lines) + "\n"


def main() -> None:
    from seq2seq import cli

    config_flag = config_flags.DEFINE_config_file("config", None, "RNNsearch config file.")
    holders = {
        "shapes": flags.DEFINE_list(
            "shapes", list(DEFAULT_SHAPES), "BATCHxLENGTHxUNROLL[:joint][:inloop], in order."
        ),
        "steps": flags.DEFINE_integer("steps", 10, "Timed steps per shape (after the warm-up)."),
        "warmup": flags.DEFINE_integer("warmup", 2, "Untimed steps after compiling."),
        "budget_s": flags.DEFINE_float("budget_s", 170.0, "No shape starts that would end later."),
        "matmul_sizes": flags.DEFINE_list(
            "matmul_sizes", [str(n) for n in MATMUL_SIZES], "Square matmuls for the peak."
        ),
        "out": flags.DEFINE_string("out", None, "Also write the JSON here, after every shape."),
        "json": flags.DEFINE_bool("json", False, "Print one JSON line instead of the table."),
    }

    def run(argv: list[str]) -> None:
        del argv
        flag = {name: holder.value for name, holder in holders.items()}
        if config_flag.value is None:
            raise ConfigError("--config FILE is required, e.g. configs/wmt14_enfr_rnnsearch50.py")
        config = validate(config_flag.value)
        if config.model.name != "rnnsearch":
            raise ConfigError(
                f"--config trains model.name={config.model.name!r}; this measures RNNsearch's "
                "recurrences: pass an RNNsearch config, e.g. configs/wmt14_enfr_rnnsearch50.py"
            )
        shapes = [parse_shape(text) for text in flag["shapes"]]
        sizes = parse_matmul_sizes(flag["matmul_sizes"])
        if flag["steps"] < 1 or flag["warmup"] < 0:
            raise ConfigError("--steps must be at least 1 and --warmup at least 0")
        out = Path(flag["out"]) if flag["out"] else None

        def write(result: dict) -> None:
            if out is not None:
                out.parent.mkdir(parents=True, exist_ok=True)
                write_whole(out, json.dumps(result, indent=1) + "\n")
            print(f"rnnsearch bound: {len(result['shapes'])} shapes", file=sys.stderr, flush=True)

        result = bound_benchmark(
            config,
            shapes,
            steps=flag["steps"],
            warmup=flag["warmup"],
            budget_s=flag["budget_s"],
            matmul_sizes=sizes,
            on_shape=write,
        )
        write(result)
        print(json.dumps(result) if flag["json"] else markdown(result))

    cli.run(run)


if __name__ == "__main__":
    main()
