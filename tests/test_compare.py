"""The comparison: every run in the report with its own numbers, failures reported, seeds
aggregated, finished runs reused, table3 rows derived from a base config."""

import dataclasses
import importlib.metadata
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
from types import SimpleNamespace

import pytest

from seq2seq import config as config_lib
from seq2seq.compare import runner
from seq2seq.compare.comparison import compare
from seq2seq.compare.grid import make_tuning, scaled_tuned_values
from seq2seq.compare.report import _training_figures, aggregate, describe
from seq2seq.compare.report_sections import provenance_warnings
from seq2seq.compare.settings import Settings
from seq2seq.compare.suites import RunSpec, expand_suite, select_runs, table3_runs
from seq2seq.compare.workdir import LOCK_FILE, foreign_entries
from seq2seq.evaluation.validation import make_validate_fn
from seq2seq.records.run_directory import RunDirectory, RunDirectoryError, held
from seq2seq.training.schedules import build_schedule
from tests.conftest import (
    REPO,
    assert_compare_refuses,
    interruptible,
    subprocess_env,
    tiny_config,
)

TINY_CONFIG = """
from tests.conftest import tiny_config


def get_config():
    config = tiny_config("{model}")
    config.train.steps = 12
    config.train.log_every_steps = 4
    config.checkpoint.every_steps = 12
    config.eval.num_examples = 8
    return config
"""


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    root = tmp_path_factory.mktemp("comparison")
    configs = root / "configs"
    configs.mkdir()
    (configs / "tiny_transformer.py").write_text(TINY_CONFIG.format(model="transformer"))
    (configs / "broken.py").write_text(
        "from seq2seq.config import default_config\n\n\ndef get_config():\n"
        "    config = default_config()\n    config.train.stepz = 3\n    return config\n"
    )
    specs = [
        RunSpec("tiny_transformer", configs / "tiny_transformer.py"),
        RunSpec("broken", configs / "broken.py"),
    ]
    settings = Settings(seeds=2, beam_size=2, alpha=0.6, max_test_sentences=12)
    outcomes, report = compare(specs, root / "work", settings, "test comparison")
    return specs, settings, root / "work", outcomes, report


@pytest.mark.slow
def test_every_run_is_reported_with_the_numbers_of_its_own_records(comparison):
    _, _, workdir, outcomes, _ = comparison
    report = json.loads((workdir / "report.json").read_text())
    assert (
        [run["name"] for run in report["runs"]]
        == [o.name for o in outcomes]
        == [
            "tiny_transformer-seed0",
            "tiny_transformer-seed1",
            "broken-seed0",
            "broken-seed1",
        ]
    )
    for row in report["runs"][:2]:
        run = RunDirectory(row["workdir"])
        result = run.read_eval_result("test")
        last_train = run.read_metrics()[-1]  # the stop record, after the final validation
        assert last_train["kind"] == "stop" and last_train["reason"] == "cap"
        assert row["status"] == "ok" and row["ended"] == "at its step cap"  # no early stopping
        assert row["bleu"] == result["bleu"] and row["chrf"] == result["chrf"]
        assert row["decode_sentences_per_second"] == result["sentences_per_second"]
        assert row["test_sentences"] == result["n"] == 12
        assert row["steps"] == last_train["step"] == 12
        assert row["train_flops"] == last_train["train_flops"] > 0
        assert row["provenance"]["jax"] == importlib.metadata.version("jax")


@pytest.mark.parametrize(
    ("stop", "ended"),
    [
        ({"reason": "cap", "budget": "minutes"}, "at its time cap"),
        ({"reason": "cap", "budget": "steps"}, "at its step cap"),
        ({"reason": "cap"}, "at its cap"),  # a record from before the stop said which
        ({"reason": "converged"}, "converged"),
    ],
)
def test_the_ended_column_says_which_budget_stopped_a_run(stop, ended):
    """The quickstart's runs stopped on their 4.5 minutes at steps 1480 of 2000 and 1136 of
    1300, and the report said "at its cap", as for the steps' cap."""
    records = [
        {"kind": "train", "step": 5, "target_tokens_per_second": 1.0, "elapsed_seconds": 60},
        {"kind": "stop", "step": 5, **stop},
    ]
    assert _training_figures(records)["ended"] == ended


def test_a_run_that_stopped_before_its_first_logged_interval_keeps_its_figures():
    """A run whose early stopping came at step 30, before log_every_steps=50, wrote no train
    record, and its steps, minutes and FLOPs were missing from the report's table."""
    records = [
        {"kind": "validation", "step": 20, "perplexity": 9.0, "bleu": 1.0, "elapsed_seconds": 50},
        {"kind": "validation", "step": 30, "perplexity": 9.5, "bleu": 0.5, "elapsed_seconds": 70},
        {"kind": "stop", "step": 30, "reason": "converged", "elapsed_seconds": 72.0,
         "train_flops": 3.5e12},
    ]  # fmt: skip
    figures = _training_figures(records)
    assert (figures["steps"], figures["train_minutes"], figures["train_flops"]) == (30, 1.2, 3.5e12)
    assert figures["ended"] == "converged" and "target_tokens_per_second" not in figures


def test_a_config_row_counts_its_seeds_by_status_and_says_a_shared_ending_once():
    """A seed stopped by Ctrl-C showed as "1 of 2 failed", and two seeds' "at its step cap"
    as "at its step cap, at its step cap"."""
    row = {"config_name": "t", "ended": "at its step cap"}
    seeds = [{**row, "seed": 0, "status": "ok"}, {**row, "seed": 1, "status": "preempted"}]
    (merged,) = aggregate(seeds)
    assert merged["status"] == "1 of 2 preempted" and merged["ended"] == "at its step cap"
    seeds += [{**row, "seed": 2, "status": "failed", "ended": None}]
    seeds += [{**row, "seed": 3, "status": "unfinished", "ended": None}]
    (merged,) = aggregate(seeds)
    assert merged["status"] == "1 of 4 preempted, 1 failed, 1 unfinished"
    assert merged["ended"] == "at its step cap, at its step cap, —, —"
    (merged,) = aggregate([{**row, "seed": k, "status": "ok"} for k in (0, 1)])
    assert merged["status"] == "ok"


def test_the_report_says_runs_took_turns_only_when_one_had_more_than_one_turn():
    """The quickstart's runs (4.5 minutes each, turns of 5) each trained in one go, one after
    the other, and the report said they took turns, so a slow spell touched both."""
    from seq2seq.compare.report_sections import _turns

    def runs(*slices):
        return [{"off_the_clock": {"tokens_per_second_per_slice": [1.0] * n}} for n in slices]

    assert _turns(runs(1, 1), 5).startswith("Each run fit in one turn of 5 training minutes")
    assert _turns(runs(1, 3), 5).startswith("The runs trained side by side, taking turns of 5")
    assert _turns([{"name": "failed before training"}], 5).startswith("Each run fit")


def test_the_verdict_says_when_the_clock_stopped_runs_before_their_steps():
    """On a busy machine the quickstart's runs stopped at their 4.5-minute cap, at steps 783
    and 673 of 2,000 and 1,300: the verdict (RNNsearch better by 13.39 BLEU) said nothing of
    it, only the "ended" column did."""
    from seq2seq.compare.report_sections import verdict

    def report(budget_minutes, *ended):
        runs = [{"name": f"run{k}", "steps": 700 + k, "ended": e} for k, e in enumerate(ended)]
        settings = {"budget_minutes": budget_minutes, "budget_steps": None, "slice_minutes": 0}
        return {"settings": settings, "verdicts": [], "hardware": ["cpu"], "runs": runs}

    said = "\n".join(verdict(report(None, "at its time cap", "converged", "at its time cap")))
    assert (
        "Stopped by the clock before their configs' steps: `run0` at step 700, `run2` at step "
        "702 reached the time cap (`train.time_budget_minutes`) first"
    ) in said
    for quiet in (report(None, "at its step cap", "converged"), report(5.0, "at its time cap")):
        assert "Stopped by the clock" not in "\n".join(verdict(quiet))  # equal time: by design


@pytest.mark.slow
def test_a_failed_run_is_reported_with_its_reason_and_the_others_still_run(comparison):
    _, _, workdir, outcomes, report_md = comparison
    failed = [o for o in outcomes if o.name.startswith("broken")]
    assert all(o.status == "failed" and "broken.py line 6" in o.reason for o in failed)
    assert all("stepz" in o.reason for o in failed)
    assert all(o.status == "ok" for o in outcomes if o.name.startswith("tiny"))
    text = report_md.read_text()
    assert "## Failed runs" in text and "`broken-seed0`: failed: " in text


@pytest.mark.slow
def test_two_seeds_are_two_different_runs_shown_as_mean_and_std(comparison):
    _, _, workdir, _, report_md = comparison
    report = json.loads((workdir / "report.json").read_text())
    seeds = [run for run in report["runs"] if run["name"].startswith("tiny")]
    assert [run["seed"] for run in seeds] == [0, 1]
    losses = [
        [r["loss"] for r in RunDirectory(run["workdir"]).read_metrics() if r["kind"] == "train"]
        for run in seeds
    ]
    assert losses[0] != losses[1], "two seeds trained the same run"
    row = next(c for c in report["configs"] if c["name"] == "tiny_transformer")
    chrfs = [run["chrf"] for run in seeds]
    assert row["chrf"] == chrfs
    assert row["chrf_stats"]["mean"] == pytest.approx(statistics.mean(chrfs))
    assert row["chrf_stats"]["std"] == pytest.approx(statistics.stdev(chrfs))
    line = next(line for line in report_md.read_text().splitlines() if "tiny_transformer" in line)
    assert "±" in line


@pytest.mark.slow
def test_figures_are_written_and_embedded(comparison):
    _, _, workdir, _, report_md = comparison
    report = json.loads((workdir / "report.json").read_text())
    paths = [path for group in report["figures"].values() for path in group]
    assert any("alignment" in path for path in paths)
    assert {"curves", "bleu_by_length"} <= set(report["figures"])
    text = report_md.read_text()
    for path in paths:
        assert (workdir / path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({path})" in text
    assert foreign_entries(workdir) == []  # a folder the comparison may continue in


@pytest.mark.slow
def test_a_rerun_reuses_finished_runs_and_their_evaluations(comparison):
    specs, settings, workdir, _, _ = comparison
    run = RunDirectory(workdir / "tiny_transformer-seed0")
    metrics_before = run.metrics_file.read_text()
    eval_before = run.eval_result_file("test").stat().st_mtime_ns
    outcomes, _ = compare(specs[:1], workdir, settings, "again")
    assert [o.status for o in outcomes] == ["ok", "ok"]
    assert run.metrics_file.read_text() == metrics_before
    assert run.eval_result_file("test").stat().st_mtime_ns == eval_before


def test_a_run_whose_final_checkpoint_was_never_written_is_trained_again(tmp_path):
    """A Ctrl-C during the final save left the last step as orbax's temporary folder; the
    comparison took the final validation record for a finished run and failed it for good
    ("holds no trained model yet") at every rerun."""
    config = tiny_config("transformer")
    config.train.steps = 150
    run = RunDirectory(tmp_path)
    run.metrics_file.write_text(
        "".join(json.dumps({"step": s, "kind": "validation", "bleu": 1.0}) + "\n"
                for s in (100, 150))
    )  # fmt: skip
    (run.checkpoints_dir / "100").mkdir(parents=True)
    (run.checkpoints_dir / "150.orbax-checkpoint-tmp-1733").mkdir()
    job = SimpleNamespace(run=run, config=config)
    assert not runner.finished(job)
    (run.checkpoints_dir / "150").mkdir()
    assert runner.finished(job)


@pytest.mark.slow
def test_a_sweep_stopped_by_ctrl_c_while_extending_its_runs_reports_what_stands(
    comparison, tmp_path, monkeypatch
):
    """Extended from 12 to 24 steps and stopped by Ctrl-C at step 14, its report said the run
    was "stopped by SIGTERM" and "at its cap" (the stop record of the 12-step budget), and the
    run not reached yet was "ok" with no scores."""
    import shutil

    specs, settings, workdir, _, _ = comparison
    extended = tmp_path / "work"
    shutil.copytree(workdir, extended)

    class CtrlCAt14(runner.Preemption):
        def reached(self, step, elapsed_seconds=0.0):
            if step == 14:  # what Preemption._interrupt does on a Ctrl-C
                self.requested, self.signal_name = True, "Ctrl-C"
            return self.requested

    monkeypatch.setattr(runner, "Preemption", CtrlCAt14)
    longer = dataclasses.replace(settings, overrides=(("train.steps", 24),), slice_minutes=0)
    outcomes, _ = compare(specs[:1], extended, longer, "extended")
    assert [(o.status, o.reason) for o in outcomes] == [
        ("preempted", "stopped by Ctrl-C; rerun to resume"),
        ("unfinished", "not trained to its end yet"),
    ]
    rows = json.loads((extended / "report.json").read_text())["runs"]
    assert [row.get("ended") for row in rows] == [None, None]


def test_sigterm_during_a_slice_says_the_run_stopped_not_that_the_next_slice_resumes_it():
    """It logged "paused: saved step 6; the next slice resumes it" as the command exited."""
    pause = runner.PauseAt(5.0)
    pause._handle(signal.SIGTERM, None)
    assert (pause.message, pause.signal_name) == (
        "SIGTERM: saved step %d; rerun to resume",
        "SIGTERM",
    )
    assert pause.requested and not pause.paused
    reached = runner.PauseAt(5.0)
    assert reached.reached(7, elapsed_seconds=300.0) and reached.paused
    assert reached.message == "paused: saved step %d; the next slice resumes it"


@pytest.mark.parametrize("slices", [True, False], ids=["at a slice's pause", "at its end"])
@pytest.mark.parametrize(
    ("raised", "name"),
    [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")],
    ids=["SIGTERM", "Ctrl-C"],
)
def test_a_signal_while_a_run_saves_stops_the_comparison_before_the_next_run(
    tmp_path, monkeypatch, slices, raised, name
):
    """A SIGTERM or Ctrl-C that came while the first run saved its slice's pause was logged as
    "paused: the next slice resumes it", and one during its final validation or checkpoint as
    "it finished first"; either way the comparison went on to train the second run (and a
    scheduler's SIGKILL later lost its progress)."""
    from seq2seq import cli
    from seq2seq.training.trainer import RunSummary

    trained, stops, sent = [], [], []

    def train(config, run, make_validate, preemption):  # the signal lands as the run saves
        trained.append(run.path.name)
        stops.append(preemption)
        paused = isinstance(preemption, runner.PauseAt)
        if paused:
            assert preemption.reached(5, elapsed_seconds=preemption.seconds)
        preemption._handle(signal.SIGTERM, None)
        preemption.signal_name = name  # as Preemption._interrupt sets it for Ctrl-C
        return RunSummary(5, 1.0, 1.0, 0, preempted=paused, stop_reason="" if paused else "cap")

    def raise_signal(signum):  # what the handlers that cli.run installs then raise
        sent.append(signum)
        raise cli.Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    monkeypatch.setattr(runner, "train", train)
    monkeypatch.setattr(runner.signal, "raise_signal", raise_signal)
    jobs = [
        SimpleNamespace(
            run=RunDirectory(tmp_path / name), config=tiny_config(), status="ok", reason=""
        )
        for name in ("first", "second")
    ]
    if slices:
        assert runner.train_in_slices(jobs, slice_minutes=0.5)  # True: stopped, rerun
        assert [(job.status, job.reason) for job in jobs] == [
            ("preempted", f"stopped by {name}; rerun to resume"),
            ("ok", ""),
        ]
        if raised == signal.SIGTERM:  # Ctrl-C's own message is set by Preemption._interrupt
            assert stops[0].message == "SIGTERM: saved step %d; rerun to resume"
        assert not sent
    else:
        with pytest.raises(KeyboardInterrupt) as stopped:
            runner.train_in_slices(jobs, slice_minutes=0)
        assert sent == [raised]
        assert isinstance(stopped.value, cli.Terminated) == (raised == signal.SIGTERM)
        assert jobs[0].status == "ok"  # it finished: its final checkpoint was saved
    assert trained == ["first"]


def test_table3_rows_follow_the_paper_scaled_to_the_base():
    base_path = REPO / "configs" / "quickstart_transformer.py"
    base = config_lib.load_config_file(base_path)
    runs = {spec.name.split("-", 1)[1]: spec for spec in table3_runs(base_path, base)}
    assert {"base", "A_h1", "A_h2", "A_h8", "A_h16", "B_dk_half", "E_learned"} <= set(runs)
    for name in ("A_h1", "A_h8", "A_h16"):
        overrides = dict(runs[name].overrides)
        heads = overrides["model.transformer.num_heads"]
        assert overrides["model.transformer.d_k"] * heads == base.model.transformer.d_model
    for spec in runs.values():  # every row is a valid config
        config = config_lib.load_config_file(spec.config)
        for key, value in spec.overrides:
            config_lib.set_value(config, key, value)
        config_lib.validate(config)


@pytest.mark.parametrize("stem", ["multi30k_transformer", "quickstart_transformer"])
def test_table3_d_model_rows_scale_the_peak_rate_as_eq3(stem):
    """Eq. 3 multiplies every row's rate by d_model^-0.5: a row of half the base's width peaks at
    sqrt(2) times the base's rate, whether the base states its peak (warmup_rsqrt) or Eq. 3's
    multiplier (transformer)."""
    base_path = REPO / "configs" / f"{stem}.py"
    specs = table3_runs(base_path, config_lib.load_config_file(base_path))
    runs = {spec.name.split("-", 1)[1]: spec for spec in specs}

    def peak_rate(row: str) -> float:
        config = config_lib.load_config_file(base_path)
        for key, value in runs[row].overrides:
            config_lib.set_value(config, key, value)
        schedule = build_schedule(config.train, config.model.transformer.d_model)
        return float(schedule(config.train.warmup_steps - 1))

    base = peak_rate("base")
    assert peak_rate("C_dmodel_half") == pytest.approx(base * 2**0.5, rel=1e-5)
    assert peak_rate("C_dmodel_double") == pytest.approx(base / 2**0.5, rel=1e-5)
    assert peak_rate("C_dff_double") == pytest.approx(base, rel=1e-6)  # d_model unchanged


def test_rows_pick_runs_by_name_or_pattern_and_table3_keeps_its_base():
    base_path = REPO / "configs" / "quickstart_transformer.py"
    runs = table3_runs(base_path, config_lib.load_config_file(base_path))
    picked = [spec.name.split("-", 1)[1] for spec in select_runs(runs, ["D_*", "E_learned"], True)]
    assert picked == ["base", "D_drop0.2", "D_ls0.0", "D_ls0.2", "E_learned"]
    assert [s.name for s in select_runs(expand_suite("multi30k"), ["*rnnsearch"], False)] == [
        "multi30k_rnnsearch"
    ]
    with pytest.raises(ValueError, match="--rows 'F_\\*' matches no run; the runs are: base, A_h1"):
        select_runs(runs, ["F_*"], True)
    # The frontier's sizes share their short names between families: the error lists full ones.
    with pytest.raises(ValueError, match="the runs are: transformer-small, transformer-medium, "):
        select_runs(expand_suite("frontier_tuned"), ["transformer-huge"], False)


def test_a_rows_what_column_names_the_commands_overrides_after_the_rows_own_values():
    (row,) = select_runs(expand_suite("frontier"), ["transformer-large"], False)
    assert "learning_rate 0.001" in row.description  # the suite's value for this size
    overrides = (("model.transformer.dropout_rate", 0.3), ("train.learning_rate", 0.0005))
    described = describe(row.description, overrides)
    assert described.startswith(row.description)  # then what the run actually used
    assert described.endswith(
        "; --config: model.transformer.dropout_rate=0.3, train.learning_rate=0.0005"
    )
    assert describe(row.description, ()) == row.description
    assert describe("", overrides) == ""  # suites without a "what" column stay without one


def test_named_suites_expand_to_existing_configs():
    assert [s.name for s in expand_suite("quickstart")] == [
        "quickstart_transformer",
        "quickstart_rnnsearch",
    ]
    assert all(spec.config.exists() for spec in expand_suite("multi30k"))
    with pytest.raises(ValueError, match="needs --base"):
        expand_suite("table3")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--suite", "quickstart", "--configs", "configs/quickstart_rnnsearch.py"], "not both"),
        ([], "name the runs: --suite NAME (e.g. --suite quickstart) or --configs A.py B.py"),
        (["--suite", "table3"], "--suite table3 needs --base"),
        (["--configs", "configs/quickstart_transformer.py", "--rows", "base"], "--rows picks"),
        (["--configs", "configs/quickstart_transformer.py", "--config.train.stepz=3"], "stepz"),
        (
            ["--configs", "configs/quickstart_transformer.py", "--config.train.dtype=float8"],
            "quickstart_transformer: config.train.dtype='float8' is not one of",
        ),  # a value every run refuses: one line, and no report of failed runs
        # found before any run trains, not after each one has:
        (["--configs", "configs/nope.py"], "--configs: no config file at configs/nope.py"),
        # decoding's values are used only after training: checked before it
        (
            ["--configs", "configs/quickstart_transformer.py", "--beam_size", "0"],
            "--beam_size 0 must be at least 1 (1: greedy)",
        ),
        (["--configs", "configs/quickstart_transformer.py", "--alpha=-1"], "--alpha -1.0 must be"),
        (
            ["--configs", "configs/quickstart_transformer.py", "--max_test_sentences=-3"],
            "--max_test_sentences -3 must be >= 0 (0: all of them)",
        ),
        (
            ["--configs", "configs/quickstart_transformer.py", "--split", "nosuch"],
            "quickstart_transformer: --split: unknown split 'nosuch'; use a role",
        ),
        (
            [
                "--configs",
                "configs/quickstart_transformer.py",
                "--checkpoint",
                "average:9",
                "--config.checkpoint.keep=2",
            ],
            "averages the last 9 checkpoints but its runs keep 2 (checkpoint.keep); lower K",
        ),  # fmt: skip
        (
            ["--configs", "configs/quickstart_transformer.py", "--config.mesh.data=2"],
            "quickstart_transformer: config.mesh.data=2 x mesh.fsdp=1 x mesh.tensor=1 makes 2 "
            "devices, but the job has 1; set mesh.data=-1",
        ),  # each run used to fail once started
        (
            [
                "--configs",
                "configs/quickstart_transformer.py",
                "--config.data.sentences_per_batch=3",
                "--config.train.grad_accum_steps=2",
            ],
            "quickstart_transformer: data.sentences_per_batch=3 is not a multiple of 2 "
            "(data-parallel devices x train.grad_accum_steps x hosts); set "
            "data.sentences_per_batch=4, or change one of the others",
        ),  # fmt: skip (each run failed once started, and an empty report was written)
        # records: the rule they were scored under, one mode at a time, each folder once
        (
            ["--records", "docs/records/multi30k_ende"],
            "no run is scored under --checkpoint latest; these records hold scores under "
            "average:5: pass --checkpoint average:5",
        ),
        (["--records", "docs/records/multi30k_ende", "--checkpoint", "1000"], "use one of"),
        (
            ["--records", "docs/records/multi30k_ende", "--devices", "a,b"],
            "--records and --devices are different modes; pass one of",
        ),
        (
            [
                "--directions",
                "docs/records/multi30k_ende,docs/records/multi30k_ende",
                "--checkpoint",
                "average:5",
            ],
            "--directions: two folders hold en->de; give each direction once",
        ),  # fmt: skip
        (
            ["--devices", "docs/records/multi30k_ende,docs/records/../records/multi30k_ende"],
            "are one folder; give the records of each device",
        ),
        (["--directions", "tests,docs"], "--directions tests holds no run folders"),
        (  # it wrote a verdict "across directions" of one
            ["--directions", "docs/records/multi30k_ende"],
            "--directions takes two or more record folders, one direction each; got 1 (one "
            "direction's report: --records FOLDER)",
        ),
    ],
)
def test_bad_invocations_end_with_one_line(tmp_path, arguments, message):
    assert_compare_refuses(tmp_path, arguments, message)


def test_a_stem_the_corpus_lacks_is_refused_before_any_run_trains(tmp_path):
    """A corpus whose validation and test stems are named otherwise than the config's would
    fail every run after its tokenizer and training; the comparison names the key at once."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for stem in ("train", "valid", "test2016"):
        (corpus / f"{stem}.fr").write_text("un chien\n")
        (corpus / f"{stem}.de").write_text("ein Hund\n")
    work = tmp_path / "work"
    work.mkdir()
    arguments = ["--configs", "configs/multi30k_transformer.py", "--budget_steps", "4",
                 f"--config.data.dir={corpus}", "--config.data.src_lang=fr"]  # fmt: skip
    assert_compare_refuses(  # the config's target language (en) is not there at all
        work, arguments, f"{corpus} has both a .fr and a .en file (its files' languages: de, fr)"
    )
    arguments.append("--config.data.tgt_lang=de")
    assert_compare_refuses(
        work, arguments, "multi30k_transformer: data.eval_split='val': no val.fr and val.de in"
    )
    assert_compare_refuses(
        work,
        [*arguments, "--config.data.eval_split=valid"],
        "multi30k_transformer: --split: data.test_split='test_2016_flickr': no "
        "test_2016_flickr.fr and test_2016_flickr.de in "
        f"{corpus} (its fr-de splits: test2016, train, valid); pass --split=test2016",
    )


def test_a_comparison_whose_every_run_failed_says_so_and_exits_non_zero(tmp_path):
    """A config that builds but cannot train (its corpus is missing: a machine without the data
    fails only the runs that read it) fails its runs, and the report says why."""
    broken = tmp_path / "broken.py"
    broken.write_text(
        "from seq2seq.config import load_config_file\n\n\ndef get_config():\n"
        f"    config = load_config_file({str(REPO / 'configs' / 'quickstart_transformer.py')!r})\n"
        "    config.data.source = 'text'\n"
        f"    config.data.dir = {str(tmp_path / 'no_corpus_here')!r}\n"
        "    return config\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.compare", "--configs", str(broken),
         "--workdir", str(tmp_path / "work"), "--budget_steps", "4"],
        cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: every run failed;") and "report.md" in last, result.stderr
    assert "no_corpus_here" in (tmp_path / "work" / "report.md").read_text()


def test_a_config_file_that_fails_is_refused_before_anything_is_written(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def get_config():\n    raise ValueError('no such model')\n")
    (tmp_path / "work").mkdir()
    assert_compare_refuses(
        tmp_path / "work",
        ["--configs", str(broken), "--budget_steps", "4"],
        "broken.py line 2: ValueError: no such model; fix the config file (nothing was trained)",
    )


def test_help_says_where_the_config_keys_are_instead_of_listing_the_default_config():
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.compare", "--help"],
        cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )  # fmt: skip
    shown = result.stdout + result.stderr
    assert "--config: --config.KEY=VALUE overrides applied to every run" in shown
    assert "seq2seq/config.py" in " ".join(shown.split())
    # A key deep in the default config: listed, it would be one of about 120 lines of it.
    assert "tokenizer_sample_size" not in shown
    assert "--budget_minutes" in shown and "--tune" in shown  # the command's own flags stay


def test_a_folder_of_other_things_is_refused_and_a_comparisons_own_is_not(tmp_path):
    comparison = tmp_path / "comparison"
    for name in ("report.md", "report.json", "figures/curves.png", "tuning/small/lr0.1/x"):
        (comparison / name).parent.mkdir(parents=True, exist_ok=True)
        (comparison / name).write_text("")
    (comparison / "transformer-seed0" / "checkpoints").mkdir(parents=True)  # a run started
    (comparison / "rnnsearch").mkdir()  # a run not started yet
    (comparison / "rnnsearch-big").mkdir()  # a run, with a researcher's notes beside it
    (comparison / "rnnsearch-big" / "config.json").write_text("{}")
    (comparison / "rnnsearch-big" / "notes.txt").write_text("diverged at 3k?")
    (comparison / ".ipynb_checkpoints").mkdir()
    assert foreign_entries(comparison) == []
    for name in ("notes.txt", "data/train.en", "report.html"):
        (comparison / name).parent.mkdir(exist_ok=True)
        (comparison / name).write_text("")
    assert foreign_entries(comparison) == ["data/", "notes.txt", "report.html"]
    # a folder of comparisons: each is a folder no comparison writes into another
    assert foreign_entries(tmp_path) == ["comparison/"]


def test_a_second_comparison_in_the_same_folder_is_refused_before_it_trains(tmp_path):
    """Its runs' training would be refused one by one, and its report written over the first's."""
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "tiny.py").write_text(TINY_CONFIG.format(model="transformer"))
    workdir = (tmp_path / "work").resolve()
    workdir.mkdir()
    with held(workdir / LOCK_FILE, "unused"), pytest.raises(RunDirectoryError) as error:
        compare([RunSpec("tiny", configs / "tiny.py")], workdir, Settings(), "second")
    assert str(error.value) == (
        f"{workdir} is being compared by process {os.getpid()} on {socket.gethostname()}; wait "
        "for it to finish (or stop it), then rerun to continue"
    )
    assert [p.name for p in workdir.iterdir()] == [LOCK_FILE]


def test_a_workdir_that_is_a_file_is_refused_in_one_line(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for arguments in (["--records", "docs/records/multi30k_ende"], ["--suite", "quickstart"]):
        result = subprocess.run(
            [sys.executable, "-m", "seq2seq.compare", *arguments, "--workdir", str(notes / "x")],
            cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=120,
        )  # fmt: skip
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [
            f"error: --workdir {notes / 'x'} lies under {notes}, which is a file, not a "
            "directory; pass a new folder or a comparison's (the file was left as it is)"
        ]
        assert notes.read_text() == "mine\n"


def test_runs_made_under_different_versions_or_changed_midway_are_flagged():
    def made_by(jax, changes=()):
        return {"jax": jax, "device_kind": "cpu", "commit": "abc", "changed_during_run": changes}

    rows = [
        {"name": "a", "provenance": made_by("0.10.2")},
        {"name": "b", "provenance": made_by("0.9.0", ["flax 0.11.0 -> 0.12.8"])},
        {"name": "c"},  # no record: nothing to compare
    ]
    assert provenance_warnings(rows) == [
        "runs were produced under different jax versions: 0.10.2, 0.9.0",
        "`b` changed between its starts: flax 0.11.0 -> 0.12.8",
    ]
    assert provenance_warnings(rows[:1]) == []


@pytest.mark.slow
def test_checkpoint_best_scores_each_runs_best_validated_step(tmp_path, monkeypatch):
    # Validation BLEU that peaks before the end, so that scoring the latest step fails the test.
    scores = {4: 10.0, 8: 30.0, 12: 20.0}

    def validate_with_scores(*args):
        validate = make_validate_fn(*args)
        return lambda state: {**validate(state), "bleu": scores[int(state.step)]}

    monkeypatch.setattr(runner, "make_validate_fn", validate_with_scores)
    config_file = tmp_path / "tiny_rnnsearch.py"
    config_file.write_text(
        TINY_CONFIG.format(model="rnnsearch")
        + "\n\n_base = get_config\n\n\ndef get_config():\n    config = _base()\n"
        "    config.checkpoint.every_steps = 4\n    config.eval.every_steps = 4\n"
        "    return config\n"
    )
    settings = Settings(beam_size=1, max_test_sentences=8, checkpoint="best")
    outcomes, report = compare(
        [RunSpec("tiny_rnnsearch", config_file)], tmp_path / "work", settings, "best"
    )
    run = outcomes[0].run
    validated = {r["step"]: r["bleu"] for r in run.read_metrics() if r["kind"] == "validation"}
    assert sorted(validated) == [4, 8, 12]
    best = max(validated, key=lambda step: (validated[step], step))
    assert validated == scores and best == 8
    assert outcomes[0].result["checkpoint"] == f"step {best}"
    text = report.read_text()
    assert "checkpoint: each run's best by validation BLEU" in text
    assert f"Checkpoints scored: `tiny_rnnsearch` step {best}." in text

    # The same runs scored by the mean of their last two checkpoints: decoded anew into a file
    # of its own (the best step's scores stay as they were), then reused by a rerun.
    split = outcomes[0].config.data.test_split
    best_scores = run.eval_result_file(split, "best").read_text()
    averaged = dataclasses.replace(settings, checkpoint="average:2")
    outcomes, report = compare(
        [RunSpec("tiny_rnnsearch", config_file)], tmp_path / "work", averaged, "average"
    )
    saved = sorted(int(p.name) for p in run.checkpoints_dir.iterdir() if p.name.isdigit())
    scored = f"average of the last 2: steps {saved[-2]}, {saved[-1]}"
    assert outcomes[0].result["checkpoint"] == scored
    assert "checkpoint: the parameter mean of each run's last 2" in report.read_text()
    assert run.eval_result_file(split, "best").read_text() == best_scores
    eval_json = run.eval_dir / f"{split}@average2.json"
    assert json.loads(eval_json.read_text())["checkpoint"] == scored
    written = eval_json.stat().st_mtime_ns
    compare([RunSpec("tiny_rnnsearch", config_file)], tmp_path / "work", averaged, "again")
    assert eval_json.stat().st_mtime_ns == written


@pytest.mark.parametrize("rule", ["12", "average", "mean:5"])
def test_a_comparison_applies_one_checkpoint_rule_to_every_run(rule):
    with pytest.raises(ValueError, match=r"use one of latest, best or average:K"):
        Settings(checkpoint=rule)


def test_an_average_of_no_checkpoint_says_k_must_be_at_least_one():
    with pytest.raises(ValueError, match=r"'average:0' averages no checkpoint; K must be at least"):
        Settings(checkpoint="average:0")  # it was named with the rules, as if K had no bound


def test_x_factors_over_the_tuned_suite_name_each_tuned_value_they_scale():
    # The committed trials were x0.5/x1 of --suite frontier's rows; over frontier_tuned's rows
    # the same factors scale values a tuning already chose, which the command says.
    tuned = expand_suite("frontier_tuned")
    scaled = make_tuning(
        ["train.learning_rate=x0.5,x1", "model.dropout_rate=0.1,0.3"], None, steps=10
    )
    assert scaled_tuned_values(tuned, scaled) == [
        "transformer-medium's train.learning_rate 0.002",
        "rnnsearch-large's train.learning_rate 0.003",
    ]
    relative_dropout = make_tuning(["model.dropout_rate=x0.5,x1"], None, steps=10)
    assert scaled_tuned_values(tuned, relative_dropout) == [
        "transformer-medium's model.transformer.dropout_rate 0.3",
        "transformer-large's model.transformer.dropout_rate 0.3",
    ]
    # --suite frontier's rows of the same names hold the untuned values, which the trials scaled.
    assert scaled_tuned_values(expand_suite("frontier"), scaled) == []
    assert scaled_tuned_values(expand_suite("frontier"), relative_dropout) == []
    # Listed values replace the row's outright: nothing is scaled.
    listed = make_tuning(["train.learning_rate=1e-3,2e-3"], None, steps=10)
    assert scaled_tuned_values(tuned, listed) == []


@pytest.mark.slow
def test_ctrl_c_to_a_report_from_records_does_not_promise_a_continuation(tmp_path):
    """It printed training's line, "what had finished is kept; rerun the same command to
    continue": a report from records keeps nothing to continue from."""
    records = REPO / "docs" / "records" / "multi30k_frontier_tuned"
    command = [sys.executable, "-m", "seq2seq.compare", "--records", str(records),
               "--workdir", str(tmp_path / "report"), "--checkpoint", "average:5"]  # fmt: skip
    process = subprocess.Popen(
        interruptible(command), cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    while not (line := process.stderr.readline()).startswith("== significance"):
        assert line, "it ended before its bootstrap"  # minutes of resampling follow this line
    process.send_signal(signal.SIGINT)
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 130
    assert errors.strip().splitlines()[-1] == (
        "interrupted: nothing to continue (a report from records is built afresh); rerun"
    )


def test_hyperparameters_that_differ_run_down_the_page_when_there_are_more_keys_than_runs():
    """The quickstart's two runs differed in 22 keys: a table 23 columns wide."""
    from seq2seq.compare.report_sections import hyperparameter_table

    two_families = {
        "t": {"model.name": "transformer", "model.transformer.d_model": 128},
        "r": {"model.name": "rnnsearch", "model.rnnsearch.embedding_size": 64},
    }
    assert hyperparameter_table(two_families).splitlines() == [
        "| key | t | r |",
        "|---|---|---|",
        "| model.name | transformer | rnnsearch |",
        "| model.rnnsearch.embedding_size | — | 64 |",
        "| model.transformer.d_model | 128 | — |",
    ]
    seeds = {f"s{i}": {"train.learning_rate*": rate} for i, rate in enumerate((1, 2, 3))}
    assert hyperparameter_table(seeds).splitlines()[:3] == [
        "| run | train.learning_rate* |",
        "|---|---|",
        "| s0 | 1 |",
    ]


def test_each_seeds_folder_is_named_by_the_seed_it_trains(tmp_path):
    """``--seeds 2 --config.seed=5`` trained seeds 5 and 6 in folders ``-seed0`` and ``-seed1``;
    the folders now say the seeds, as the committed records' names do."""
    from seq2seq.bench.timed_run import Job

    spec = RunSpec("quickstart_rnnsearch", REPO / "configs" / "quickstart_rnnsearch.py")
    moved = Settings(seeds=2, overrides=(("seed", 5),))
    outcomes = [runner.prepare(spec, moved, k, tmp_path) for k in range(2)]
    assert [(o.name, o.seed, o.config.seed) for o in outcomes] == [
        ("quickstart_rnnsearch-seed5", 5, 5), ("quickstart_rnnsearch-seed6", 6, 6)
    ]  # fmt: skip
    assert outcomes[1].run.path == tmp_path / "quickstart_rnnsearch-seed6"
    alone = runner.prepare(spec, Settings(overrides=(("seed", 5),)), 0, tmp_path)
    assert (alone.name, alone.seed) == ("quickstart_rnnsearch", 5)  # one seed: no suffix
    broken = RunSpec("broken", tmp_path / "broken.py")
    (tmp_path / "broken.py").write_text("def get_config():\n    raise ValueError('no')\n")
    failed = [runner.prepare(broken, moved, k, tmp_path) for k in range(2)]
    assert [(o.name, o.status) for o in failed] == [
        ("broken-seed0", "failed"), ("broken-seed1", "failed")
    ]  # fmt: skip
    job = Job("transformer-small", 1, 2, str(tmp_path), str(tmp_path), 0.0, (("seed", 5),))
    assert job.name == "transformer-small-seed6"  # make device-frontier's worker of that run
    assert Job("transformer-small", 1, 2, "w", "r", 0.0).name == "transformer-small-seed1"


@pytest.mark.parametrize("inside", ["", "report"])
def test_a_report_folder_inside_the_records_it_reads_is_refused(tmp_path, inside):
    """``--records X --workdir X`` wrote frontier.md, frontier.json and figures/ among the
    committed records."""
    import shutil
    import subprocess
    import sys

    records = tmp_path / "multi30k_ende"
    shutil.copytree(REPO / "docs" / "records" / "multi30k_ende", records)
    before = sorted(p.relative_to(records) for p in records.rglob("*"))
    workdir = records / inside
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.compare", "--records", str(records), "--workdir",
         str(workdir), "--checkpoint", "average:5"],
        cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --workdir {workdir} is inside the records it reads (--records {records}): the "
        "report would be written among them; pass another folder, e.g. --workdir "
        "runs/multi30k_ende-report"
    )
    assert sorted(p.relative_to(records) for p in records.rglob("*")) == before


def test_the_folder_suggested_for_the_report_is_not_among_the_records(tmp_path, monkeypatch):
    """Records kept in ``runs/`` itself were told "e.g. --workdir runs/runs", inside them."""
    import tempfile
    from pathlib import Path

    from seq2seq.compare.__main__ import _check_report_outside_records

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    flag = SimpleNamespace(records="runs", directions=None, devices=None, workdir="runs/report")
    with pytest.raises(ValueError) as refused:
        _check_report_outside_records(flag, "--records")
    suggested = Path(tempfile.gettempdir()) / "runs-report"
    assert str(refused.value).endswith(f"e.g. --workdir {suggested}")
