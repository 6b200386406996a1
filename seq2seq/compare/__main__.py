"""Train, tune, decode and score configs under one budget, then write one report.

    python -m seq2seq.compare --suite quickstart --workdir runs/quickstart
    python -m seq2seq.compare --configs configs/a.py --configs configs/b.py --workdir runs/ab \\
        [--budget_minutes 25] [--seeds 3] [--tune train.learning_rate=x0.5,x2 --tune_minutes 5]
    python -m seq2seq.compare --records docs/records/multi30k_frontier_tuned --workdir runs/f

Each config trains into WORKDIR/NAME (NAME-seedK with --seeds), resuming or reusing what is
there; WORKDIR/report.md holds the verdict, the table and the figures. Ctrl-C saves: rerun the
same command to continue. What makes it fair: docs/comparison.md. (This file: the flags, then
``comparison.compare``.)
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from absl import flags
from ml_collections import config_flags

from seq2seq import cli
from seq2seq.checkpoints.rule import describe_checkpoint_rule, rules_help
from seq2seq.compare.suites import FRONTIER_SUITES, RunSpec, expand_suite, select_runs, suite_names
from seq2seq.compare.workdir import check_free, check_not_records
from seq2seq.config import config_name, split_config_argument

if TYPE_CHECKING:
    from seq2seq.compare.runner import RunOutcome
    from seq2seq.compare.settings import Settings

# The comparison itself (JAX, scipy, grain, matplotlib: 2.5 s of imports) is imported by the
# functions that use it, so that a refused invocation answers in about a second.


def _specs(
    configs: list[str], suite: str | None, base: str | None, rows: list[str]
) -> tuple[list[RunSpec], str]:
    if configs and suite:
        raise ValueError("pass either --configs A.py B.py ... or --suite NAME (not both)")
    if not configs and not suite:
        raise ValueError(
            "name the runs: --suite NAME (e.g. --suite quickstart) or --configs A.py B.py ..."
        )
    if rows and not suite:
        raise ValueError("--rows picks runs of a suite; with --configs, list only the ones to run")
    if suite:
        specs = select_runs(
            expand_suite(suite, Path(base) if base else None), rows, suite == "table3"
        )
        return specs, f"Comparison: the {suite} suite"
    for path in configs:
        file, _ = split_config_argument(path)
        if not file.is_file():
            raise ValueError(f"--configs: no config file at {file}; check the path")
    specs = [RunSpec(config_name(path), Path(path)) for path in configs]
    return specs, "Comparison: " + ", ".join(spec.name for spec in specs)


def _summary(report_md: Path) -> str:
    """The report's verdict sentences and its scores table (its first table)."""
    lines = report_md.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), len(lines))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    verdict_end = lines.index("## Scores") if "## Scores" in lines else 0
    verdicts = [line for line in lines[:verdict_end] if line.startswith(("- ", "  "))]
    return "\n".join([*verdicts, "", *lines[start:end]])


def _run_flags() -> dict[str, flags.FlagHolder]:
    """What to compare and where: configs or a suite, the work directory, records."""
    return {
        "configs": flags.DEFINE_multi_string(
            "configs", [], "Config files to compare (repeat the flag, or separate with spaces)."
        ),
        "suite": flags.DEFINE_enum("suite", None, suite_names(), "A named set of configs."),
        "base": flags.DEFINE_string("base", None, "The base config of --suite table3."),
        "rows": flags.DEFINE_list(
            "rows",
            [],
            "Only the suite's runs matching these names or patterns, e.g. D_*,E_learned (table3's "
            "base always runs: every row is compared against it).",
        ),
        "workdir": flags.DEFINE_string(
            "workdir", None, "Parent directory of every run and the report."
        ),
        "records": flags.DEFINE_string(
            "records",
            None,
            "Train nothing: rebuild the frontier report (frontier.md, frontier.json, its figures) "
            "in --workdir from the run records in this folder (as --save_records writes them).",
        ),
        "directions": flags.DEFINE_list(
            "directions",
            [],
            "Train nothing: one verdict across translation directions (directions.md and .json "
            "in --workdir) from these record folders, one direction each, e.g. "
            "docs/records/multi30k_frontier_tuned,docs/records/multi30k_ende.",
        ),
        "devices": flags.DEFINE_list(
            "devices",
            [],
            "Train nothing: the same configs' runs from two record folders (two devices) "
            "compared (devices.md and .json in --workdir), e.g. "
            "docs/records/multi30k_frontier_gpu,docs/records/multi30k_frontier_tuned.",
        ),
        "save_records": flags.DEFINE_string(
            "save_records",
            None,
            "After scoring, copy each run's record (config, metrics, provenance, test scores and "
            "translations; no checkpoints) into this folder, e.g. to commit it.",
        ),
    }


def _training_flags() -> dict[str, flags.FlagHolder]:
    """How every run trains: its budget, its turns on the machine, its seeds."""
    return {
        "budget_minutes": flags.DEFINE_float(
            "budget_minutes", None, "Training minutes per run (all equal)."
        ),
        "budget_steps": flags.DEFINE_integer(
            "budget_steps", None, "Or training steps per run (all equal; no time limit)."
        ),
        "slice_minutes": flags.DEFINE_float(
            "slice_minutes",
            5.0,
            "Runs (and trials) take turns this many training minutes each, so a slow spell of "
            "the machine touches all; 0: each run trains to its end in turn.",
        ),
        "seeds": flags.DEFINE_integer(
            "seeds", 1, "Runs per config, with seeds seed, seed + 1, ..."
        ),
    }


def _scoring_flags() -> dict[str, flags.FlagHolder]:
    """How every run is scored: decoding, split, checkpoint."""
    return {
        "beam_size": flags.DEFINE_integer("beam_size", 4, "Beam width for every run (1: greedy)."),
        "alpha": flags.DEFINE_float("alpha", 0.6, "Length-penalty exponent for every run."),
        "split": flags.DEFINE_string(
            "split", None, "Split to score (default: each config's test)."
        ),
        "max_test_sentences": flags.DEFINE_integer(
            "max_test_sentences", 0, "Score the first N only; 0: all."
        ),
        "checkpoint": flags.DEFINE_string(
            "checkpoint",
            "latest",
            "Checkpoint of every run to score: " + rules_help(steps=False),
        ),
    }


def _tuning_flags() -> dict[str, flags.FlagHolder]:
    """The grid tried before the final runs, and its successive halving."""
    return {
        "tune": flags.DEFINE_multi_string(
            "tune",
            [],
            "KEY=V1,V2,...: before the final runs, train each config once per point of the grid "
            "(repeat for more keys) and keep its best point by validation BLEU; x0.5,x2 are "
            "factors of each config's own value.",
        ),
        "tune_minutes": flags.DEFINE_float(
            "tune_minutes", None, "Training minutes of every trial."
        ),
        "tune_steps": flags.DEFINE_integer(
            "tune_steps",
            None,
            "Training steps of every trial, instead of --tune_minutes: equal trials at every "
            "model size (e.g. the frontier's), each past its warm-up.",
        ),
        "tune_samples": flags.DEFINE_integer(
            "tune_samples", 0, "Train N points drawn from the grid (fixed seed); 0: every point."
        ),
        "tune_rungs": flags.DEFINE_integer(
            "tune_rungs",
            1,
            "Successive halving: after --tune_minutes (or --tune_steps), the better half of each "
            "config's trials trains on to twice that, for this many rungs; 1: every trial once.",
        ),
        "tune_keep_each": flags.DEFINE_string(
            "tune_keep_each",
            None,
            "A tuned KEY (e.g. model.dropout_rate): each halving keeps the best trial of every "
            "value of KEY, then the better half of the rest, so that no value is dropped before "
            "the last rung (regularisation decides only once runs overfit).",
        ),
        "tune_to_convergence": flags.DEFINE_bool(
            "tune_to_convergence",
            False,
            "The last rung trains its trials on to convergence (early stopping, within the final "
            "runs' budget) and scores each by the mean validation BLEU of its last 5 points; the "
            "winner is its seed's final run. With --tune_keep_each, each value is judged after "
            "the runs overfit.",
        ),
    }


def _define_flags() -> SimpleNamespace:
    """Every flag of the command, and ``--config.KEY=VALUE`` overrides; values read as ``.x``."""
    holders = {**_run_flags(), **_training_flags(), **_scoring_flags(), **_tuning_flags()}
    try:  # a config-dict flag reads its --config.KEY=VALUE overrides as it is defined
        cli.define_config_overrides()
        flags.declare_key_flag("config")  # listed by --help, with this module's flags
    except Exception as error:  # noqa: BLE001 (one line for an unknown key or a bad value)
        print(f"error: {cli.flag_error_message(sys.argv, error)}", file=sys.stderr)
        sys.exit(2)
    flags.mark_flags_as_required(["workdir"])
    flags.register_validator(
        "records",
        lambda value: value is None or Path(value).is_dir(),
        "--records must name a folder of run records (each run a subfolder with config.json)",
    )
    flags.register_validator("seeds", lambda n: n >= 1, "--seeds must be at least 1")
    return SimpleNamespace(**holders)


def _values(holders: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(**{name: holder.value for name, holder in vars(holders).items()})


def _rebuild_from_records(flag: SimpleNamespace) -> None:
    """``--records``: the frontier report from committed run records, nothing trained."""
    from seq2seq.compare.frontier import read_records
    from seq2seq.compare.frontier_report import write_frontier_report

    runs = read_records(Path(flag.records), flag.split, flag.checkpoint)
    title = f"Compute frontier: {Path(flag.records).name}"
    report = write_frontier_report(runs, Path(flag.workdir), title, flag.checkpoint)
    print(report.read_text())
    print(f"report: {report}")


def _verdict_across_directions(flag: SimpleNamespace) -> None:
    """``--directions``: one table over the directions' record folders, nothing trained."""
    from seq2seq.compare.directions import direction_of, write_directions_report
    from seq2seq.compare.frontier import read_records

    if len(flag.directions) < 2:
        raise ValueError(
            f"--directions takes two or more record folders, one direction each; got "
            f"{len(flag.directions)} (one direction's report: --records FOLDER)"
        )
    folders = []
    for folder in flag.directions:
        if not Path(folder).is_dir():
            raise ValueError(f"--directions: {folder} is not a folder of run records")
        runs = read_records(Path(folder), flag.split, flag.checkpoint, "--directions")
        direction = direction_of(runs)
        if direction in [seen for seen, _ in folders]:
            raise ValueError(
                f"--directions: two folders hold {direction}; give each direction once"
            )
        folders.append((direction, runs))
    report = write_directions_report(folders, Path(flag.workdir))
    print(report.read_text())
    print(f"report: {report}")


def _devices(flag: SimpleNamespace) -> None:
    """``--devices``: the same configs' runs in two record folders compared, nothing trained."""
    from seq2seq.compare.devices import write_devices_report
    from seq2seq.compare.frontier import read_records

    if len(flag.devices) != 2:
        raise ValueError(
            f"--devices takes two record folders, the same configs trained on two devices; "
            f"got {len(flag.devices)}"
        )
    folders = [Path(folder) for folder in flag.devices]
    for folder in folders:
        if not folder.is_dir():
            raise ValueError(f"--devices: {folder} is not a folder of run records")
    if folders[0].resolve() == folders[1].resolve():
        raise ValueError(
            f"--devices: {folders[0]} and {folders[1]} are one folder; give the records of "
            "each device"
        )
    if folders[0].name == folders[1].name:
        raise ValueError(
            f"--devices: both folders are named {folders[0].name}; the report names each side "
            "by its folder, so give them different names"
        )
    sides = [(f.name, read_records(f, flag.split, flag.checkpoint, "--devices")) for f in folders]
    report = write_devices_report(*sides, Path(flag.workdir))
    print(report.read_text())
    print(f"report: {report}")


def _settings(flag: SimpleNamespace) -> Settings:
    from seq2seq.compare.settings import Settings

    given = config_flags.get_override_values(flags.FLAGS["config"])
    return Settings(
        overrides=tuple(sorted(given.items())),
        budget_minutes=flag.budget_minutes,
        budget_steps=flag.budget_steps,
        slice_minutes=flag.slice_minutes,
        seeds=flag.seeds,
        beam_size=flag.beam_size,
        alpha=flag.alpha,
        split=flag.split,
        max_test_sentences=flag.max_test_sentences,
        checkpoint=flag.checkpoint,
    )


def _keep_records(flag: SimpleNamespace, finished: list[RunOutcome], title: str) -> None:
    """``--save_records`` copies, and a frontier suite's report from the finished runs."""
    from seq2seq.compare.frontier import read_run, save_record
    from seq2seq.compare.frontier_report import write_frontier_report

    if flag.save_records:
        for outcome in finished:
            kept = save_record(
                outcome.run, Path(flag.save_records), outcome.result["split"], flag.checkpoint
            )
            print(f"record: {kept}")
    if flag.suite in FRONTIER_SUITES and finished:
        runs = [read_run(o.run, o.result["split"], flag.checkpoint) for o in finished]
        frontier_md = write_frontier_report(runs, Path(flag.workdir), title, flag.checkpoint)
        print(f"frontier: {frontier_md}")


def _compare(flag: SimpleNamespace, argv: list[str]) -> None:
    """Trains and scores the runs (tuned first where asked), then prints the verdict."""
    extra = [arg for arg in argv[1:] if not arg.startswith("-")]
    specs, title = _specs([*flag.configs, *extra], flag.suite, flag.base, flag.rows)
    from seq2seq.compare.grid import make_tuning, scaled_tuned_values

    # budgets, decoding, checkpoint rule and tuning grid: refused before JAX loads
    settings = _settings(flag)
    tuning = make_tuning(
        flag.tune,
        flag.tune_minutes,
        flag.tune_samples,
        flag.tune_rungs,
        flag.tune_steps,
        flag.tune_keep_each,
        flag.tune_to_convergence,
    )
    if scaled := scaled_tuned_values(specs, tuning):
        print(
            f"note: --tune's x-factors scale the tuned values of --suite frontier_tuned "
            f"({'; '.join(scaled)}); the committed trials scaled --suite frontier's rows",
            file=sys.stderr,
        )
    if flag.save_records:  # a run (hours of work) where a record would go: refused first
        from seq2seq.compare.frontier import check_replaceable
        from seq2seq.compare.settings import first_seed, run_names

        for spec in specs:
            for name in run_names(spec, settings.seeds, first_seed(spec, settings)):
                if (Path(flag.save_records) / name).exists():
                    check_replaceable(Path(flag.save_records) / name)
    from seq2seq.compare.checks import check_comparison

    check_comparison(specs, settings, tuning)  # the configs and devices, before the rest loads
    from seq2seq.compare.comparison import compare  # once the invocation is known to be sound

    outcomes, report = compare(specs, Path(flag.workdir), settings, title, tuning)
    finished = [o for o in outcomes if o.status == "ok" and o.result is not None]
    _keep_records(flag, finished, title)
    print(f"\n{title} (beam {settings.beam_size}, alpha {settings.alpha}):")
    print(_summary(report))
    print(f"\nreport: {report}")
    if any(o.status == "preempted" for o in outcomes):
        sys.exit(143)
    if outcomes and all(o.status == "failed" for o in outcomes):
        raise RuntimeError(f"every run failed; {report} gives each one's reason")


def _one_mode(flag: SimpleNamespace) -> None:
    """Refuses flags of two modes at once (the others would be ignored), and, where records are
    read, a checkpoint rule no comparison applies.

    Raises:
      ValueError: one line naming the flags and the fix.
    """
    modes = {
        "--records": bool(flag.records),
        "--directions": bool(flag.directions),
        "--devices": bool(flag.devices),
        "--configs or --suite": bool(flag.configs or flag.suite),
    }
    given = [name for name, on in modes.items() if on]
    if len(given) > 1:
        raise ValueError(
            f"{' and '.join(given)} are different modes; pass one of --records, --directions, "
            "--devices, or --configs/--suite to train"
        )
    if given and given[0] != "--configs or --suite":
        describe_checkpoint_rule(flag.checkpoint)
        _check_report_outside_records(flag, given[0])
    if flag.save_records and Path(flag.save_records).resolve() == Path(flag.workdir).resolve():
        raise ValueError(
            f"--save_records {flag.save_records} is the --workdir: each run's record would "
            "replace the run itself; name another folder (e.g. docs/records/NAME)"
        )
    if flag.save_records:
        cli.check_work_directory(
            Path(flag.save_records), "--save_records", "name a folder such as docs/records/NAME"
        )


def _check_report_outside_records(flag: SimpleNamespace, mode: str) -> None:
    """Refuses a ``--workdir`` that is, or lies inside, a folder of the records it reads: the
    report, its JSON and figures would be written among committed records."""
    folders = [flag.records] if flag.records else (flag.directions or flag.devices or [])
    sources = [Path(folder).resolve() for folder in folders]

    def among_records(path: Path) -> bool:
        path = path.resolve()
        return any(path == source or source in path.parents for source in sources)

    workdir = Path(flag.workdir).resolve()
    for folder, source in zip(folders, sources, strict=True):
        if workdir == source or source in workdir.parents:
            suggested = Path("runs") / f"{source.name}-report"
            if among_records(suggested):  # records kept under runs/ themselves
                suggested = Path(tempfile.gettempdir()) / f"{source.name}-report"
            raise ValueError(
                f"--workdir {flag.workdir} is inside the records it reads ({mode} {folder}): "
                f"the report would be written among them; pass another folder, e.g. "
                f"--workdir {suggested}"
            )


def run() -> None:
    holders = _define_flags()

    def main(argv: list[str]) -> None:
        flag = _values(holders)
        _one_mode(flag)
        cli.check_work_directory(Path(flag.workdir), fix="pass a new folder or a comparison's")
        check_free(Path(flag.workdir))
        if flag.records:
            _rebuild_from_records(flag)
        elif flag.directions:
            _verdict_across_directions(flag)
        elif flag.devices:
            _devices(flag)
        else:
            check_not_records(Path(flag.workdir))
            _compare(flag, argv)

    def interrupted() -> str:
        """Training keeps each finished run; a report from records keeps nothing to go on from."""
        if any(getattr(holders, name).value for name in ("records", "directions", "devices")):
            return "interrupted: nothing to continue (a report from records is built afresh); rerun"
        return cli.RESUMES

    cli.run(main, interrupted=interrupted)


if __name__ == "__main__":
    run()
