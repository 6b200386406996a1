"""The Multi30k frontier's chosen sizes trained end to end on one accelerator, in one command
(``make device-frontier``)::

    python -m seq2seq.bench.device_frontier --out DIR [--minutes 7.5] [--seeds 2] \\
        [--rows transformer-small,rnnsearch-medium] [--data data/multi30k] [--config.KEY=VALUE]

Each row of the frontier_tuned suite (``seq2seq.compare.suites``; by default the two sizes the tuned
frontier chose up to 5 x 10^14 training FLOPs, docs/results.md; ``--rows transformer-medium``, the
Transformer validation chooses beyond that, is a second call) trains ``--seeds`` runs, every run
in its own process (``seq2seq.bench.timed_run``), all at once on the one accelerator unless
``--concurrent`` says fewer: each to convergence with its own early stopping, then scored on the
test split by the mean of its last 5 checkpoints with beam search. Every run's training ends by a
wall-clock deadline that leaves ``--eval_reserve_s`` before the end of ``--minutes`` for scoring:
a run stopped by it is recorded as not converged ("cap"), never lost. A worker still running at the
end is stopped.

This process never starts JAX's backend (it would take the accelerator's memory from its runs);
each run gets ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of the device's memory (0.9 split between the
runs at once) and all share one persistent compilation cache. Into ``DIR`` (the device tool
returns at most 8 files, 2 folders deep):

* ``records.tar.gz``: ``<records_name>/<run>/`` per scored run, in the layout of
  ``docs/records/`` (config, metrics, provenance naming the device, eval JSON, hypotheses);
  ``tar -xzf DIR/records.tar.gz -C docs/records`` puts them beside the CPU records, and
  ``python -m seq2seq.compare --records docs/records/<records_name> ...`` reports them;
* ``logs.tar.gz``: each worker's log, job and result;
* ``device_frontier.json`` and ``.md``: the environment and every run's outcome and seconds
  (written again after each run ends, so a command killed from outside leaves them).

The data travels with the checkout: ``make device-data`` copies Multi30k's German and English
files into ``data/multi30k`` (ignored by git), which the device tool carries (docs/benchmarks.md,
"The frontier on an accelerator").
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before anything else loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from absl import flags
from ml_collections import config_flags

from seq2seq import cli
from seq2seq.bench.device import environment
from seq2seq.bench.timed_run import Job, result_path
from seq2seq.records.whole import file_written_whole, write_whole

REPO = Path(__file__).resolve().parents[2]
# The sizes the tuned de->en frontier chose up to 5e14 FLOPs (RNNsearch's also at convergence).
ROWS = ("transformer-small", "rnnsearch-medium")
DATA = REPO / "data" / "multi30k"  # where ``make device-data`` puts the copy that travels
DATA_FILES = tuple(
    f"{stem}.{lang}" for stem in ("train", "val", "test_2016_flickr") for lang in ("de", "en")
)
MEMORY_SHARED = 0.9  # of the accelerator's memory, split between the runs at once
INTERRUPTED = (
    "interrupted: every run was stopped with a checkpoint, and what they had is kept in --out; "
    "this command does not continue them: pass a new --out to start again"
)
STOP_GRACE_S = 10.0  # between SIGTERM and SIGKILL for a worker still running at the end
POLL_S = 1.0
# The host's work a step, from each run's log lines (``seq2seq.training.logs.HOST_PARTS`` less
# waiting, which is the device's time): a run whose parts add up to its step time was host-bound.
HOST_WORK = ("input", "placing", "dispatch")


@dataclasses.dataclass
class Worker:
    """One run's process and what became of it."""

    job: Job
    job_file: Path
    log_file: Path
    process: subprocess.Popen | None = None
    started_s: float | None = None  # seconds since the command's start
    ended_s: float | None = None
    outcome: str = "waiting"  # waiting, running, ok, failed, stopped at the end or by a signal

    def summary(self) -> dict:
        result = {}
        if result_path(self.job_file).exists():
            result = json.loads(result_path(self.job_file).read_text())
        return {
            "name": self.job.name,
            "outcome": self.outcome,
            "started_s": self.started_s,
            "ended_s": self.ended_s,
            **result,
        }


def check_inputs(out: Path, rows: list[str], data: Path | None, checkpoint: str) -> None:
    """Refuses, before anything is written: a row the frontier_tuned suite lacks, a checkpoint rule
    that is none, a data folder without Multi30k's files, an ``out`` that already holds a
    result.

    Raises:
      ValueError: one line naming the problem and the fix.
    """
    from seq2seq.checkpoints.rule import describe_checkpoint_rule
    from seq2seq.compare.suites import expand_suite, select_runs

    select_runs(expand_suite("frontier_tuned"), rows, keep_first=False)  # names the runs there are
    describe_checkpoint_rule(checkpoint)  # latest, best or average:K
    check_data(data)
    if (out / "device_frontier.json").exists():
        raise ValueError(f"--out {out} already holds a device_frontier result; pass a new folder")


def check_data(data: Path | None) -> None:
    """Refuses a data folder without Multi30k's files (None: the configs' own folder).

    Raises:
      ValueError: one line naming the missing files and the fix.
    """
    missing = [name for name in DATA_FILES if data is not None and not (data / name).is_file()]
    if missing:
        raise ValueError(
            f"--data {data} lacks {', '.join(missing)}; run `make device-data` (copies "
            "Multi30k there from ../shared/data/multi30k) or pass the folder that has them"
        )


def data_folder(given: str | None, overrides: dict) -> Path | None:
    """The Multi30k folder every run reads: ``--data``, else the copy that travels
    (``data/multi30k``) if there is one; None where ``--config.data.dir`` says or neither is
    there (then each config's own, ``../shared/data/multi30k``)."""
    if "data.dir" in overrides:
        return None
    if given:
        return Path(given).resolve()
    return DATA if DATA.exists() else None


def make_workers(
    rows: list[str], seeds: int, workdir: Path, overrides: dict, deadline: float, scoring: dict
) -> list[Worker]:
    """One worker per run, every row's seeds in turn (seed 0 of every row first)."""
    jobs_dir = workdir / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    workers = []
    for seed_index in range(seeds):
        for row in rows:
            job = Job(
                row=row,
                seed_index=seed_index,
                seeds=seeds,
                workdir=str(workdir / "runs"),
                records=str(workdir / "records"),
                deadline=deadline,
                overrides=tuple(sorted(overrides.items())),
                **scoring,
            )
            job_file = jobs_dir / f"{job.name}.json"
            job.write(job_file)
            workers.append(Worker(job, job_file, jobs_dir / f"{job.name}.log"))
    return workers


def worker_environment(concurrent: int) -> dict[str, str]:
    """Each run's share of the accelerator's memory (unless set already), unbuffered logs."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{MEMORY_SHARED / concurrent:.3f}")
    return env


def start(worker: Worker, env: dict[str, str], now: float) -> None:
    log = worker.log_file.open("w")
    worker.process = subprocess.Popen(
        [sys.executable, "-m", "seq2seq.bench.timed_run", f"--job={worker.job_file}"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    worker.started_s, worker.outcome = now, "running"
    print(f"device frontier: {worker.job.name} started at {now:.0f} s", file=sys.stderr, flush=True)


def stop(*workers: Worker) -> None:
    """SIGTERM to each (the run saves and stops), then SIGKILL to any still running after a
    grace."""
    for worker in workers:
        worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for worker in workers:
        try:
            worker.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


def run_workers(workers: list[Worker], concurrent: int, end: float, on_change) -> None:
    """Runs the workers, ``concurrent`` at a time, until all end or the wall-clock ``end``
    (``time.time()``), where those still running are stopped; ``on_change()`` after each ends."""
    env = worker_environment(concurrent)
    origin = time.time()
    waiting, running = list(workers), []
    try:
        _run(waiting, running, concurrent, end, on_change, env, origin)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM to this command: its runs save and stop too
        stop(*running)  # they outlived it, holding the accelerator and this command's output
        for worker in running:
            worker.outcome, worker.ended_s = "stopped by a signal", time.time() - origin
        for worker in waiting:
            worker.outcome = "not started: stopped by a signal"
        on_change()
        raise


def _run(waiting, running, concurrent, end, on_change, env, origin) -> None:
    """``run_workers``' loop: starts ``waiting`` workers into ``running`` and ends them."""
    while waiting or running:
        now = time.time()
        while waiting and len(running) < concurrent and now < end:
            worker = waiting.pop(0)
            start(worker, env, now - origin)
            running.append(worker)
        for worker in list(running):
            code = worker.process.poll()
            if code is None and now < end:
                continue
            if code is None:
                stop(worker)
                worker.outcome = "stopped at the end"
            else:
                worker.outcome = "ok" if code == 0 else "failed"
            worker.ended_s = time.time() - origin
            running.remove(worker)
            print(
                f"device frontier: {worker.job.name} {worker.outcome} at {worker.ended_s:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            on_change()
        if now >= end and waiting:
            for worker in waiting:
                worker.outcome = "not started: no time left"
            waiting.clear()
            on_change()
        time.sleep(POLL_S if running else 0)


def runs_at_once(runs: list[dict]) -> list[float | None]:
    """For each run, how many runs' processes were alive on average over its own lifetime,
    itself included (None before it has ended): 1.0 had the accelerator alone. The runs share
    it by time-slicing, so a run's seconds are longer the higher this is."""
    spans = [(run.get("started_s"), run.get("ended_s")) for run in runs]
    shares = []
    for start, end in spans:
        if start is None or end is None or end <= start:
            shares.append(None)
            continue
        overlap = sum(
            max(0.0, min(end, other_end) - max(start, other_start))
            for other_start, other_end in spans
            if other_start is not None and other_end is not None
        )
        shares.append(overlap / (end - start))
    return shares


def markdown(summary: dict) -> str:
    """The runs' outcomes and seconds as a table, with the device."""
    environment_ = summary["environment"]
    lines = [
        f"device frontier on {environment_.get('gpu') or 'no GPU (nvidia-smi found none)'}, "
        f"{summary['concurrent']} runs at a time, {summary['minutes']:g} minutes, "
        f"packages {', '.join(f'{k} {v}' for k, v in environment_['packages'].items())}",
        "",
        "| run | outcome | ended | steps | train s | validation s | compile s | wall s | "
        "score s | test BLEU | step ms | host ms: input, placing, dispatch | runs at once | "
        "reason |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]

    def number(value, form: str) -> str:
        return format(value, form) if isinstance(value, (int, float)) else "-"

    def host(run: dict) -> str:  # the host's work a step; waiting (the device's time) aside
        return ", ".join(number(run.get(f"host_{p}_ms"), ".2f") for p in HOST_WORK)

    for run in summary["runs"]:
        ended = "deadline" if run.get("deadline_stopped") else run.get("stop_reason", "-")
        lines.append(
            f"| {run['name']} | {run['outcome']} | {ended} | {number(run.get('steps'), ',')} | "
            f"{number(run.get('elapsed_seconds'), '.1f')} | "
            f"{number(run.get('validation_seconds'), '.1f')} | "
            f"{number(run.get('compile_seconds'), '.1f')} | {number(run.get('wall_s'), '.1f')} | "
            f"{number(run.get('score_s'), '.1f')} | {number(run.get('test_bleu'), '.2f')} | "
            f"{number(run.get('step_ms'), '.2f')} | {host(run)} | "
            f"{number(run.get('runs_at_once'), '.2f')} | {run.get('reason', '')} |"
        )
    return "\n".join(lines) + "\n"


def pack(workdir: Path, out: Path, records_name: str) -> None:
    """``records.tar.gz`` (the scored runs' records under ``records_name/``) and
    ``logs.tar.gz`` (every worker's job, log and result) into ``out``."""
    records = workdir / "records"
    with file_written_whole(out / "records.tar.gz") as path, tarfile.open(path, "w:gz") as archive:
        if records.exists():
            for run in sorted(records.iterdir()):
                if not run.name.startswith("."):  # a record still being copied
                    archive.add(run, arcname=f"{records_name}/{run.name}")
    with file_written_whole(out / "logs.tar.gz") as path, tarfile.open(path, "w:gz") as archive:
        archive.add(workdir / "jobs", arcname="logs")


def device_frontier(
    out: Path,
    workdir: Path,
    rows: list[str],
    seeds: int,
    minutes: float,
    concurrent: int,
    overrides: dict,
    scoring: dict,
    eval_reserve_s: float,
    records_name: str,
) -> dict:
    """Trains and scores every run within ``minutes`` of wall-clock time; writes ``out``."""
    origin = time.time()
    end = origin + 60 * minutes
    workers = make_workers(rows, seeds, workdir, overrides, end - eval_reserve_s, scoring)
    concurrent = min(concurrent or len(workers), len(workers))
    summary = {
        "environment": environment(),
        "rows": rows,
        "seeds": seeds,
        "minutes": minutes,
        "concurrent": concurrent,
        "eval_reserve_s": eval_reserve_s,
        "overrides": {key: str(value) for key, value in overrides.items()},
        "scoring": scoring,
        "runs": [],
    }

    def write() -> None:
        summary["runs"] = [worker.summary() for worker in workers]
        for run, share in zip(summary["runs"], runs_at_once(summary["runs"]), strict=True):
            run["runs_at_once"] = share
        summary["wall_s"] = time.time() - origin
        pack(workdir, out, records_name)
        write_whole(out / "device_frontier.json", json.dumps(summary, indent=1) + "\n")
        write_whole(out / "device_frontier.md", markdown(summary))

    write()
    run_workers(workers, concurrent, end, write)
    write()
    return summary


def main() -> None:
    holders = {
        "out": flags.DEFINE_string("out", None, "Folder for the records' archive and summary."),
        "workdir": flags.DEFINE_string(
            "workdir", "runs/device-frontier", "Where the runs train (checkpoints stay there)."
        ),
        "minutes": flags.DEFINE_float(
            "minutes", 7.5, "Wall-clock minutes for everything: training, scoring, packing."
        ),
        "rows": flags.DEFINE_list("rows", list(ROWS), "Runs of the frontier_tuned suite to train."),
        "seeds": flags.DEFINE_integer("seeds", 2, "Runs per row (seeds seed, seed + 1, ...)."),
        "concurrent": flags.DEFINE_integer(
            "concurrent", 0, "Runs at a time on the accelerator; 0: all of them."
        ),
        "data": flags.DEFINE_string(
            "data", None, "Multi30k's folder (default: data/multi30k if there, else the configs')."
        ),
        "eval_reserve_s": flags.DEFINE_float(
            "eval_reserve_s",
            90.0,
            "Seconds before the end when every run's training stops, left for scoring.",
        ),
        "beam_size": flags.DEFINE_integer("beam_size", 4, "Beam width of the test scores."),
        "alpha": flags.DEFINE_float("alpha", 0.6, "Length-penalty exponent of the test scores."),
        "checkpoint": flags.DEFINE_string(
            "checkpoint", "average:5", "Checkpoint rule scored on the test split."
        ),
        "max_test_sentences": flags.DEFINE_integer(
            "max_test_sentences", 0, "Score the first N test sentences only; 0: all."
        ),
        "records_name": flags.DEFINE_string(
            "records_name", "multi30k_frontier_gpu", "The records' folder inside the archive."
        ),
    }
    cli.define_config_overrides()
    flags.declare_key_flag("config")  # listed by --help, with this module's flags
    flags.mark_flags_as_required(["out"])
    flags.register_validator("seeds", lambda n: n >= 1, "--seeds must be at least 1")
    flags.register_validator("minutes", lambda m: m > 0, "--minutes must be > 0")

    def run(argv: list[str]) -> None:
        del argv
        flag = {name: holder.value for name, holder in holders.items()}
        overrides = config_flags.get_override_values(flags.FLAGS["config"])
        out, workdir = Path(flag["out"]), Path(flag["workdir"]).resolve()
        data = data_folder(flag["data"], overrides)
        check_inputs(out, flag["rows"], data, flag["checkpoint"])
        if workdir.exists() and any(workdir.iterdir()):
            raise ValueError(f"--workdir {workdir} is not empty; pass a new folder")
        if data is not None:
            overrides["data.dir"] = str(data)
        out.mkdir(parents=True, exist_ok=True)
        scoring = {
            key: flag[key] for key in ("beam_size", "alpha", "checkpoint", "max_test_sentences")
        }
        summary = device_frontier(
            out,
            workdir,
            flag["rows"],
            flag["seeds"],
            flag["minutes"],
            flag["concurrent"],
            overrides,
            scoring,
            flag["eval_reserve_s"],
            flag["records_name"],
        )
        print(markdown(summary))
        if not all(run["outcome"] == "ok" for run in summary["runs"]):
            sys.exit(1)

    cli.run(run, interrupted=INTERRUPTED)


if __name__ == "__main__":
    main()
