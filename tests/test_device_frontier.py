"""The frontier on an accelerator (``seq2seq.bench.device_frontier``), run on the CPU with tiny
step caps: the same processes, deadline, scoring and records as on a GPU."""

import json
import subprocess
import sys
import tarfile
import time

import pytest

from seq2seq.bench.device_frontier import ROWS, runs_at_once
from seq2seq.bench.timed_run import scoring_rule
from seq2seq.compare.settings import Settings, run_config
from seq2seq.compare.suites import expand_suite, select_runs
from seq2seq.records.run_directory import RunDirectory
from seq2seq.training.trainer import Deadline, train
from tests.conftest import (
    ONE_SEARCH_LOOP,
    REPO,
    SHRINK,
    config_differences,
    subprocess_env,
    tiny_config,
)


def test_runs_at_once_is_the_mean_number_alive_over_each_runs_life():
    runs = [
        {"started_s": 0.0, "ended_s": 100.0},  # with the second for 50 s, the third for 20 s
        {"started_s": 50.0, "ended_s": 150.0},  # with the first for 50 s, the third for 20 s
        {"started_s": 80.0, "ended_s": 100.0},  # alongside both, all its life
        {"started_s": 160.0, "ended_s": 200.0},  # alone
        {"started_s": 210.0, "ended_s": None},  # still running: no figure yet
    ]
    assert runs_at_once(runs) == [1.7, 1.7, 3.0, 1.0, None]


def test_a_signal_to_the_command_stops_its_runs_with_it(monkeypatch):
    """SIGTERM or Ctrl-C to the command ended it at once with status 143 or 130, and its runs
    went on training, holding the accelerator and the command's output."""
    import types

    from seq2seq.bench import device_frontier

    def start(worker, env, now):  # a stand-in run: one that only SIGTERM or SIGKILL ends
        worker.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        worker.started_s, worker.outcome = now, "running"

    def sleep(seconds):  # the signal, while the command polls its runs
        raise KeyboardInterrupt

    clock = types.SimpleNamespace(time=time.time, monotonic=time.monotonic, sleep=sleep)
    monkeypatch.setattr(device_frontier, "start", start)
    monkeypatch.setattr(device_frontier, "time", clock)
    job = types.SimpleNamespace(name="stand-in")
    workers = [device_frontier.Worker(job, None, None) for _ in range(3)]
    written = []
    try:
        with pytest.raises(KeyboardInterrupt):
            device_frontier.run_workers(workers, 2, time.time() + 60, lambda: written.append(1))
        codes = [w.process.poll() for w in workers[:2]]
    finally:
        for worker in workers[:2]:
            worker.process.kill()
    assert codes == [-15, -15]  # SIGTERM: each run saves and stops
    assert [w.outcome for w in workers] == 2 * ["stopped by a signal"] + [
        "not started: stopped by a signal"
    ]
    assert written  # device_frontier.json says so


def test_a_run_that_the_command_stops_is_neither_scored_nor_recorded(tmp_path, monkeypatch):
    """Stopped by the command's SIGTERM (its time was up), a run went on to decode the test
    split and file a record of a run that had not finished, within the 10 s before SIGKILL."""
    import signal

    from seq2seq.bench import timed_run
    from seq2seq.compare import runner
    from seq2seq.training import trainer

    def train(config, run, make_validate, preemption):
        preemption._handle(signal.SIGTERM, None)  # the command's stop, at step 7
        return trainer.RunSummary(7, 1.0, 1.0, 0, preempted=True)

    def evaluate_outcome(outcome, settings):
        raise AssertionError("a run stopped by the command was scored")

    monkeypatch.setattr(trainer, "train", train)
    monkeypatch.setattr(runner, "evaluate_outcome", evaluate_outcome)
    job = timed_run.Job(
        row=ROWS[0], seed_index=0, seeds=1, workdir=str(tmp_path / "runs"),
        records=str(tmp_path / "records"), deadline=time.time() + 60,
    )  # fmt: skip
    result = timed_run.run_job(job)
    assert (result["status"], result["reason"]) == (
        "stopped",
        "stopped by SIGTERM at step 7; not scored",
    )
    assert not (tmp_path / "records").exists()


def test_a_passed_deadline_ends_the_run_with_a_final_validation_and_a_cap(tmp_path):
    config = tiny_config("transformer")
    config.train.steps = 200
    config.eval.every_steps = 5
    config.data.pack = True  # one batch shape: one compile
    points = iter(range(100))
    validate_fn = lambda *args: lambda state: {"bleu": float(next(points))}  # noqa: E731
    deadline = Deadline(time.time() - 1)  # already passed: the first step is the last

    summary = train(config, tmp_path, validate_fn, preemption=deadline)

    assert deadline.passed and not summary.preempted
    assert summary.step == 1 and summary.stop_reason == "cap"
    records = RunDirectory(tmp_path).read_metrics()
    assert [(r["step"], r["bleu"]) for r in records if r["kind"] == "validation"] == [(1, 0.0)]
    assert records[-1]["kind"] == "stop" and records[-1]["reason"] == "cap"
    assert records[-1]["budget"] == "minutes"  # the deadline's: time ran out, not the steps
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["1"]
    # One checkpoint where the rule wants the mean of 5: it is scored by the one it has.
    run = RunDirectory(tmp_path)
    assert scoring_rule(run, config, "average:5") == "average:1"
    assert scoring_rule(run, config, "average:1") == "average:1"
    assert scoring_rule(run, config, "best") == "best"


def _made_up_multi30k(folder, train=400, held_out=24):
    """Multi30k's six files with made-up captions: English words, German their reversal."""
    words = ("a", "man", "dog", "runs", "on", "the", "street", "with", "two", "red", "boat")
    folder.mkdir()
    splits = {"train": train, "val": held_out, "test_2016_flickr": held_out}
    for split, count in splits.items():
        english = [
            " ".join(words[(i * 7 + k * 3 + len(split)) % len(words)] for k in range(3 + i % 6))
            for i in range(count)
        ]
        german = [" ".join(word[::-1] for word in line.split()) for line in english]
        (folder / f"{split}.en").write_text("\n".join(english) + "\n")
        (folder / f"{split}.de").write_text("\n".join(german) + "\n")
    return folder


TINY = [
    "--config.data.tokenizer=word",
    "--config.data.vocab_size=100",
    "--config.data.bucket_width=64",  # one padded length: one RNNsearch step to compile
    "--config.train.steps=10",
    "--config.train.log_every_steps=2",
    "--config.train.early_stopping_patience=100",  # every run ends at its cap
    "--config.checkpoint.every_steps=2",
    "--config.eval.every_steps=5",
    "--config.eval.num_examples=8",
    ONE_SEARCH_LOOP,
    *SHRINK["transformer"],
    *SHRINK["rnnsearch"],
]


def _command(out, workdir, *arguments):
    return [
        sys.executable, "-m", "seq2seq.bench.device_frontier", f"--out={out}",
        f"--workdir={workdir}", *arguments,
    ]  # fmt: skip


@pytest.mark.slow
def test_the_command_trains_scores_and_packs_records_that_compare_reads(tmp_path):
    data = _made_up_multi30k(tmp_path / "multi30k")
    out = tmp_path / "out"
    command = _command(
        out, tmp_path / "work", f"--data={data}", "--seeds=2", "--concurrent=2", "--minutes=5",
        "--beam_size=2", "--max_test_sentences=16", *TINY,
    )  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=400
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "device_frontier.json", "device_frontier.md", "logs.tar.gz", "records.tar.gz",
    ]  # fmt: skip
    summary = json.loads((out / "device_frontier.json").read_text())
    names = {"transformer-small-seed0", "transformer-small-seed1"}
    names |= {"rnnsearch-medium-seed0", "rnnsearch-medium-seed1"}
    assert {run["name"] for run in summary["runs"]} == names
    assert all(run["outcome"] == "ok" and run["stop_reason"] == "cap" for run in summary["runs"])
    for run in summary["runs"]:  # a step's time, and the host's share of it, from the logs
        assert run["step_ms"] > 0 and 0 < run["host_dispatch_ms"] < run["step_ms"], run
    table = (out / "device_frontier.md").read_text()
    assert "| step ms | host ms: input, placing, dispatch | runs at once |" in table
    assert summary["concurrent"] == 2
    # Two at a time: each run shared the machine with one other for much of its life.
    assert all(1.0 < run["runs_at_once"] <= 2.0 + 1e-9 for run in summary["runs"]), summary

    records = tmp_path / "records"
    with tarfile.open(out / "records.tar.gz") as archive:
        archive.extractall(records, filter="data")
    kept = records / "multi30k_frontier_gpu"
    assert {p.name for p in kept.iterdir()} == names
    for name in names:
        run = RunDirectory(kept / name)
        assert not (run.path / "checkpoints").exists()
        config = run.load_config()
        assert config.seed == int(name[-1]) and config.data.dir == str(data.resolve())
        assert config.train.label_smoothing == 0.1  # the frontier suite's, not the override's
        metrics = run.read_metrics()
        assert metrics[-1]["kind"] == "stop" and metrics[-1]["step"] == 10
        provenance = json.loads(run.provenance_file.read_text())["entries"][-1]
        assert provenance["device_kind"] == "cpu"
        result = run.read_eval_result("test_2016_flickr", "average:5")
        # saved every 2 steps and at each validation (5, 10): the newest 5 of 2, 4, 5, 6, 8, 10
        assert result["checkpoint"].endswith("steps 4, 5, 6, 8, 10") and result["beam_size"] == 2
        hypotheses = run.hypotheses_file("test_2016_flickr", "average:5").read_text()
        assert len(hypotheses.splitlines()) == 16

    report = tmp_path / "report"
    rebuilt = subprocess.run(
        [sys.executable, "-m", "seq2seq.compare", f"--records={kept}", f"--workdir={report}",
         "--checkpoint=average:5"],
        cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=300,
    )  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    frontier = json.loads((report / "frontier.json").read_text())
    assert {row["run"] for row in frontier["runs"]} == names


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rows=transformer-huge"], "--rows 'transformer-huge' matches no run"),
        (["--data={empty}"], "lacks train.de"),
        (["--checkpoint=step:7"], "a comparison applies one rule to every run"),
    ],
)
def test_bad_input_is_refused_with_one_line_and_nothing_written(tmp_path, arguments, message):
    (tmp_path / "empty").mkdir()
    data = tmp_path / "data"
    if not any(argument.startswith("--data") for argument in arguments):
        arguments = [*arguments, f"--data={_made_up_multi30k(data)}"]
    arguments = [argument.format(empty=tmp_path / "empty") for argument in arguments]
    out, work = tmp_path / "out", tmp_path / "work"
    done = subprocess.run(
        _command(out, work, *arguments),
        cwd=REPO,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last, done.stderr[-1500:]
    assert not out.exists() and not work.exists()


# What may differ between a device run and the committed CPU run of its row: its caps (the
# device's deadline ends it instead) and where the data lies. Keys added to the config since the
# record was written may differ too, when they hold their default (the behaviour before them).
MAY_DIFFER = {"train.steps", "train.time_budget_minutes", "data.dir"}


@pytest.mark.parametrize("row", ROWS)
def test_the_device_runs_train_what_the_committed_cpu_records_trained(row):
    (spec,) = select_runs(expand_suite("frontier_tuned"), [row], keep_first=False)
    for seed_index in (0, 1):
        config = run_config(spec, Settings(seeds=2), seed_index)
        record = REPO / "docs" / "records" / "multi30k_frontier_tuned" / f"{row}-seed{seed_index}"
        differ = config_differences(config, record)
        assert differ.keys() <= MAY_DIFFER, differ
