"""What makes a comparison fair: validation at the same training minutes, runs that take turns,
no run reused after its optimisation changed, no scored split read before scoring, and a report
that opens with a computed verdict."""

import json
import math

import pytest

from seq2seq.compare import verdict
from seq2seq.compare.comparison import compare
from seq2seq.compare.runner import RunOutcome
from seq2seq.compare.settings import Settings
from seq2seq.compare.suites import RunSpec
from seq2seq.config import ConfigError
from seq2seq.data.pipeline import load_pairs
from seq2seq.evaluation import significance
from seq2seq.records import provenance
from seq2seq.records.run_directory import RunDirectory
from tests.conftest import REPO, assert_compare_refuses, tiny_config

PERIOD_MINUTES = 0.04  # 2.4 s: several tiny steps, so each interval ends within one step
BUDGET_MINUTES = 0.13

TIMED_CONFIG = """
from tests.conftest import tiny_config


def get_config():
    config = tiny_config("{model}")
    config.train.steps = 100_000  # the time budget ends every run
    config.train.time_budget_minutes = {budget}
    config.train.log_every_steps = 5
    config.checkpoint.every_steps = 0
    config.checkpoint.every_minutes = {period}
    config.eval.every_minutes = {period}
    config.eval.num_examples = 4
    config.decode.max_extra_length = 5
    return config
"""


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    """Both tiny models under one time budget, validated by minutes, in slices of 0.05 min."""
    root = tmp_path_factory.mktemp("timed")
    specs = []
    for model in ("transformer", "rnnsearch"):
        path = root / f"tiny_{model}.py"
        text = TIMED_CONFIG.format(model=model, budget=BUDGET_MINUTES, period=PERIOD_MINUTES)
        path.write_text(text)
        specs.append(RunSpec(f"tiny_{model}", path))
    settings = Settings(beam_size=1, max_test_sentences=6, slice_minutes=0.05)
    outcomes, report = compare(specs, root / "work", settings, "timed")
    return specs, settings, root / "work", outcomes, report


@pytest.mark.slow
def test_every_model_is_validated_at_the_same_training_minutes(timed):
    *_, outcomes, _ = timed
    period = PERIOD_MINUTES * 60
    marks = {}
    for outcome in outcomes:
        records = outcome.run.read_metrics()
        step_seconds = max(
            (b["elapsed_seconds"] - a["elapsed_seconds"]) / (b["step"] - a["step"])
            for a, b in zip(records, records[1:], strict=False)
            if b["step"] > a["step"]
        )
        times = [r["elapsed_seconds"] for r in records if r["kind"] == "validation"]
        # Each validation but the final one lies a step after a multiple of the period (a
        # step-based interval would put it anywhere in the period). The step times are means
        # over a logging interval (5 steps), which hide one slow step on a busy machine (CI
        # beside other work once measured 0.83 s against a mean of 0.28 s), so the bound is a
        # whole logging interval: still well under the period.
        for seconds in times[:-1]:
            late = seconds - math.floor(seconds / period) * period
            assert late <= max(5 * step_seconds, 0.5), (seconds, step_seconds)
        # The final validation (the budget's end) may fall in the last mark's period.
        marks[outcome.name] = sorted({math.floor(seconds / period) for seconds in times})
    first, second = marks.values()
    assert first == second == list(range(1, len(first) + 1)) and len(first) >= 2


@pytest.mark.slow
def test_runs_take_turns_in_slices(timed):
    *_, outcomes, _ = timed
    starts = {o.name: [e["started"] for e in provenance.read_entries(o.run.path)] for o in outcomes}
    first, second = starts.values()
    assert len(first) >= 3 and len(second) >= 3  # budget 0.13 min in slices of 0.05
    assert second[0] <= first[-1] and first[1] >= second[0]  # B began before A's second slice


@pytest.mark.slow
def test_the_report_opens_with_the_verdict_and_says_what_was_read(timed):
    *_, workdir, outcomes, report_md = timed
    report = json.loads((workdir / "report.json").read_text())
    (entry,) = report["verdicts"]
    assert (entry["a"], entry["b"]) == ("tiny_transformer", "tiny_rnnsearch")
    bleu = entry["BLEU"]
    assert {"difference", "ci95", "p_value"} <= set(bleu)
    scores = [o.result["bleu"] for o in outcomes]
    assert bleu["difference"] == pytest.approx(scores[0] - scores[1])
    text = report_md.read_text()
    assert text.splitlines()[2] == "## Verdict" and entry["sentence"] in text
    bleu_line, chrf_line = text.splitlines()[4:6]  # each sentence names its metric once
    assert bleu_line == f"- {entry['sentence']}" and chrf_line == f"  {entry['chrf_sentence']}"
    assert chrf_line.count("chrF") == 1
    from seq2seq.compare.__main__ import _summary  # what the command prints at its end

    printed = _summary(report_md).splitlines()
    assert printed[:2] == [bleu_line, chrf_line] and printed[3].startswith("| run |")
    assert report["checkpoint_rule"]["rule"] == "latest"
    assert report["splits"]["scored"] == ["test"]
    assert report["splits"]["scored_split_read_before_scoring"] == []
    assert "The scored split was never read while training, validating or tuning." in text
    for row in report["runs"]:
        assert row["off_the_clock"]["compile"] > 0 and row["validation_points"] >= 3
        assert row["workdir"].startswith("/")  # found from wherever the report is read


@pytest.mark.slow
def test_a_changed_learning_rate_is_refused_before_anything_trains(timed):
    specs, settings, workdir, outcomes, _ = timed
    trained = {o.name: o.run.metrics_file.read_text() for o in outcomes}
    changed = Settings(overrides=(("train.learning_rate", 0.5),), beam_size=1, max_test_sentences=6)
    with pytest.raises(ConfigError, match=r"config\.train\.learning_rate: 1\.0 -> 0\.5"):
        compare(specs, workdir, changed, "changed")
    assert {o.name: o.run.metrics_file.read_text() for o in outcomes} == trained
    assert json.loads((workdir / "report.json").read_text())["title"] == "timed"


def test_scoring_the_validation_split_under_tuning_is_refused_before_training(tmp_path, multi30k):
    assert_compare_refuses(
        tmp_path,
        [
            "--suite", "multi30k", "--split", "validation", "--tune",
            "train.label_smoothing=0.0,0.1", "--tune_minutes", "1",
        ],
        "multi30k_transformer: --split validation resolves to 'val', the split it validates",
    )  # fmt: skip


def test_scoring_the_validation_split_is_refused_without_tuning_too(tmp_path):
    assert_compare_refuses(
        tmp_path,
        ["--configs", str(REPO / "configs" / "quickstart_transformer.py"), "--split", "validation"],
        "--split validation resolves to 'validation', the split it validates",
    )


def _validation_run(path, points):
    """A run folder whose metrics.jsonl holds validations at (seconds, step, FLOPs, BLEU)."""
    run = RunDirectory(path)
    run.path.mkdir(parents=True)
    records = [
        {"kind": "validation", "elapsed_seconds": s, "step": n, "train_flops": f, "bleu": b}
        for s, n, f, b in points
    ]
    run.metrics_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def test_equal_horizons_pair_the_validations_due_at_the_same_minute(tmp_path):
    """Both runs validated at 5 and 10 training minutes, the second a step past each mark:
    at equal minutes both are read at 10; at equal steps each at its last point within the slower
    run's steps; at equal FLOPs within the smaller count."""
    spec = RunSpec("x", tmp_path / "x.py")
    fast = _validation_run(tmp_path / "fast", [(300.0, 900, 3e12, 20.0), (600.0, 1800, 6e12, 30.0)])
    slow = _validation_run(tmp_path / "slow", [(300.4, 400, 4e12, 22.0), (600.5, 800, 8e12, 28.0)])
    outcomes = [RunOutcome("fast", spec, 0, fast), RunOutcome("slow", spec, 0, slow)]
    rows = {row["axis"]: row for row in verdict.horizons(outcomes)}
    minutes = rows["training minutes"]
    assert minutes["horizon"] == 10.0
    assert minutes["runs"] == {
        "fast": {"bleu": 30.0, "at": 10.0},
        "slow": {"bleu": 28.0, "at": 600.5 / 60},
    }
    steps = rows["steps"]  # the fast run validated first at 900 steps: no point within 800
    assert steps["horizon"] == 800 and steps["runs"] == {"slow": {"bleu": 28.0, "at": 800}}
    flops = rows["training FLOPs"]
    assert flops["horizon"] == 6e12
    assert flops["runs"] == {"fast": {"bleu": 30.0, "at": 6e12}, "slow": {"bleu": 22.0, "at": 4e12}}


def test_tuned_keys_are_listed_and_marked_even_where_every_run_agrees(tmp_path):
    def outcome(name: str, model: str, dropout: float) -> RunOutcome:
        config = tiny_config(model)
        config.model[model].dropout_rate = dropout
        config.train.label_smoothing = 0.1  # tuned, and the same for both: still listed
        spec = RunSpec(name, tmp_path / f"{name}.py")
        return RunOutcome(name, spec, 0, RunDirectory(tmp_path / name), config=config)

    table = verdict.differing_hyperparameters(
        [outcome("t", "transformer", 0.1), outcome("r", "rnnsearch", 0.3)],
        ["model.dropout_rate", "train.label_smoothing"],
    )
    assert table["t"]["model.transformer.dropout_rate*"] == 0.1
    assert table["r"]["model.rnnsearch.dropout_rate*"] == 0.3
    assert "model.rnnsearch.dropout_rate*" not in table["t"]  # the other family's section
    assert table["t"]["train.label_smoothing*"] == table["r"]["train.label_smoothing*"] == 0.1
    assert table["t"]["model.name"] == "transformer"  # untuned, differing: listed unmarked
    assert "eval.num_examples" not in table["t"]  # the same for both


def test_runs_validated_on_different_numbers_of_sentences_show_it(tmp_path):
    """A config made from a run validated on 50 sentences, beside configs of 500: their
    curves, best checkpoints and trials were scored on different evidence, and no table said."""
    outcomes = []
    for name, sentences in (("a", 50), ("b", 500)):
        config = tiny_config("transformer")
        config.eval.num_examples = sentences
        config.eval.batch_size = sentences // 10  # how, not on what: still left out
        spec = RunSpec(name, tmp_path / f"{name}.py")
        outcomes.append(RunOutcome(name, spec, 0, RunDirectory(tmp_path / name), config=config))
    table = verdict.differing_hyperparameters(outcomes, [])
    assert table == {"a": {"eval.num_examples": 50}, "b": {"eval.num_examples": 500}}


SCORED_SENTENCES = 200


def _scored_run(tmp_path, name: str, config_name: str, seed: int, hypotheses) -> RunOutcome:
    """A run of ``config_name`` (the tiny synthetic task) that translated the test sentences
    as ``hypotheses``."""
    run = RunDirectory(tmp_path / name)
    path = run.hypotheses_file("test")
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(hypotheses) + "\n")
    result = {"split": "test", "max_sentences": SCORED_SENTENCES}
    spec = RunSpec(config_name, tmp_path / f"{config_name}.py")
    return RunOutcome(name, spec, seed, run, result=result, config=tiny_config())


def test_the_verdicts_of_one_report_are_holm_adjusted_as_one_family(tmp_path):
    """Three configs, A with two seeds: three pairs, each in BLEU and chrF, are six tests."""
    references = [t for _, t in load_pairs(tiny_config(), "test")[:SCORED_SENTENCES]]

    def drop(every: int, shift: int = 0) -> list[str]:  # every `every`-th word left out
        return [
            " ".join(w for i, w in enumerate(s.split()) if (i + k + shift) % every) or s
            for k, s in enumerate(references)
        ]

    outcomes = [
        _scored_run(tmp_path, "a0", "A", 0, drop(8)),
        _scored_run(tmp_path, "a1", "A", 1, drop(8, 1)),
        _scored_run(tmp_path, "b0", "B", 0, drop(3)),
        _scored_run(tmp_path, "c0", "C", 0, drop(8, 2)),
    ]
    entries = verdict.verdicts(outcomes, bootstrap_samples=200, randomisation_trials=200)
    assert [(e["a"], e["b"]) for e in entries] == [("A", "B"), ("A", "C"), ("B", "C")]
    tests = [entry[metric] for entry in entries for metric in ("BLEU", "chrF")]
    holm = significance.holm([test["p_value"] for test in tests])
    assert [test["p_value_holm"] for test in tests] == pytest.approx(holm)
    assert {test["tests_in_family"] for test in tests} == {6}
    for test in tests:
        low, high = test["ci95"]
        assert test["significant"] == (test["p_value_holm"] < 0.05 and (low > 0 or high < 0))
    # 200 resamples could show no p under 2 / 201, six times that is over 0.05: the bootstrap
    # takes enough resamples for A's clear lead over B to stay significant after adjustment.
    assert entries[0]["BLEU"]["bootstrap_samples"] >= 6 * 2 / 0.05
    assert entries[0]["BLEU"]["significant"] and entries[0]["chrF"]["significant"]
    assert "Holm-adjusted over the report's 6 tests" in entries[0]["sentence"]
    assert "The 6 tests above" in verdict.family_sentence(entries)
