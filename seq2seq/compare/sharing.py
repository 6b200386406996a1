"""Runs that shared one device: what the sharing did to their training seconds.

    python -m seq2seq.compare.sharing docs/records/multi30k_frontier_gpu [--level 40] [--window 5]

Runs trained at once on one accelerator (``make device-frontier``) take turns on it: a run's step
takes longer the more runs train beside it, and how many do changes while they run, as runs
compile, validate and end. A ratio of training seconds between two families then mixes the cost
of their steps with when each had the device. This splits the two:

* for each run, the steps and training seconds to its first validation at ``--level`` or above,
  and its milliseconds a step up to there (the time it had the device at whatever sharing);
* on one wall clock, the windows of ``--window`` seconds in which every run logged training
  steps, and each family's mean milliseconds a step within them: the families' steps at equal
  sharing. The clock is the ``time`` each log line was written at, where every run's lines
  have one (since 2026-12-05); for older records it is estimated from each run's own clocks
  (training, validation, compiling and checkpoints, all four in its metrics.jsonl; start-up is
  not recorded, so the runs are taken to start together).

The seconds ratio to a level is then the steps ratio times the milliseconds-a-step ratio, and
the second can be read at equal sharing. Neither replaces a step timed with the device alone:
``--steps_alone step_alone.json`` (``make device-steps``, ``seq2seq/bench/step_alone.py``) takes
each family's step from the row its runs trained (run folders are named ``<row>-seed<N>``) and
gives the seconds ratio that those steps would make, steps ratio x step-alone ratio.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before anything else loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json
import statistics
from pathlib import Path

from absl import flags

from seq2seq.config import ConfigError
from seq2seq.records.run_directory import RunDirectory, RunDirectoryError

OFF_THE_CLOCK = ("validation_seconds", "compile_seconds", "checkpoint_seconds")
CLOCKS = {
    "logged": "time the lines were written",
    "estimated": "wall clock estimated from the runs' clocks, start-up left out",
}


def timeline(records: list[dict], logged: bool) -> list[tuple[float, float]]:
    """(wall-clock second, milliseconds a step) of each training log line: the ``time`` it was
    written at (``logged``), else the training clock plus every clock kept off it."""

    def second(record: dict) -> float:
        if logged:
            return record["time"]
        return record["elapsed_seconds"] + sum(record.get(key, 0.0) for key in OFF_THE_CLOCK)

    return [
        (second(record), 1e3 * record["step_seconds"])
        for record in records
        if record["kind"] == "train"
    ]


def to_level(records: list[dict], level: float) -> dict | None:
    """The first validation at ``level`` BLEU or above: its step, the training seconds by then
    and the milliseconds a step up to it; None if no validation reached it."""
    reached = next((r for r in records if r["kind"] == "validation" and r["bleu"] >= level), None)
    if reached is None:
        return None
    seconds = reached["elapsed_seconds"]
    return {
        "step": reached["step"],
        "seconds": seconds,
        "ms_a_step": 1e3 * seconds / reached["step"],
    }


def shared_windows(timelines: dict[str, list[tuple[float, float]]], window: float) -> list[int]:
    """Indices of the ``window``-second windows in which every run logged a training step."""
    logged = [{int(second // window) for second, _ in points} for points in timelines.values()]
    return sorted(set.intersection(*logged)) if logged else []


def sharing(runs: dict[str, tuple[str, list[dict]]], level: float, window: float) -> dict:
    """The figures of the module docstring for ``runs``: name -> (family, metrics records)."""
    logged = all(
        "time" in record
        for _, records in runs.values()
        for record in records
        if record["kind"] == "train"
    )
    timelines = {name: timeline(records, logged) for name, (_, records) in runs.items()}
    windows = shared_windows(timelines, window)
    families = sorted({family for family, _ in runs.values()})
    shared = {}
    for family in families:
        steps = [
            ms
            for name, points in timelines.items()
            if runs[name][0] == family
            for second, ms in points
            if int(second // window) in windows
        ]
        shared[family] = statistics.mean(steps) if steps else None
    return {
        "level": level,
        "window_s": window,
        "runs": {
            name: {"family": family, "to_level": to_level(records, level)}
            for name, (family, records) in runs.items()
        },
        "clock": "logged" if logged else "estimated",
        "shared_seconds": window * len(windows),
        "shared_ms_a_step": shared,
    }


def row_of(run: str) -> str:
    """The frontier_tuned row of a run folder named ``<row>-seed<N>`` (``make device-frontier``)."""
    row, seed = run.rpartition("-seed")[::2]
    if not row or not seed.isdigit():
        raise ConfigError(f"run folder {run} is not named <row>-seed<N>; --steps_alone needs that")
    return row


def with_steps_alone(result: dict, steps: dict, records_device: str | None) -> dict:
    """``result`` with ``steps_alone``: each family's row and its step timed with the device to
    itself (``steps``: ``step_alone.json``), and the device both were measured on."""
    rows: dict[str, set[str]] = {}
    for name, run in result["runs"].items():
        rows.setdefault(run["family"], set()).add(row_of(name))
    families = {}
    for family, names in sorted(rows.items()):
        if len(names) > 1:
            raise ConfigError(
                f"{family}'s runs come from rows {', '.join(sorted(names))}; pass a folder with "
                "one row a family"
            )
        (row,) = names
        if row not in steps["rows"]:
            raise ConfigError(
                f"the step_alone file has no row {row} (it has {', '.join(steps['rows'])}); run "
                f"make device-steps with {row} among STEPS_ROWS"
            )
        families[family] = {"row": row, "ms_a_step": steps["rows"][row]["replay_step_ms"]}
    return result | {
        "steps_alone": {
            "device_kind": steps["device_kind"],
            "records_device_kind": records_device,
            "families": families,
        }
    }


def read_steps_alone(path: Path) -> dict:
    """``make device-steps``'s ``step_alone.json``, or one error line naming what is wrong."""
    try:
        steps = json.loads(path.read_text())
    except OSError as error:
        raise ConfigError(f"--steps_alone {path}: {error.strerror}") from None
    except ValueError:
        raise ConfigError(f"--steps_alone {path} is not JSON; give device-steps' file") from None
    if not isinstance(steps, dict) or not {"rows", "device_kind"} <= steps.keys():
        raise ConfigError(
            f"--steps_alone {path} has no rows and device_kind; give make device-steps' "
            "step_alone.json"
        )
    return steps


def records_device(folder: Path) -> str | None:
    """The device kind the runs under ``folder`` last trained on, if they agree."""
    from seq2seq.records.provenance import read_entries  # loads JAX: only for --steps_alone

    latest = [read_entries(path)[-1:] for path in folder.iterdir() if path.is_dir()]
    kinds = {entries[0].get("device_kind") for entries in latest if entries}
    return kinds.pop() if len(kinds) == 1 else None


def read_runs(folder: Path) -> dict[str, tuple[str, list[dict]]]:
    """Every run record under ``folder`` (one sub-folder each): its family and metrics."""
    runs = {}
    for path in sorted(p for p in folder.iterdir() if p.is_dir()):
        run = RunDirectory(path)
        runs[path.name] = (run.load_config().model.name, run.read_metrics())
    if not runs:
        raise RunDirectoryError(f"{folder} holds no run records; pass a folder of run folders")
    return runs


def _mean_over(result: dict, family: str, key: str) -> float | None:
    values = [
        run["to_level"][key]
        for run in result["runs"].values()
        if run["family"] == family and run["to_level"] is not None
    ]
    return statistics.mean(values) if values else None


def markdown(result: dict) -> str:
    """Each run to the level, then each family at equal sharing and the ratios between them."""
    level = result["level"]
    lines = [
        f"| run | family | steps to {level:g} | training s | ms a step |",
        "|---|---|---:|---:|---:|",
    ]
    for name, run in result["runs"].items():
        reached = run["to_level"]
        cells = (
            ["not reached"] * 3
            if reached is None
            else [
                f"{reached['step']:,}",
                f"{reached['seconds']:.1f}",
                f"{reached['ms_a_step']:.2f}",
            ]
        )
        lines.append(f"| {name} | {run['family']} | " + " | ".join(cells) + " |")
    shared = result["shared_ms_a_step"]
    lines += [
        "",
        f"While every run logged training steps ({result['shared_seconds']:g} s in windows of "
        f"{result['window_s']:g} s of the {CLOCKS[result['clock']]}): "
        + ", ".join(
            f"{family} {ms:.2f} ms a step" for family, ms in shared.items() if ms is not None
        )
        + ".",
    ]
    families = sorted({run["family"] for run in result["runs"].values()})
    seconds = {family: _mean_over(result, family, "seconds") for family in families}
    steps = {family: _mean_over(result, family, "step") for family in families}
    if len(families) == 2 and None not in (*seconds.values(), *steps.values()):
        slow, fast = sorted(families, key=lambda family: -seconds[family])
        step_ratio, seconds_ratio = steps[slow] / steps[fast], seconds[slow] / seconds[fast]
        sentence = (
            f"To {level:g}, {slow} over {fast} (means over seeds): {seconds_ratio:.2f} times "
            f"the training seconds = {step_ratio:.2f} times the steps x "
            f"{seconds_ratio / step_ratio:.2f} times the time a step as it came"
        )
        if shared[slow] is not None and shared[fast] is not None:
            sentence += (
                f"; at equal sharing a step is {shared[slow] / shared[fast]:.2f} times, which "
                f"would make the seconds {step_ratio * shared[slow] / shared[fast]:.2f} times"
            )
        lines += ["", sentence + "."]
        if "steps_alone" in result:
            lines += ["", _alone_sentence(result["steps_alone"], slow, fast, step_ratio)]
    return "\n".join(lines) + "\n"


def _alone_sentence(alone: dict, slow: str, fast: str, step_ratio: float) -> str:
    slow_row, fast_row = (alone["families"][family] for family in (slow, fast))
    ratio = slow_row["ms_a_step"] / fast_row["ms_a_step"]
    device = alone["device_kind"]
    if alone["records_device_kind"] not in (None, device):
        device += f", not the records' {alone['records_device_kind']}"
    return (
        f"With the device to itself ({device}; step_alone), a step of {slow_row['row']} takes "
        f"{ratio:.2f} times one of {fast_row['row']} ({slow_row['ms_a_step']:.2f} ms against "
        f"{fast_row['ms_a_step']:.2f}), which would make the seconds {step_ratio:.2f} x "
        f"{ratio:.2f} = {step_ratio * ratio:.2f} times."
    )


def main() -> None:
    from seq2seq import cli

    level = flags.DEFINE_float("level", 40.0, "Validation BLEU each run is timed to.")
    window = flags.DEFINE_float("window", 5.0, "Seconds in a window of the estimated wall clock.")
    as_json = flags.DEFINE_bool("json", False, "Print one JSON line instead of the tables.")
    steps_alone = flags.DEFINE_string(
        "steps_alone", None, "step_alone.json of make device-steps: each family's step alone."
    )

    def run(argv: list[str]) -> None:
        if len(argv) != 2:
            raise ConfigError(
                "give one folder of run records, e.g. docs/records/multi30k_frontier_gpu"
            )
        if window.value <= 0:
            raise ConfigError(f"--window={window.value:g} must be a positive number of seconds")
        folder = Path(argv[1])
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a folder; give a folder of run records")
        result = sharing(read_runs(folder), level.value, window.value)
        if steps_alone.value is not None:
            steps = read_steps_alone(Path(steps_alone.value))
            result = with_steps_alone(result, steps, records_device(folder))
        print(json.dumps(result) if as_json.value else markdown(result))

    cli.run(run)


if __name__ == "__main__":
    main()
