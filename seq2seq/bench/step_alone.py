"""Each frontier row's training step with the device to itself, on its own batches::

    python -m seq2seq.bench.step_alone [--rows transformer-small,rnnsearch-medium] \\
        [--batches 128] [--budget_s 0] [--data data/multi30k] [--out DIR] [--json] \\
        [--config.KEY=VALUE]

Runs that share a device (``make device-frontier``) take turns on it, so their training seconds mix
the cost of each family's step with when each had the device; ``python -m seq2seq.compare.sharing``
splits a seconds ratio into steps and the time a step as it came. This measures the second factor
with nothing beside it: for each row of the frontier_tuned suite (the configs ``make
device-frontier`` trains), the trainer's jitted step on the first ``--batches`` batches of the
row's own pipeline (its tokenizer trained here, its buckets or packed rows, its order), placed on
the device and run back to back, one row after the other in this one process: milliseconds a step
and real target tokens a second (median of 3 passes, ``seq2seq.bench.real_loop.replay_figures``),
and the seconds of the first pass, which compiles each batch shape. Rows whose data settings agree
share one tokenizer. A row's steps to a validation level (its records) times its milliseconds a
step alone give its seconds to that level with the device to itself; the reading under the table
gives each other row's step over the first row's. ``--out DIR`` receives ``step_alone.json``
and ``.md``, written again after each row. ``--budget_s`` bounds the call for a device's short
window: rows after the first start only within that many seconds, so put first the rows that
matter most.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before anything else loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from absl import flags

from seq2seq.config import ConfigError
from seq2seq.records.whole import write_whole

ROWS = ("transformer-small", "rnnsearch-medium")  # what make device-frontier trains by default
# What a tokenizer is trained from: rows that agree on these share one (make_tokenizer's inputs).
TOKENIZER_KEYS = (
    "dir", "name", "src_lang", "tgt_lang", "train_split", "tokenizer", "vocab_size",
    "shared_vocab", "tokenizer_sample_size", "max_train_examples",
)  # fmt: skip


def row_config(row: str, overrides: dict):
    """The config ``make device-frontier`` trains for ``row`` (seed index 0), with ``overrides``
    (``--config.KEY=VALUE``, the data's folder among them)."""
    from seq2seq.compare.settings import Settings, run_config
    from seq2seq.compare.suites import expand_suite, select_runs

    (spec,) = select_runs(expand_suite("frontier_tuned"), [row], keep_first=False)
    return run_config(spec, Settings(overrides=tuple(overrides.items())), 0)


def tokenizer_key(config) -> str:
    """A short name for what ``config``'s tokenizer is trained from (``TOKENIZER_KEYS``, the
    seed that samples its corpus)."""
    fields = {key: config.data.get(key) for key in TOKENIZER_KEYS} | {"seed": config.seed}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def steps_alone(
    rows: list[str],
    overrides: dict,
    batches: int,
    workdir: Path,
    budget_s: float = 0.0,
    on_row=None,
) -> dict:
    """Every row's figures (module docstring), in order, and the environment they ran in;
    ``on_row(result)`` after each row, timed or skipped, with the rows so far. With a
    ``budget_s``, a row after the first starts only if fewer seconds than that have passed since
    the first began (a started row runs to its end); the others are listed as ``skipped``."""
    import jax

    from seq2seq.bench.real_loop import replay_figures
    from seq2seq.models import compute_dtype

    result = {
        "device_kind": jax.devices()[0].device_kind,
        "budget_s": budget_s,
        "rows": {},
        "skipped": [],
        "reading": [],
    }
    began = time.perf_counter()
    for row in rows:
        if result["rows"] and budget_s and time.perf_counter() - began >= budget_s:
            result["skipped"].append(row)
            print(f"step alone: {row} not started, {budget_s:g} s had passed", file=sys.stderr)
        else:
            config = row_config(row, overrides)
            start = time.perf_counter()
            figures = replay_figures(config, workdir / tokenizer_key(config), batches)
            result["rows"][row] = {
                "model": config.model.name,
                "dtype": compute_dtype(config),
                "seconds": time.perf_counter() - start,
                **figures,
            }
            print(f"step alone: {row} {figures['replay_step_ms']:.2f} ms", file=sys.stderr)
            result["reading"] = reading(result["rows"])
        if on_row:
            on_row(result)
    return result


def reading(rows: dict[str, dict]) -> list[str]:
    """Each row's step against the first row's, in words."""
    if len(rows) < 2:
        return []
    (first, base), *others = rows.items()
    return [
        f"With the device to itself, a step of {row} takes "
        f"{figures['replay_step_ms'] / base['replay_step_ms']:.2f} times one of {first} "
        f"({figures['replay_step_ms']:.2f} ms against {base['replay_step_ms']:.2f})."
        for row, figures in others
    ]


COLUMNS = (
    ("model", "model", "s"), ("dtype", "dtype", "s"), ("replay_step_ms", "ms a step", ".2f"),
    ("replay_tokens_per_s", "target tokens/s", ",.0f"), ("replay_batches", "batches", "d"),
    ("replay_first_pass_s", "first pass s (compiles)", ".1f"),
)  # fmt: skip


def markdown(result: dict) -> str:
    lines = [
        f"The training step alone on {result['device_kind']}, each row on its own batches",
        "",
        "| row | " + " | ".join(title for _, title, _ in COLUMNS) + " | batch shapes |",
        "|---|" + "---|---|" + "---:|" * (len(COLUMNS) - 2) + "---|",
    ]
    for row, figures in result["rows"].items():
        shapes = ", ".join("x".join(map(str, shape)) for shape in figures["replay_shapes"])
        cells = [format(figures[key], spec) for key, _, spec in COLUMNS]
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {shapes} |")
    for sentence in result["reading"]:
        lines += ["", sentence]
    if result.get("skipped"):
        lines += [
            "",
            f"Not started, {result['budget_s']:g} s (--budget_s) having passed: "
            + ", ".join(result["skipped"])
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    from seq2seq import cli

    holders = {
        "rows": flags.DEFINE_list("rows", list(ROWS), "Rows of the frontier_tuned suite."),
        "batches": flags.DEFINE_integer("batches", 128, "Batches of each row's pipeline timed."),
        "budget_s": flags.DEFINE_float(
            "budget_s", 0.0, "Rows after the first start only within this many seconds; 0: all."
        ),
        "data": flags.DEFINE_string(
            "data", None, "Multi30k's folder (default: data/multi30k if there, else the configs')."
        ),
        "out": flags.DEFINE_string("out", None, "Also write step_alone.json and .md here."),
        "json": flags.DEFINE_bool("json", False, "Print one JSON line instead of the table."),
    }

    cli.define_config_overrides()
    flags.declare_key_flag("config")  # listed by --help, with this module's flags

    def run(argv: list[str]) -> None:
        del argv
        from ml_collections import config_flags

        from seq2seq.bench.device_frontier import check_data, data_folder
        from seq2seq.compare.suites import expand_suite, select_runs

        flag = {name: holder.value for name, holder in holders.items()}
        if flag["batches"] < 1:
            raise ConfigError(f"--batches={flag['batches']} must be at least 1")
        if flag["budget_s"] < 0:
            raise ConfigError(f"--budget_s={flag['budget_s']:g} must be 0 (no limit) or more")
        if not flag["rows"]:
            raise ConfigError("--rows is empty; name rows of the frontier_tuned suite")
        select_runs(expand_suite("frontier_tuned"), flag["rows"], keep_first=False)
        overrides = config_flags.get_override_values(flags.FLAGS["config"])
        data = data_folder(flag["data"], overrides)
        check_data(data)
        if data is not None:
            overrides["data.dir"] = str(data)
        for row in flag["rows"]:  # a bad value is refused before JAX loads
            row_config(row, overrides)

        def write(result: dict) -> None:  # after every row: a call stopped midway keeps them
            out = Path(flag["out"])
            out.mkdir(parents=True, exist_ok=True)
            write_whole(out / "step_alone.json", json.dumps(result, indent=1) + "\n")
            write_whole(out / "step_alone.md", markdown(result))

        with tempfile.TemporaryDirectory(prefix="seq2seq-step-alone-") as workdir:
            result = steps_alone(
                flag["rows"], overrides, flag["batches"], Path(workdir), flag["budget_s"],
                on_row=write if flag["out"] else None,
            )  # fmt: skip
        print(json.dumps(result) if flag["json"] else markdown(result))

    cli.run(run)


if __name__ == "__main__":
    main()
