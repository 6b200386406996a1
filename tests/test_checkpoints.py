"""Checkpoint retention: the newest ``keep`` plus the best by validation BLEU; a checkpoint an
interruption wrote off schedule is deleted once the resumed run saves a later one."""

import logging
import subprocess
import sys

import pytest

from seq2seq.checkpoints.store import Checkpoints
from seq2seq.evaluation.restore import checkpoint_choice
from seq2seq.records.run_directory import RunDirectory
from seq2seq.training.trainer import Preemption, create_state, train
from tests.conftest import REPO, subprocess_env, tiny_config


def test_keeps_the_newest_and_the_best_by_bleu(tmp_path):
    state, _ = create_state(tiny_config("transformer"), 20, 20)
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=2)
    bleus = {10: 5.0, 20: 30.0, 30: 12.0, 40: 8.0, 50: 9.0}
    for step, bleu in bleus.items():
        progress = {"elapsed_seconds": step / 10}
        checkpoints.save(
            step, state, {"epoch": 0, "position": step}, metrics={"bleu": bleu}, progress=progress
        )
        checkpoints.wait()
    assert checkpoints.all_steps() == [20, 40, 50]  # best (20), then the newest two
    _, record = checkpoints.restore(state, 20)
    assert record == {"iterator": {"epoch": 0, "position": 20}, "progress": {"elapsed_seconds": 2}}
    checkpoints.close()


def test_a_save_left_unfinished_is_deleted_by_the_trainer_and_kept_from_readers(tmp_path):
    """A second Ctrl-C during a save left ``61.orbax-checkpoint-tmp`` beside the checkpoints
    for good; only the trainer (the run's lock held) may delete it: a reader, eval.py while the
    run trains, could find the trainer's save under way."""
    state, _ = create_state(tiny_config("transformer"), 20, 20)
    directory = tmp_path / "checkpoints"
    checkpoints = Checkpoints(directory, keep=2, training=True)
    checkpoints.save(10, state, {"epoch": 0, "position": 10}, progress={"elapsed_seconds": 1.0})
    checkpoints.wait()
    checkpoints.close()
    unfinished = directory / "13.orbax-checkpoint-tmp-1765100000000"  # orbax's own naming
    (unfinished / "state").mkdir(parents=True)
    reader = Checkpoints(directory, keep=2)
    assert reader.all_steps() == [10] and unfinished.is_dir()
    reader.close()
    trainer = Checkpoints(directory, keep=2, training=True)  # deletes it before its first save
    trainer.save(20, state, {"epoch": 0, "position": 20}, progress={"elapsed_seconds": 2.0})
    trainer.wait()
    assert trainer.all_steps() == [10, 20] and not unfinished.exists()
    trainer.close()


def test_a_wait_for_a_save_cut_short_by_ctrl_c_logs_no_traceback(tmp_path, caplog, monkeypatch):
    """A second Ctrl-C while a stopped run waited for its checkpoint printed orbax's "Save
    Finalize thread failed" and 15 lines of traceback before the command's own one line."""
    import threading

    state, _ = create_state(tiny_config("transformer"), 20, 20)
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=2)
    checkpoints.save(10, state, {"epoch": 0, "position": 10})
    join = threading.Thread.join

    def interrupted(thread, *args, **kwargs):  # the second Ctrl-C, while the main thread waits
        monkeypatch.setattr(threading.Thread, "join", join)
        join(thread, *args, **kwargs)  # the save finishes: only the wait is cut short
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "join", interrupted)
    with caplog.at_level(logging.INFO, logger="absl"), pytest.raises(KeyboardInterrupt):
        checkpoints.wait()
    checkpoints.close()
    assert not [r for r in caplog.records if r.exc_info]
    assert any("Waiting for Save Finalize" in r.getMessage() for r in caplog.records)  # heard
    try:
        raise ValueError("disk full")
    except ValueError:
        logging.getLogger("absl").exception("another failure")
    assert caplog.records[-1].exc_info  # the filter drops interrupts, and only while waiting


def test_an_interrupted_checkpoint_takes_no_place_and_marks_and_scores_survive_restarts(tmp_path):
    state, _ = create_state(tiny_config("transformer"), 20, 20)
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=2)

    def save(step, **kwargs):
        checkpoints.save(step, state, {"epoch": 0, "position": step}, **kwargs)
        checkpoints.wait()

    save(10, metrics={"bleu": 30.0})
    save(20)
    save(25, interrupted=True)  # the newest, to resume from: kept beside the two scheduled
    assert checkpoints.all_steps() == [10, 20, 25]
    checkpoints.close()
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=2)  # marks and scores survive
    save(30, metrics={"bleu": 12.0})
    save(40)
    assert checkpoints.all_steps() == [10, 30, 40]  # the best (10), then the newest two
    checkpoints.close()


class _StopAt(Preemption):
    """Stops the run after one given step, as SIGTERM or a comparison's pause would."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def reached(self, step: int, elapsed_seconds: float = 0.0) -> bool:
        self.requested = self.requested or step == self.step
        return self.requested


def _saved_steps(workdir) -> list[int]:
    checkpoints = Checkpoints(RunDirectory(workdir).checkpoints_dir, keep=3)
    try:
        return checkpoints.all_steps()
    finally:
        checkpoints.close()


def _records(workdir, kind: str) -> dict[int, dict]:
    return {r["step"]: r for r in RunDirectory(workdir).read_metrics() if r["kind"] == kind}


def test_a_run_stopped_after_its_last_step_validates_and_records_its_end_at_the_next_start(
    tmp_path,
):
    """Stopped by a signal after step 6 of 6, before its final validation: the next start,
    with nothing left to train, said so and wrote nothing more, so the run never had its last
    validation or its stop record (a comparison then showed "—" for how it ended)."""
    from seq2seq.evaluation.validation import make_validate_fn

    config = tiny_config("transformer")
    config.train.steps, config.eval.every_steps, config.checkpoint.every_steps = 6, 4, 4
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    train(config, whole, make_validate_fn)
    assert train(config, stopped, make_validate_fn, preemption=_StopAt(6)).preempted
    assert 6 not in _records(stopped, "validation") and not _records(stopped, "stop")
    assert train(config, stopped, make_validate_fn).step == 6
    for kind in ("validation", "stop"):
        (again,), (first,) = (
            [{k: v for k, v in r.items() if k in ("bleu", "loss", "reason")}]
            for r in (_records(stopped, kind)[6], _records(whole, kind)[6])
        )
        assert again == first
    assert _records(stopped, "stop")[6]["reason"] == "cap"


def test_a_stopped_run_says_its_checkpoint_is_saved_only_once_it_is(tmp_path):
    """The line "SIGTERM: saved step N; rerun to resume" (and Ctrl-C's) came while orbax still
    wrote the checkpoint in another thread: a second Ctrl-C, or a scheduler's SIGKILL after its
    grace period, then left only a temporary folder, and the resume started from scratch."""
    config = tiny_config("transformer")
    config.train.steps, config.checkpoint.every_steps = 8, 100
    folders_when_said = []

    class Listen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "saved step" in record.getMessage():
                folder = RunDirectory(tmp_path).checkpoints_dir
                folders_when_said.append(sorted(path.name for path in folder.iterdir()))

    listener = Listen()
    logging.getLogger("seq2seq").addHandler(listener)
    try:
        assert train(config, tmp_path, preemption=_StopAt(3)).preempted
    finally:
        logging.getLogger("seq2seq").removeHandler(listener)
    assert folders_when_said == [["3"]]  # finished: no orbax-checkpoint-tmp folder


class _Interrupted(Exception):
    """What this test's own SIGINT handler raises: the Ctrl-C reached the run unhandled."""


def test_ctrl_c_during_the_final_validation_waits_for_the_final_checkpoint(tmp_path, caplog):
    """A Ctrl-C during the final validation or checkpoint cut orbax's write short: the run
    kept only a temporary folder of its last step, while metrics.jsonl's validation said it had
    ended, so a comparison reused it and then failed it for good ("holds no trained model").
    The run now finishes first, and says that the Ctrl-C came (it used to be taken silently)."""
    import os
    import signal

    from seq2seq.evaluation.validation import make_validate_fn

    config = tiny_config("transformer")
    config.train.steps, config.eval.every_steps, config.checkpoint.every_steps = 6, 4, 4

    def make_validate(config, tokenizer, graphdef):
        validate = make_validate_fn(config, tokenizer, graphdef)

        def validate_and_interrupt(state):
            if int(state.step) == 6:  # the final validation, run by the final save
                os.kill(os.getpid(), signal.SIGINT)
            return validate(state)

        return validate_and_interrupt

    def unhandled(signum, frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGINT, unhandled)
    try:
        with caplog.at_level(logging.WARNING, logger="seq2seq"):
            summary = train(config, tmp_path, make_validate)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "Ctrl-C came while the run was finishing: it finished first (step 6" in caplog.text
    assert summary.step == 6
    assert _saved_steps(tmp_path)[-1] == 6
    assert _records(tmp_path, "stop")[6]["reason"] == "cap"


@pytest.mark.slow
def test_an_interrupted_run_averages_the_checkpoints_of_an_uninterrupted_one(tmp_path):
    # Saved every 10 steps, the newest 3 scheduled ones kept. Stopped at step 23 (off schedule),
    # the run writes checkpoint 23 beside 10 and 20. Stopped again at 27, it writes 27 and drops
    # 23. Resumed to the end, it drops 27 at step 30: what remains, and what average:3 reads, is
    # the uninterrupted run's 20, 30, 40 (counted as scheduled, 27 would give 27, 30, 40).
    config = tiny_config("transformer")
    config.train.steps = 40
    config.checkpoint.keep = 3
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    train(config, whole)
    assert train(config, stopped, preemption=_StopAt(23)).step == 23
    assert _saved_steps(stopped) == [10, 20, 23]
    assert train(config, stopped, preemption=_StopAt(27)).step == 27
    assert _saved_steps(stopped) == [10, 20, 27]  # the second interruption replaces the first
    train(config, stopped)

    assert _saved_steps(whole) == _saved_steps(stopped) == [20, 30, 40]
    choice = checkpoint_choice(RunDirectory(stopped), config, "average:3")
    assert choice.steps == (20, 30, 40)


@pytest.mark.slow
def test_checkpoints_every_few_training_minutes_without_validation(tmp_path):
    # The WMT configs' cadence (a checkpoint every 10 training minutes, no validation between),
    # here every half second: a checkpoint at each step whose clock reading crossed a multiple.
    # A budget of 2.25 training seconds ends the run after four such crossings on any machine
    # (a step cap of 300 saved 148 checkpoints in 155 s on busy cores).
    import math

    period = 0.5
    config = tiny_config("transformer")
    config.train.steps = 100_000
    config.train.time_budget_minutes = 4.5 * period / 60
    config.train.log_every_steps = 1  # a record of the clock at every step
    config.checkpoint.every_steps = 0
    config.checkpoint.every_minutes = period / 60
    config.checkpoint.keep = 1_000
    summary = train(config, tmp_path)
    records = [r for r in RunDirectory(tmp_path).read_metrics() if r["kind"] == "train"]
    clock = [(0, 0.0)] + [(r["step"], r["elapsed_seconds"]) for r in records]
    crossed = [
        step
        for (_, before), (step, now) in zip(clock, clock[1:], strict=False)
        if math.floor(now / period) > math.floor(before / period)
    ]
    assert len(crossed) >= 3, clock[-1]
    assert _saved_steps(tmp_path) == sorted({*crossed, summary.step})  # and the final one


def test_a_damaged_checkpoint_read_for_evaluation_is_named_with_the_others(tmp_path):
    """eval.py reads a checkpoint's parameters alone: a folder missing its state showed as a
    traceback ending in orbax's KeyError."""
    import shutil

    import jax

    from seq2seq.checkpoints.store import DamagedCheckpointError

    state, _ = create_state(tiny_config("transformer"), 20, 20)
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=3)
    for step in (10, 20):
        checkpoints.save(step, state, {"epoch": 0, "position": step}, progress={})
        checkpoints.wait()
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state.params)
    assert jax.tree.leaves(checkpoints.restore_params(abstract, 10))  # a whole one reads
    shutil.rmtree(tmp_path / "checkpoints" / "20" / "state")
    with pytest.raises(DamagedCheckpointError) as refused:
        checkpoints.restore_params(abstract, 20)
    message = str(refused.value)
    assert message.startswith(f"checkpoint 20 in {tmp_path / 'checkpoints'} cannot be read (")
    assert message.endswith(
        "pass --checkpoint with another of its steps (10) or restore the folder"
    )
    assert "\n" not in message
    checkpoints.close()


def test_reads_left_in_flight_by_a_failed_restore_print_nothing(tmp_path):
    """A checkpoint whose arrays' data is gone fails at its first read, and orbax closes its
    event loop with the others in flight: each then printed "RuntimeError: Event loop is
    closed" as the interpreter went on (after eval.py's one-line error, 90 tracebacks)."""
    script = f"""
import time
from pathlib import Path
import jax
from seq2seq.checkpoints.store import Checkpoints, DamagedCheckpointError
from tests.conftest import tiny_config
from seq2seq.training.trainer import create_state
state, _ = create_state(tiny_config("transformer"), 20, 20)
folder = Path({str(tmp_path)!r})
checkpoints = Checkpoints(folder, keep=3)
checkpoints.save(10, state, {{"epoch": 0, "position": 10}}, progress={{}})
checkpoints.wait()
for path in (folder / "10" / "state").rglob("*"):
    if path.is_file() and path.parent.name == "d":
        path.unlink()
abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state.params)
try:
    checkpoints.restore_params(abstract, 10)
except DamagedCheckpointError:
    print("refused")
time.sleep(1)  # the late reads land
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
        env=subprocess_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "refused\n"
    assert "Event loop is closed" not in result.stderr, result.stderr[-3000:]


def test_a_run_without_its_checkpoints_folder_is_refused_and_left_as_it_was(tmp_path):
    """Opening orbax's manager to list the steps created an empty ``checkpoints/`` in the run
    being read, before the refusal."""
    from seq2seq.checkpoints.rule import CheckpointError

    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    (run.path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError):
        checkpoint_choice(run, tiny_config(), "latest")
    assert sorted(p.name for p in run.path.iterdir()) == ["config.json"]
