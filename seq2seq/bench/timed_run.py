"""One run of the frontier_tuned suite against a wall-clock deadline: train, score, keep its record.

    python -m seq2seq.bench.timed_run --job JOB.json

The worker of ``seq2seq.bench.device_frontier``, one process per run so that several runs share
one accelerator. The job (``Job``, as JSON) names a row of the frontier_tuned suite, the seed, the
comparison's overrides and decoding, and the wall-clock time at which training must end. The run
trains to convergence (its own early stopping), to its step cap, or to the deadline, whichever
comes first; a run the deadline stopped is recorded as not converged ("cap"), with its final
validation and checkpoint. It is then scored on the test split by the checkpoint rule (the mean
of the last 5 checkpoints, beam search) and its record copied into the records folder, in the
layout of ``docs/records/`` (``seq2seq.compare.frontier.save_record``). ``JOB.result.json``
says how it went, with the wall-clock seconds of each phase.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before anything else loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import dataclasses
import json
import sys
import time
from pathlib import Path

from absl import flags

from seq2seq import cli
from seq2seq.records.whole import write_whole


@dataclasses.dataclass(frozen=True)
class Job:
    """What one worker does; written by the orchestrator as JSON beside the run."""

    row: str  # a run of the frontier_tuned suite, e.g. "transformer-small"
    seed_index: int  # the run's seed is the config's seed plus this
    seeds: int  # seeds of the row in the whole command (one: the run is named ``<row>``)
    workdir: str  # parent folder of the run (checkpoints stay there)
    records: str  # where the run's record is copied
    deadline: float  # wall-clock time (``time.time()``) at which training ends
    overrides: tuple[tuple[str, object], ...] = ()  # --config.KEY=VALUE of every run
    beam_size: int = 4
    alpha: float = 0.6
    checkpoint: str = "average:5"  # the rule scored on the test split
    max_test_sentences: int = 0  # 0: the whole test split

    @classmethod
    def read(cls, path: Path) -> Job:
        fields = json.loads(Path(path).read_text())
        fields["overrides"] = tuple(tuple(pair) for pair in fields.get("overrides", ()))
        return cls(**fields)

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(dataclasses.asdict(self), indent=1) + "\n")

    @property
    def name(self) -> str:
        """The run's folder, as ``compare`` names it (``runner.prepare``: by its seed)."""
        from seq2seq.compare.settings import first_seed, run_names

        spec, settings = _spec_and_settings(self)
        return run_names(spec, self.seeds, first_seed(spec, settings))[self.seed_index]


def result_path(job_path: Path) -> Path:
    return Path(job_path).with_suffix(".result.json")


def _spec_and_settings(job: Job):
    from seq2seq.compare.settings import Settings
    from seq2seq.compare.suites import expand_suite, select_runs

    (spec,) = select_runs(expand_suite("frontier_tuned"), [job.row], keep_first=False)
    settings = Settings(
        overrides=job.overrides,
        seeds=job.seeds,
        beam_size=job.beam_size,
        alpha=job.alpha,
        max_test_sentences=job.max_test_sentences,
        checkpoint=job.checkpoint,
        slice_minutes=0.0,
    )
    return spec, settings


def _spent(records: list[dict]) -> dict:
    """What the run's clock says it spent: training, and apart from it validation, compiling
    and checkpoints (seconds), from its last record; and a step's milliseconds, with the
    host's share of them (``HOST_PARTS``), over its log lines after the first."""
    from seq2seq.training.logs import HOST_PARTS, steady_means

    last = next((r for r in reversed(records) if "elapsed_seconds" in r), {})
    keys = ("elapsed_seconds", "validation_seconds", "compile_seconds", "checkpoint_seconds")
    spent = {key: last.get(key, 0.0) for key in keys}
    train = [r for r in records if r.get("kind") == "train"]
    if train:
        means = steady_means(train, ("step_seconds", *(f"host_{p}_ms" for p in HOST_PARTS)))
        spent["step_ms"] = 1e3 * means.pop("step_seconds")
        spent |= means
    return spent


def scoring_rule(run, config, rule: str) -> str:
    """``rule``, or for ``average:K`` on a run that saved fewer than K checkpoints (a deadline
    stopped it early) the mean of those it has: the run is scored, not lost, and its record is
    filed under the rule it got (``compare --records`` then shows its curve, unscored)."""
    from seq2seq.checkpoints.rule import average_count
    from seq2seq.checkpoints.store import Checkpoints

    count = average_count(rule)
    if count is None:
        return rule
    checkpoints = Checkpoints(run.checkpoints_dir, keep=config.checkpoint.keep)
    try:
        saved = len(checkpoints.all_steps()[-config.checkpoint.keep :])
    finally:
        checkpoints.close()
    return rule if saved >= count or saved == 0 else f"average:{saved}"


def _one_line(error: Exception) -> str:
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"


def run_job(job: Job) -> dict:
    """Trains, scores and keeps the record of ``job``'s run; returns what happened (status
    "ok" or "failed" with a one-line reason), never raises for a failed run."""
    started = time.time()
    from seq2seq.compare import runner
    from seq2seq.compare.frontier import save_record
    from seq2seq.evaluation.validation import make_validate_fn
    from seq2seq.training.trainer import Deadline, train

    spec, settings = _spec_and_settings(job)
    outcome = runner.prepare(spec, settings, job.seed_index, Path(job.workdir))
    result: dict = {"name": outcome.name, "row": job.row, "seed": outcome.seed}
    phases = {"import_s": time.time() - started}
    if outcome.status == "ok":
        deadline = Deadline(job.deadline)
        clock = time.time()
        try:
            summary = train(outcome.config, outcome.run, make_validate_fn, preemption=deadline)
            result.update(steps=summary.step, stop_reason=summary.stop_reason)
            result["deadline_stopped"] = deadline.passed
            if summary.preempted:  # the command's stop: no time to score, and nothing finished
                stopped_by = deadline.signal_name or "SIGTERM"
                outcome.status = "stopped"
                outcome.reason = f"stopped by {stopped_by} at step {summary.step}; not scored"
        except Exception as error:  # noqa: BLE001 (the reason goes into the result)
            outcome.status, outcome.reason = "failed", _one_line(error)
        phases["train_s"] = time.time() - clock
        result.update(_spent(outcome.run.read_metrics()))
    if outcome.status == "ok":
        clock = time.time()
        rule = scoring_rule(outcome.run, outcome.config, settings.checkpoint)
        settings = dataclasses.replace(settings, checkpoint=rule)
        runner.evaluate_outcome(outcome, settings)
        phases["score_s"] = time.time() - clock
    if outcome.status == "ok":
        split = outcome.result["split"]
        save_record(outcome.run, Path(job.records), split, settings.checkpoint)
        result.update(split=split, test_bleu=outcome.result["bleu"], scored=settings.checkpoint)
        result["decode_s"] = outcome.result.get("decode_seconds")
    result.update(status=outcome.status, reason=outcome.reason, **phases)
    result["wall_s"] = time.time() - started
    return result


def main() -> None:
    job_flag = flags.DEFINE_string(
        "job", None, "The job file (JSON) that seq2seq.bench.device_frontier wrote."
    )
    flags.mark_flag_as_required("job")

    def run(argv: list[str]) -> None:
        del argv
        job_path = Path(job_flag.value)
        if not job_path.is_file():
            raise ValueError(
                f"no job file at {job_path}; seq2seq.bench.device_frontier writes one per run"
            )
        result = run_job(Job.read(job_path))
        write_whole(result_path(job_path), json.dumps(result, indent=1) + "\n")
        print(json.dumps(result))
        sys.exit(0 if result["status"] == "ok" else 1)

    cli.run(run)


if __name__ == "__main__":
    main()
