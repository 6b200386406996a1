"""The plain log lines of long work without a terminal: how far a run is, what it and a comparison
have left, its samples."""

import json
import logging
import math
import time

import pytest

from seq2seq.records.run_directory import RunDirectory, RunDirectoryError
from seq2seq.training.logs import (
    MetricsWriter,
    duration,
    sample_line,
    seconds_to_go,
    short_line,
    steady_means,
    validation_line,
)
from seq2seq.training.stopping import EarlyStopping


def test_what_is_left_is_the_steps_at_the_intervals_pace_or_the_budget_whichever_ends_first():
    # 1,750 steps left at 0.1 s: 175 s, inside a budget that has 500 s left.
    assert seconds_to_go(250, 2000, 0.1, elapsed=100.0, budget=600.0) == pytest.approx(175.0)
    # The same steps with 60 s of the budget left: the budget ends the run first.
    assert seconds_to_go(250, 2000, 0.1, elapsed=540.0, budget=600.0) == pytest.approx(60.0)
    assert seconds_to_go(250, 2000, 0.1, elapsed=540.0, budget=math.inf) == pytest.approx(175.0)
    # Past the budget (the steps in flight end after it) or at the last step: nothing left.
    assert seconds_to_go(250, 2000, 0.1, elapsed=610.0, budget=600.0) == 0.0
    assert seconds_to_go(2000, 2000, 0.1, elapsed=10.0, budget=math.inf) == 0.0


@pytest.mark.parametrize(
    "seconds, text",
    [(0.0, "0 s"), (44.6, "45 s"), (89.0, "89 s"), (175.0, "3 min"), (5340.0, "89 min"),
     (12240.0, "3.4 h")],
)  # fmt: skip
def test_a_wait_reads_in_the_unit_a_person_would_use(seconds, text):
    assert duration(seconds) == text


def test_the_progress_line_names_the_step_out_of_the_runs_steps_and_the_time_to_go():
    record = {
        "loss_mean": 1.66694,
        "learning_rate": 3.91e-3,
        "target_tokens_per_second": 10486.2,
        "flops_per_second_per_device": 6.19e10,
    }
    assert short_line(250, record, 2000, 175.0) == (
        "step 250/2000 (12%, 3 min of training to go): mean loss 1.6669, lr 3.91e-03, "
        "10486 target tokens/s, 0.0619 TFLOP/s per device"
    )


def test_a_long_source_in_a_sample_cannot_hide_its_output():
    source = " ".join(["word"] * 200)  # 999 characters
    sample = f"source: {source}\nreference: ein kurzer satz\noutput: ein kurzer satz"
    line = sample_line(sample, width=60)
    parts = line.split(" | ")
    assert parts[1:] == ["reference: ein kurzer satz", "output: ein kurzer satz"]
    assert len(parts[0]) == 60 and parts[0].endswith(" ...")
    assert (
        sample_line("source: a\nreference: b\noutput: b") == "source: a | reference: b | output: b"
    )


def _job(tmp_path, name: str, budget_minutes: float, trained_seconds: float | None):
    """A comparison's job as train_in_slices sees it: a run directory whose metrics say what it
    has trained (None: a new run, no metrics yet) and a config with its time budget."""
    from types import SimpleNamespace

    import ml_collections

    from seq2seq.records.run_directory import RunDirectory

    run = RunDirectory(tmp_path / name)
    run.path.mkdir()
    if trained_seconds is not None:
        lines = [{"step": 50, "kind": "train", "elapsed_seconds": trained_seconds / 2},
                 {"step": 100, "kind": "train", "elapsed_seconds": trained_seconds}]  # fmt: skip
        run.metrics_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = ml_collections.ConfigDict({"train": {"time_budget_minutes": budget_minutes}})
    return SimpleNamespace(run=run, config=config, status="ok")


def test_a_comparison_has_its_budgets_less_what_its_runs_trained_left(tmp_path):
    from seq2seq.compare.runner import training_minutes_left

    new = _job(tmp_path, "new", 10.0, None)
    halfway = _job(tmp_path, "halfway", 10.0, 240.0)  # 4 of its 10 minutes trained
    past = _job(tmp_path, "past", 10.0, 630.0)  # its last steps ended past the budget
    assert training_minutes_left([new, halfway, past]) == pytest.approx(10.0 + 6.0 + 0.0)
    # A run bounded by steps alone (no time budget): how long it takes is not known.
    assert training_minutes_left([new, _job(tmp_path, "steps", 0.0, 240.0)]) is None


def test_steady_means_leave_the_compiling_line_out_and_weight_the_others_by_their_steps():
    lines = [{"step": 10, "a": 100.0}, {"step": 20, "a": 2.0, "b": 1.0}, {"step": 40, "a": 5.0}]
    means = steady_means(lines, ("a", "b", "c"))
    assert means == {"a": pytest.approx((10 * 2.0 + 20 * 5.0) / 30), "b": 1.0}
    assert steady_means(lines[:1], ("a",)) == {"a": 100.0}  # one line: it is all there is


def test_each_metrics_line_says_when_it_was_written(tmp_path):
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    writer = MetricsWriter(run, resume_step=0)
    before = time.time()
    writer.write(10, {"kind": "train", "loss": 2.5})
    time.sleep(0.01)
    writer.write(20, {"kind": "train", "loss": 2.0})
    writer.close()
    first, second = run.read_metrics()
    assert (first["step"], first["loss"], second["step"]) == (10, 2.5, 20)
    assert before - 0.001 <= first["time"] < second["time"] <= time.time()


def test_a_metrics_line_cut_short_by_a_crash_is_dropped_and_the_run_goes_on(tmp_path):
    """A crash or a full disk in the middle of a line's write left half a line: every reader
    refused the file ("not valid JSON") and the resume died on it with a line naming no file."""
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    records = [{"step": s, "kind": "train", "loss": 3.0 - s / 10} for s in (2, 4, 6)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    run.metrics_file.write_text(text + '{"step": 8, "kind": "tra')
    assert run.read_metrics(drop_cut_end=True) == records  # never written, for a resume
    with pytest.raises(RunDirectoryError, match="line 4 is not valid JSON"):  # a record's: damage
        run.read_metrics()
    writer = MetricsWriter(run, resume_step=4)  # the resume, from the checkpoint of step 4
    writer.write(6, {"kind": "train", "loss": 2.5})
    writer.close()
    assert (
        run.metrics_file.read_text()
        == "".join(json.dumps(r) + "\n" for r in records[:2])
        + json.dumps(run.read_metrics()[-1])
        + "\n"
    )
    assert [(r["step"], r["loss"]) for r in run.read_metrics()] == [(2, 2.8), (4, 2.6), (6, 2.5)]
    run.metrics_file.write_text(text.replace('"loss": 2.6', '"loss": 2.6, "x'))
    with pytest.raises(RunDirectoryError, match="line 2 is not valid JSON"):  # not a cut end
        run.read_metrics()


def _tensorboard_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Tag -> (step, value) of every scalar in ``folder``'s event files, read as TensorBoard
    reads them: records of an 8-byte length, its 4-byte CRC, the event, the event's CRC."""
    from tensorboardX.proto.event_pb2 import Event

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            length = int.from_bytes(data[at : at + 8], "little")
            if at + 12 + length + 4 > len(data):  # the writer's thread is writing this one
                break
            event = Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_has_each_line_on_disk_within_a_second_before_any_close(tmp_path):
    """Nothing waits in tensorboardX's queue for a close that a run stopped at once (a second
    Ctrl-C, SIGKILL) never makes: its lines are on disk within about a second."""
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    writer = MetricsWriter(run, resume_step=0)
    writer.write(10, {"kind": "train", "loss": 2.5})
    writer.write(20, {"kind": "train", "loss": 2.0, "bleu": float("nan")})
    written = [(10, 2.5), (20, 2.0)]
    deadline = time.monotonic() + 10  # a second, and a loaded CI machine's slack
    scalars = _tensorboard_scalars(run.tensorboard_dir)
    while scalars.get("train/loss") != written and time.monotonic() < deadline:
        time.sleep(0.1)
        scalars = _tensorboard_scalars(run.tensorboard_dir)
    assert scalars["train/loss"] == written  # on disk, the writer not closed
    assert "train/bleu" not in scalars  # not a number: in metrics.jsonl only
    writer.close()


def test_tensorboard_itself_reads_the_scalars_and_samples_of_a_run(tmp_path):
    """``make tensorboard`` shows what a run wrote: the locked TensorBoard's own reader finds each
    finite scalar under its tag at its step, and each sample translation as text."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    writer = MetricsWriter(run, resume_step=0)
    writer.write(100, {"kind": "train", "loss": 2.5, "learning_rate": 1e-3})
    writer.write(200, {"kind": "validation", "bleu": 21.5}, prefix="validation")
    writer.write_text(200, "validation/sample_0", "ein Hund | a dog | a dog")
    writer.close()
    events = EventAccumulator(str(run.tensorboard_dir)).Reload()
    assert sorted(events.Tags()["scalars"]) == [
        "train/learning_rate", "train/loss", "validation/bleu"
    ]  # fmt: skip
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(100, 2.5)]
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("validation/bleu")] == [(200, 21.5)]
    (sample,) = events.Tensors("validation/sample_0/text_summary")
    assert sample.step == 200
    assert sample.tensor_proto.string_val == [b"ein Hund | a dog | a dog"]


def test_a_validation_point_reads_as_figures_with_the_best_and_early_stopping_s_count():
    stopping = EarlyStopping(patience=3)
    figures = {"loss": 2.345678, "perplexity": 10.4412, "bleu": 21.456, "n": 1014}
    stopping.update(21.456, step=400)
    assert validation_line(400, figures, stopping) == (
        "validation at step 400 (1014 sentences): greedy BLEU 21.46, loss 2.3457, perplexity "
        "10.44; 0 of 3 points without a new best (early stopping)"
    )
    stopping.update(20.0, step=500)
    assert validation_line(500, {**figures, "bleu": 20.0}, stopping) == (
        "validation at step 500 (1014 sentences): greedy BLEU 20.00, loss 2.3457, perplexity "
        "10.44; best 21.46 at step 400; 1 of 3 points without a new best (early stopping)"
    )
    never = EarlyStopping(patience=0)
    never.update(5.0, step=100)
    assert validation_line(100, {**figures, "bleu": 5.0}, never).endswith("perplexity 10.44")
    assert validation_line(100, {"bleu": 5.0}, never) == "validation at step 100: greedy BLEU 5.00"


def test_runs_that_ended_before_are_not_counted_as_training_left(tmp_path, caplog, monkeypatch):
    """`make quickstart` again said "round 1: 2 runs to train, at most 4 min of training left",
    then reused both: each ended at its step cap short of its time budget."""
    from seq2seq.compare import runner

    jobs = []
    for name in ("transformer", "rnnsearch"):
        job = _job(tmp_path, name, 3.0, 120.0)
        job.config.train.update(steps=100, early_stopping_patience=0)
        with job.run.metrics_file.open("a") as metrics:
            metrics.write(json.dumps({"step": 100, "kind": "validation", "elapsed_seconds": 120.0}))
        (job.run.checkpoints_dir / "100").mkdir(parents=True)  # its final checkpoint
        jobs.append(job)
    monkeypatch.setattr(runner, "_train_slice", lambda *_: pytest.fail("it trained again"))
    with caplog.at_level(logging.INFO, logger="seq2seq"):
        assert runner.train_in_slices(jobs, 5.0) is False
    assert [record.getMessage() for record in caplog.records] == [
        "== transformer: finished before, reused",
        "== rnnsearch: finished before, reused",
    ]
