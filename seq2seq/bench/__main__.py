"""Benchmarks, each printing a table: matmul peak, training step (tokens/s, MFU), beam search,
input pipeline and profile (this file: the flags, then ``seq2seq.bench.measure``).

    python -m seq2seq.bench matmul
    python -m seq2seq.bench train --config configs/bench_small.py [--steps 20]
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m seq2seq.bench train \\
        --config configs/bench_small.py --meshes 8x1x1,2x4x1,2x2x2,1x1x8   # step time per mesh
    python -m seq2seq.bench decode --config configs/bench_small.py [--beam_size 4] [--workdir RUN]
    python -m seq2seq.bench decode --workdir RUN --split test [--beam_size 4] [--batch_size 256]
    python -m seq2seq.bench decode --workdir RUN --split test --engine ctranslate2  # JAX beside
                                   # CTranslate2 float32 and int8, on the same weights
    python -m seq2seq.bench data --config configs/bench_small.py
    python -m seq2seq.bench profile --config configs/bench_small.py [--profile_dir DIR]
    python -m seq2seq.bench all        # every one of them on the bench configs (make bench)
    python -m seq2seq.bench.device --out DIR  # paper configs on an accelerator (make device-bench)

``--json`` prints one JSON line instead of the table. JAX's persistent compilation cache is
switched off unless ``--persistent_cache``, so compile times are real ones.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import ml_collections
from absl import flags
from ml_collections import config_flags

from seq2seq import cli
from seq2seq.bench.settings import MATMUL_SIZES, TARGET_DATA_MULTIPLE, parse_matmul_sizes
from seq2seq.config import ConfigError, flatten, load_config_file, validate
from seq2seq.models import MODELS, ModelFamily, compute_dtype
from seq2seq.records.run_directory import RunDirectory

REPO = Path(__file__).resolve().parents[2]


def bench_families() -> list[ModelFamily]:
    """The registered families the bench measures (those with targets), in registry order."""
    return [family for family in MODELS.values() if family.bench is not None]


def bench_config_path(family: ModelFamily) -> Path:
    return REPO / "configs" / f"{family.bench.config}.py"


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_format(v)}" for k, v in value.items())
    return str(value)


def _table(title: str, figures: dict, targets: dict | None = None) -> str:
    targets = targets or {}
    lines = [title, "| figure | value | target |", "|---|---:|---|"]
    lines += [f"| {k} | {_format(v)} | {targets.get(k, '')} |" for k, v in figures.items()]
    return "\n".join(lines)


def _met(value: float, bound: float) -> str:
    return f">= {_format(bound)}: {'met' if value >= bound else 'NOT met'}"


# The untrained decode the targets are stated for: a batch of 32 sources of 30 tokens, each
# searched for 30 output tokens (the flags' defaults).
TARGET_DECODE = {"sentences": 32, "source_length": 30, "max_output_length": 30}
OTHER_SETTINGS = "(no target: settings differ from the target's)"


def _is_bench_config(config: ml_collections.ConfigDict) -> bool:
    """Whether ``config`` is its family's bench config as shipped, the model its targets are
    stated for."""
    family = MODELS.get(config.model.name)
    if family is None or family.bench is None:
        return False
    shipped = load_config_file(bench_config_path(family))
    return dict(flatten(config)) == dict(flatten(shipped))


def _standard_decode(result: dict) -> bool:
    """Whether an untrained decode ran the settings its family's target is stated at."""
    return not result["trained"] and all(result[k] == v for k, v in TARGET_DECODE.items())


def _train_targets(result: dict, standard: bool = True) -> dict:
    """The family's training targets: its MFU and speed-up over the linen yardstick, if set,
    on its bench config (``standard``); another config is only marked as such."""
    bench = MODELS[result["model"]].bench
    if bench is None:
        return {}
    if not standard:
        return {"mfu": OTHER_SETTINGS}
    bounds = {"mfu": bench.train_mfu, "speedup_over_linen": bench.speedup_over_linen}
    return {
        key: _met(result[key], bound)
        for key, bound in bounds.items()
        if bound is not None and key in result
    }


def _decode_targets(result: dict, standard: bool = True) -> dict:
    """The family's decoding target, stated at its beam (none at another beam) and, untrained,
    on its bench config at ``TARGET_DECODE``'s sizes (``standard``)."""
    bench = MODELS[result["model"]].bench
    if bench is None or result["beam_size"] != bench.beam_size:
        return {}
    if not standard:
        return {"sentences_per_s": OTHER_SETTINGS}
    bound = (
        bench.split_decode_sentences_per_s if "split" in result else bench.decode_sentences_per_s
    )
    return {
        "sentences_per_s": _met(result["sentences_per_s"], bound) + f" (beam {bench.beam_size})"
    }


def _all(settings: dict) -> dict:
    """Every benchmark on each bench family's config, in one process; the summary against the
    targets. The input pipeline is measured on the first family's config."""
    from seq2seq.bench import measure

    configs = [load_config_file(bench_config_path(family)) for family in bench_families()]
    results = {
        "matmul_float32": measure.matmul_peak("float32"),
        "matmul_bfloat16": measure.matmul_peak("bfloat16"),
    }
    for config in configs:
        name = config.model.name
        peak = results[f"matmul_{compute_dtype(config)}"]
        results[f"train_{name}"] = measure.train_benchmark(
            config, settings["steps"], settings["warmup"], peak
        )
        results[f"decode_{name}"] = measure.decode_benchmark(
            config,
            sentences=settings["sentences"],
            source_length=settings["source_length"],
            output_length=settings["output_length"],
            repeats=settings["repeats"],
        )
    results[f"data_{configs[0].model.name}"] = measure.data_benchmark(
        configs[0], settings["batches"]
    )
    return results


def _mesh_shapes(values: list[str]) -> list[tuple[int, int, int]]:
    """``["8x1x1", "2x4x1"]`` -> [(8, 1, 1), (2, 4, 1)]; anything else is a one-line error."""
    shapes = []
    for value in values:
        parts = value.split("x")
        if len(parts) != 3 or not all(part.strip().isdigit() and int(part) > 0 for part in parts):
            raise ConfigError(
                f"--meshes {value!r}: give DATAxFSDPxTENSOR, three positive integers, e.g. 2x2x2"
            )
        shapes.append(tuple(int(part) for part in parts))
    import jax

    for shape in shapes:  # before any model is built: the same refusal the config's mesh gets
        if math.prod(shape) != (count := jax.device_count()):
            raise ConfigError(
                f"--meshes {'x'.join(map(str, shape))} makes {math.prod(shape)} devices, but the "
                f"job has {count}; give DATAxFSDPxTENSOR whose product is {count}, e.g. "
                f"{count}x1x1 (XLA_FLAGS=--xla_force_host_platform_device_count=N simulates N)"
            )
    return shapes


def _mesh_table(result: dict) -> str:
    lines = [
        f"train {result['model']}, batch {result['batch']}, on {result['devices']} devices",
        "| mesh data x fsdp x tensor | step (ms) | target tokens/s | compile (s) | arrays split "
        "| collectives in loops |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for shape, figures in result["meshes"].items():
        lines.append(
            f"| {shape} | {_format(figures['step_ms'])} | {_format(figures['tokens_per_s'])} | "
            f"{_format(figures['compile_s'])} | {figures['split_arrays']} | "
            f"{figures['loop_collectives']} |"
        )
    return "\n".join(lines)


def _profile_tables(result: dict, top: int) -> str:
    """The kinds' milliseconds per step, then the ``top`` operations that took the longest."""
    step_ms = result["step_ms"]
    lines = [
        f"profile {result['model']}: {result['steps_profiled']} steps, {step_ms:,.0f} ms each "
        "under the profiler; kinds may add up to more (operations run side by side)",
        "| kind | ms per step | share of the step |",
        "|---|---:|---:|",
    ]
    rows = [*result["by_kind_ms"].items(), ("no operation running", result["no_operation_ms"])]
    lines += [f"| {kind} | {ms:,.1f} | {ms / step_ms:.0%} |" for kind, ms in rows]
    lines += ["", "| operation | kind | ms per step | calls | from |", "|---|---|---:|---:|---|"]
    for op in result["operations"][:top]:
        source = op["source"] if len(op["source"]) <= 70 else "..." + op["source"][-67:]
        lines.append(
            f"| {op['name']} | {op['kind']} | {op['ms']:,.2f} | {op['calls']:g} | {source} |"
        )
    lines += ["", f"trace: {result['trace_dir']}", f"HLO: {result['hlo_file']}"]
    return "\n".join(lines)


def _profile_dir(path: str | None, config_path: str) -> Path:
    """Where the trace goes: ``path`` if it is new or empty (refused if it holds files, so no
    earlier trace is overwritten), or a fresh temporary directory when no path is given."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix=f"seq2seq-profile-{Path(config_path).stem}-"))
    directory = Path(path)
    if directory.exists() and any(directory.iterdir()):
        raise ConfigError(
            f"--profile_dir {directory} already holds files; name a new directory to keep them"
        )
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _train_rows(family: ModelFamily, train: dict) -> list[tuple[str, object, str]]:
    """The summary's rows for one family's training step, named by its bench config."""
    stem, targets = family.bench.config, _train_targets(train)
    rows = [
        (f"{stem} step (ms)", train["step_ms"], ""),
        (f"{stem} target tokens/s", train["tokens_per_s"], ""),
        (f"{stem} MFU", train["mfu"], targets.get("mfu", "")),
    ]
    if "speedup_over_linen" in train:
        rows.append(
            (
                f"{stem} speed-up over a plain linen Transformer (x)",
                train["speedup_over_linen"],
                targets.get("speedup_over_linen", ""),
            )
        )
    return rows + [(f"{stem} compile (s)", train["compile_s"], "")]


def summary(results: dict) -> str:
    """The figures of ``all`` beside the issue's targets, as a markdown table."""
    families = [family for family in bench_families() if f"train_{family.name}" in results]
    rows = [
        ("matmul peak float32 (GFLOP/s)", results["matmul_float32"]["peak_gflops"], ""),
        ("matmul peak bfloat16 (GFLOP/s)", results["matmul_bfloat16"]["peak_gflops"], ""),
    ]
    for family in families:
        rows += _train_rows(family, results[f"train_{family.name}"])
    for family in families:
        decode = results[f"decode_{family.name}"]
        bound = _met(decode["sentences_per_s"], family.bench.decode_sentences_per_s)
        if not _standard_decode(decode):  # --sentences, --source_length or --output_length
            bound = OTHER_SETTINGS
        rows.append(
            (
                f"{family.title} beam {decode['beam_size']} sentences/s",
                decode["sentences_per_s"],
                bound,
            )
        )
    data_name = families[0].name  # the input pipeline, beside what its family's training reads
    data = results[f"data_{data_name}"]
    ratio = data["tokens_per_s"] / results[f"train_{data_name}"]["tokens_per_s"]
    rows += [
        ("input pipeline target tokens/s", data["tokens_per_s"], ""),
        (
            "input pipeline / training consumption",
            ratio,
            _met(ratio, TARGET_DATA_MULTIPLE),
        ),
    ]
    lines = ["| figure | measured | target |", "|---|---:|---|"]
    lines += [f"| {name} | {_format(value)} | {target} |" for name, value, target in rows]
    return "\n".join(lines)


def _measure_flags() -> dict[str, flags.FlagHolder]:
    """What is measured and how long: the training step, the matmul sizes, the data draw."""
    return {
        "json": flags.DEFINE_bool("json", False, "Print one JSON line instead of the table."),
        "steps": flags.DEFINE_integer(
            "steps", 20, "train: timed steps (after the warm-up).", lower_bound=1
        ),
        "warmup": flags.DEFINE_integer(
            "warmup", 3, "train: untimed steps after compiling.", lower_bound=0
        ),
        "yardstick": flags.DEFINE_bool(
            "yardstick",
            True,
            "train: also time the plain linen Transformer on the same batch (its own compile).",
        ),
        "meshes": flags.DEFINE_list(
            "meshes",
            [],
            "train: mesh shapes DATAxFSDPxTENSOR, e.g. 8x1x1,2x2x2 (each product the device "
            "count): the step time on each, instead of the full benchmark.",
        ),
        "batches": flags.DEFINE_integer("batches", 300, "data: batches drawn.", lower_bound=1),
        "matmul_sizes": flags.DEFINE_list(
            "matmul_sizes",
            [str(n) for n in MATMUL_SIZES],
            "matmul, train: square sizes n.",
        ),
        "persistent_cache": flags.DEFINE_bool(
            "persistent_cache",
            False,
            "Keep JAX's persistent compilation cache on (off by default: compile times are real).",
        ),
    }


def _decode_flags() -> dict[str, flags.FlagHolder]:
    """The search measured: beam, batch, lengths, and a trained run or split to translate."""
    return {
        "beam_size": flags.DEFINE_integer(
            "beam_size", None, "decode: beam (default: the config's).", lower_bound=1
        ),
        "workdir": flags.DEFINE_string(
            "workdir", None, "decode: a trained run (its config and latest parameters)."
        ),
        "split": flags.DEFINE_string(
            "split", None, "decode with --workdir: translate this whole split as eval.py does."
        ),
        "engine": flags.DEFINE_string(
            "engine", "jax", "decode --split: jax, or ctranslate2 (JAX beside CTranslate2)."
        ),
        "sentences": flags.DEFINE_integer(
            "sentences", 32, "decode: sentences per batch.", lower_bound=1
        ),
        "batch_size": flags.DEFINE_integer(
            "batch_size",
            None,
            "decode --split: sentences searched together (default: the run's).",
            lower_bound=1,
        ),
        "source_length": flags.DEFINE_integer(
            "source_length", 30, "decode, untrained: source tokens.", lower_bound=1
        ),
        "output_length": flags.DEFINE_integer(
            "output_length", 30, "decode, untrained: output tokens.", lower_bound=1
        ),
        "repeats": flags.DEFINE_integer(
            "repeats", 3, "decode: timed batches (median reported).", lower_bound=1
        ),
    }


def _profile_flags() -> dict[str, flags.FlagHolder]:
    return {
        "profile_dir": flags.DEFINE_string(
            "profile_dir",
            None,
            "profile: a new directory for the trace (default: a temporary one).",
        ),
        "profile_steps": flags.DEFINE_integer("profile_steps", 3, "profile: steps traced."),
        "top": flags.DEFINE_integer("top", 15, "profile: operations listed.", lower_bound=1),
    }


def _config(flag: SimpleNamespace, command: str) -> ml_collections.ConfigDict:
    """The validated ``--config`` (a command that needs one refuses to run without it)."""
    if flag.config is None:
        raise ConfigError(
            f"bench {command} needs --config FILE, e.g. --config configs/bench_small.py"
        )
    return validate(flag.config)


def _sizes(flag: SimpleNamespace) -> tuple[int, ...]:
    return parse_matmul_sizes(flag.matmul_sizes)


# Each command: its figures (the JSON) and its table, from the flags' values.


def _matmul(flag: SimpleNamespace) -> tuple[dict, str]:
    sizes = _sizes(flag)
    from seq2seq.bench import measure

    result = {d: measure.matmul_peak(d, sizes) for d in ("float32", "bfloat16")}
    table = "\n\n".join(
        _table(f"matmul {d} (GFLOP/s by size)", r["gflops_by_size"] | {"peak": r["peak_gflops"]})
        for d, r in result.items()
    )
    return result, table


def _train(flag: SimpleNamespace) -> tuple[dict, str]:
    config = _config(flag, "train")
    shapes, sizes = _mesh_shapes(flag.meshes), _sizes(flag)
    from seq2seq.bench import measure

    if shapes:
        result = measure.mesh_benchmark(config, shapes, flag.steps, flag.warmup)
        return result, _mesh_table(result)
    peak = measure.matmul_peak(compute_dtype(config), sizes)
    result = measure.train_benchmark(
        config, flag.steps, flag.warmup, peak, yardstick=flag.yardstick
    )
    targets = _train_targets(result, _is_bench_config(config))
    return result, _table(f"train {result['model']}", result, targets)


def _decode_split(flag: SimpleNamespace) -> tuple[dict, str]:
    """``decode --split``: a trained run translating a whole split, as eval.py does."""
    if not flag.workdir:
        raise ConfigError("bench decode --split needs --workdir RUN (a trained run)")
    if flag.batch_size is not None and flag.batch_size < 1:
        raise ConfigError(f"--batch_size {flag.batch_size} must be at least 1")
    from seq2seq.bench import measure

    result = measure.split_decode_benchmark(
        Path(flag.workdir), flag.split, beam_size=flag.beam_size, engine=flag.engine,
        batch_size=flag.batch_size,
    )  # fmt: skip
    title = f"decode {result['model']}, {result['split']}"
    return result, _table(title, result, _decode_targets(result))


def _decode(flag: SimpleNamespace) -> tuple[dict, str]:
    """``decode``: made-up sources of a fixed length, through a trained run or a fresh model."""
    if flag.engine not in ("jax", "ctranslate2"):
        raise ConfigError(f"unknown --engine {flag.engine!r}; choose jax or ctranslate2")
    if flag.engine != "jax" and not flag.split:  # it used to be ignored
        raise ConfigError(
            f"--engine {flag.engine} times a whole split beside JAX; pass --split (e.g. test)"
        )
    if flag.split:
        return _decode_split(flag)
    workdir = Path(flag.workdir) if flag.workdir else None
    run_config = RunDirectory(workdir).load_config() if workdir else _config(flag, "decode")
    from seq2seq.bench import measure

    result = measure.decode_benchmark(
        run_config,
        beam_size=flag.beam_size,
        sentences=flag.sentences,
        source_length=flag.source_length,
        output_length=flag.output_length,
        repeats=flag.repeats,
        workdir=workdir,
    )
    standard = _standard_decode(result) and _is_bench_config(run_config)
    return result, _table(f"decode {result['model']}", result, _decode_targets(result, standard))


def _profile(flag: SimpleNamespace) -> tuple[dict, str]:
    if flag.profile_steps < 1:
        raise ConfigError(f"--profile_steps must be at least 1, got {flag.profile_steps}")
    config = _config(flag, "profile")
    config_path = config_flags.get_config_filename(flags.FLAGS["config"])
    directory = _profile_dir(flag.profile_dir, config_path)
    from seq2seq.bench.profile import profile_benchmark

    result = profile_benchmark(config, directory, flag.profile_steps, flag.warmup)
    table = _profile_tables(result, flag.top)
    result["operations"] = result["operations"][: flag.top]
    return result, table


def _data(flag: SimpleNamespace) -> tuple[dict, str]:
    config = _config(flag, "data")
    from seq2seq.bench import measure

    result = measure.data_benchmark(config, flag.batches)
    return result, _table("data", result)


def _everything(flag: SimpleNamespace) -> tuple[dict, str]:
    """``all``: every benchmark on the bench configs, and the summary against the targets."""
    keys = ("steps", "warmup", "sentences", "source_length", "output_length", "repeats", "batches")
    result = _all({key: getattr(flag, key) for key in keys})
    table = "\n\n".join(
        [_table(name, figures) for name, figures in result.items()]
        + [f"summary ({os.cpu_count()} CPUs visible)\n" + summary(result)]
    )
    return result, table


COMMANDS = {
    "matmul": _matmul,
    "train": _train,
    "decode": _decode,
    "data": _data,
    "profile": _profile,
    "all": _everything,
}


def run() -> None:
    config_flag = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
    holders = {**_measure_flags(), **_decode_flags(), **_profile_flags()}

    def main(argv: list[str]) -> None:
        commands = [arg for arg in argv[1:] if not arg.startswith("-")]
        if len(commands) != 1 or commands[0] not in COMMANDS:
            raise ConfigError(f"name one command of {', '.join(COMMANDS)}, e.g. `bench train`")
        flag = SimpleNamespace(config=config_flag.value, **{k: h.value for k, h in holders.items()})
        # JAX loads only once the command's own checks pass, and reads this when it starts.
        os.environ["JAX_ENABLE_COMPILATION_CACHE"] = str(flag.persistent_cache).lower()
        if "jax" in sys.modules:  # already loaded (e.g. by --nocompilation_cache)
            sys.modules["jax"].config.update("jax_enable_compilation_cache", flag.persistent_cache)
        result, table = COMMANDS[commands[0]](flag)
        print(json.dumps(result) if flag.json else table)

    cli.run(main)


if __name__ == "__main__":
    run()
