"""Tuning inside a comparison: the same trials for every model, chosen on validation only,
trials reused on a rerun, bad --tune flags refused with one line."""

import json
import re
from pathlib import Path

import pytest

from seq2seq.compare import grid, grid_ends, report_sections, runner, tuning
from seq2seq.compare.comparison import compare
from seq2seq.compare.grid import make_tuning
from seq2seq.compare.settings import Settings
from seq2seq.compare.suites import RunSpec
from seq2seq.compare.workdir import foreign_entries
from seq2seq.config import ConfigError
from seq2seq.data import sources
from seq2seq.records.run_directory import RunDirectory
from seq2seq.report import figures
from tests.conftest import assert_compare_refuses
from tests.test_compare import TINY_CONFIG

MODELS = ("tiny_transformer", "tiny_rnnsearch")
RATES = (0.5, 4.0)  # multipliers of d_model^-0.5 under the "transformer" schedule


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A tuned comparison of two tiny models over a 2-point learning-rate grid, with the splits
    each phase opened: ``("tuning", split)`` while a trial runs, ``("final", split)`` after."""
    root = tmp_path_factory.mktemp("tuned")
    configs = root / "configs"
    configs.mkdir()
    for name in MODELS:
        (configs / f"{name}.py").write_text(TINY_CONFIG.format(model=name.split("_")[1]))
    specs = [RunSpec(name, configs / f"{name}.py") for name in MODELS]
    settings = Settings(beam_size=1, max_test_sentences=4)
    # Steps end every trial: the budget is generous so that it is equal and never the limit.
    plan = make_tuning([f"train.learning_rate={RATES[0]},{RATES[1]}"], minutes=10)
    opened: list[tuple[str, str]] = []
    phase = ["final"]
    open_corpus, run_trials = sources.open_corpus, tuning.run_trials

    def recording_open_corpus(data, split, **kwargs):
        opened.append((phase[0], split))
        return open_corpus(data, split, **kwargs)

    def flagged_run_trials(*args, **kwargs):
        phase[0] = "tuning"
        try:
            return run_trials(*args, **kwargs)
        finally:
            phase[0] = "final"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sources, "open_corpus", recording_open_corpus)
        patch.setattr(tuning, "run_trials", flagged_run_trials)
        outcomes, report = compare(specs, root / "work", settings, "tuned", plan)
    return specs, settings, plan, root / "work", outcomes, report, opened


def _last_validation(run: RunDirectory) -> dict:
    return [r for r in run.read_metrics() if r["kind"] == "validation"][-1]


def _trial_runs(workdir, name) -> list[RunDirectory]:
    return sorted(
        (RunDirectory(path) for path in (workdir / "tuning" / name).iterdir()),
        key=lambda run: run.path.name,
    )


@pytest.mark.slow
def test_each_model_takes_the_trial_with_the_best_validation_bleu(tuned):
    _, _, _, workdir, outcomes, _, _ = tuned
    assert [o.status for o in outcomes] == ["ok", "ok"]
    report = json.loads((workdir / "report.json").read_text())["tuning"]
    for model, outcome in zip(report["models"], outcomes, strict=True):
        runs = _trial_runs(workdir, model["name"])
        assert len(runs) == 2
        scores = {}
        for run in runs:
            record = _last_validation(run)
            rate = run.load_config().train.learning_rate
            scores[rate] = (record["bleu"], -record["perplexity"])
            row = next(t for t in model["trials"] if t["train.learning_rate"] == rate)
            assert row["validation_bleu"] == record["bleu"]
            assert row["validation_perplexity"] == record["perplexity"]
            logged = [r["learning_rate"] for r in run.read_metrics() if r["kind"] == "train"]
            assert row["peak_learning_rate"] == max(logged)
        assert len(set(scores.values())) == 2, "the two trials scored alike: nothing was chosen"
        best = max(scores, key=scores.get)
        assert model["chosen"] == {"train.learning_rate": best}
        assert outcome.run.load_config().train.learning_rate == best  # the final run used it


@pytest.mark.slow
def test_each_final_run_records_how_its_values_were_chosen(tuned, tmp_path):
    from seq2seq.compare.frontier import read_run, save_record
    from seq2seq.compare.frontier_report import _size_rows

    _, _, _, workdir, outcomes, _, _ = tuned
    whole = json.loads((workdir / "report.json").read_text())
    report, copied = whole["tuning"], whole["copied_from_winning_trial"]
    for model, outcome in zip(report["models"], outcomes, strict=True):
        record = outcome.run.read_tuning()
        assert record["models"] == [model]  # its own config's trials and choice, no other's
        assert record["started_from_winning_trial"] == (outcome.name in copied)
        assert record["chosen_on"] == "validation"
        rate = outcome.run.load_config().train.learning_rate
        assert record["models"][0]["chosen"] == {"train.learning_rate": rate}
        split = outcome.result["split"]
        kept = RunDirectory(save_record(outcome.run, tmp_path / "records", split, "latest"))
        assert kept.read_tuning() == record  # the committed record carries it
    records = tmp_path / "records"
    runs = [read_run(RunDirectory(records / o.name), o.result["split"], "latest") for o in outcomes]
    for row, model, outcome in zip(_size_rows(runs), report["models"], outcomes, strict=True):
        split = model["validation_split"]
        started = (
            "; the final run trained on from the winning trial" if outcome.name in copied else ""
        )
        assert row["chosen_by"] == f"2 trials of learning_rate on {split} (10 min){started}"


@pytest.mark.slow
def test_every_model_gets_the_same_trials_and_minutes(tuned):
    _, _, plan, workdir, _, report_md, _ = tuned
    report = json.loads((workdir / "report.json").read_text())["tuning"]
    assert report["trials_per_model"] == {name: 2 for name in MODELS}
    assert report["chosen_on"] == "validation"
    for model in report["models"]:
        assert sorted(t["train.learning_rate"] for t in model["trials"]) == list(RATES)
        for run in _trial_runs(workdir, model["name"]):
            assert run.load_config().train.time_budget_minutes == plan.minutes
    text = report_md.read_text()
    assert "every model got the same 2 trials, each with a budget of 10 training minutes" in text
    assert "## Tuning (chosen on the validation split)" in text
    assert "![tuning](figures/tuning_bleu.png)" in text


@pytest.mark.slow
def test_the_test_split_is_not_opened_while_tuning(tuned):
    *_, opened = tuned
    while_tuning = {split for phase, split in opened if phase == "tuning"}
    assert while_tuning == {"train", "validation"}
    assert ("final", "test") in opened, "the recorder missed the final runs' test decoding"


@pytest.mark.slow
def test_the_figure_has_one_line_per_model_on_a_log_axis(tuned, tmp_path):
    _, _, plan, workdir, _, _, _ = tuned
    report = json.loads((workdir / "report.json").read_text())["tuning"]
    drawn = figures.plot_tuning(
        {
            model["name"]: [
                ({"train.learning_rate": t["train.learning_rate"]}, t["validation_bleu"])
                for t in model["trials"]
            ]
            for model in report["models"]
        },
        tmp_path / "figure_check.png",
        keys=plan.keys,
    )
    assert (workdir / "figures" / "tuning_bleu.png").read_bytes()[:4] == b"\x89PNG"
    (ax,) = drawn.axes
    assert ax.get_xscale() == "log"
    assert [line.get_label() for line in ax.get_lines()] == list(MODELS)


@pytest.mark.slow
def test_a_rerun_reuses_finished_trials(tuned):
    specs, settings, plan, workdir, _, _, _ = tuned
    runs = [run for name in MODELS for run in _trial_runs(workdir, name)]
    before = [(run.metrics_file.read_text(), sorted(run.checkpoints_dir.iterdir())) for run in runs]
    results = tuning.tune(specs, settings, plan, workdir)
    assert [
        (run.metrics_file.read_text(), sorted(run.checkpoints_dir.iterdir())) for run in runs
    ] == before
    assert [len(result.trials) for result in results] == [2, 2]
    assert foreign_entries(workdir) == []  # the tuned comparison's folder is its own


def test_the_figure_plots_the_best_over_a_second_key(tmp_path):
    trials = {
        "a": [
            ({"train.learning_rate": 1e-3, "train.warmup_steps": 100}, 10.0),
            ({"train.learning_rate": 1e-3, "train.warmup_steps": 300}, 12.0),
            ({"train.learning_rate": 3e-3, "train.warmup_steps": 100}, 15.0),
            ({"train.learning_rate": 3e-3, "train.warmup_steps": 300}, None),  # diverged
        ],
        "b": [({"train.learning_rate": 1e-3, "train.warmup_steps": 100}, None)],
    }
    figure = figures.plot_tuning(
        trials, tmp_path / "t.png", keys=["train.learning_rate", "train.warmup_steps"]
    )
    (ax,) = figure.axes
    (line,) = ax.get_lines()  # "b" has no scored trial
    assert list(line.get_xdata()) == [1e-3, 3e-3]
    assert list(line.get_ydata()) == [12.0, 15.0]
    assert ax.get_xscale() == "log" and "best over train.warmup_steps" in ax.get_title()
    figure = figures.plot_tuning(
        {"a": [({"train.warmup_steps": 300}, 2.0), ({"train.warmup_steps": 100}, 1.0)]},
        tmp_path / "w.png",
        keys=["train.warmup_steps"],
    )
    assert figure.axes[0].get_xscale() == "linear"
    assert list(figure.axes[0].get_lines()[0].get_xdata()) == [100, 300]


def test_sampled_points_are_the_same_draw_for_every_call():
    grid = ["train.learning_rate=1e-3,2e-3,3e-3", "train.warmup_steps=100,300"]
    points = make_tuning(grid, 5, samples=4).points()
    assert points == make_tuning(grid, 5, samples=4).points()
    assert len(set(points)) == 4
    assert set(points) <= set(make_tuning(grid, 5).points())
    assert len(make_tuning(grid, 5).points()) == 6


@pytest.mark.parametrize(
    "flags, minutes, samples, message",
    [
        (["train.learning_rat=1e-3,3e-3"], 5, 0, "unknown config key 'train.learning_rat'"),
        (["train.learning_rate="], 5, 0, "lists no values"),
        (["train.warmup_steps=300,1e3"], 5, 0, "'1e3' is not an integer"),
        (["train.learning_rate=fast"], 5, 0, "'fast' is not a number"),
        (["train.warmup_steps=-5,300"], 5, 0, "must be >= 0"),
        (["train.learning_rate=1e-3"], None, 0, "needs --tune_minutes"),
        (["train.learning_rate=1e-3,3e-3"], 5, 2, "the grid has 2 points"),
        ([], 5, 0, "need --tune"),
        (["train.time_budget_minutes=1,2"], 5, 0, "tune another key"),
    ],
)
def test_bad_tune_flags_are_refused_in_one_line(flags, minutes, samples, message):
    with pytest.raises(ConfigError, match=message) as caught:
        make_tuning(flags, minutes, samples)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "minutes, steps, message",
    [
        (5, 100, "not both"),
        (None, 0, "at least 1 step"),
    ],
)
def test_a_budget_in_steps_or_minutes_never_both(minutes, steps, message):
    with pytest.raises(ConfigError, match=message) as caught:
        make_tuning(["train.learning_rate=1,2"], minutes, steps=steps)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="tune another key"):
        make_tuning(["train.steps=10,20"], None, steps=5)


STEPS_CONFIG = """
from tests.conftest import tiny_config


def get_config():
    config = tiny_config("{model}")
    config.train.steps = 100_000  # each rung's steps end the trials
    config.train.time_budget_minutes = 30.0  # the config's own cap: steps decide instead
    config.train.log_every_steps = 2
    config.checkpoint.every_steps = 0
    config.eval.num_examples = 4
    config.decode.max_extra_length = 5
    return config
"""


@pytest.mark.slow
def test_trials_in_steps_are_scored_at_their_rungs_step(tmp_path):
    path = tmp_path / "tiny_transformer.py"
    path.write_text(STEPS_CONFIG.format(model="transformer"))
    plan = make_tuning(["train.learning_rate=0.5,4.0"], None, rungs=2, steps=6)
    (result,) = tuning.tune([RunSpec("tiny_transformer", path)], Settings(slice_minutes=0), plan,
                            tmp_path / "work")  # fmt: skip
    steps = sorted(trial.step for trial in result.trials)
    assert steps == [6, 12], "the better trial trains on to rung 2's 12 steps, the other stops at 6"
    for trial in result.trials:
        assert trial.run.read_metrics()[-1]["step"] == trial.step  # scored where it ended
        assert len(trial.rungs) == (2 if trial.step == 12 else 1)
    assert result.chosen == next(t.point for t in result.trials if t.step == 12)
    summary = tuning.report_json(plan, [result])
    assert summary["budget_unit"] == "steps" and summary["rung_minutes"] == [6.0, 12.0]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--tune", "train.warmup_steps=1.5,3", "--tune_minutes", "1"], "not an integer"),
        (
            [
                "--tune=train.learning_rate=1,2",
                "--tune_minutes=1",
                "--config.train.learning_rate=3",
            ],
            "would replace the value --tune train.learning_rate chooses",
        ),
        (  # the quickstart Transformer warms up over 200 steps; 150 are tried at the point 300
            ["--tune", "train.warmup_steps=100,300", "--tune_steps", "150"],
            "--tune_steps 150 ends inside quickstart_transformer's warm-up (300 steps at "
            "train.warmup_steps=300): give every trial more, at least --tune_steps 301",
        ),
        (  # rung 2 refused its own trial after rung 1 had trained (train.steps: 400 -> 800)
            [
                "--tune",
                "train.learning_rate=x0.5,x1",
                "--tune_steps",
                "400",
                "--tune_rungs",
                "2",
                "--config.train.schedule=warmup_cosine",
            ],
            "--tune_rungs 2 with --tune_steps: quickstart_transformer's warmup_cosine decays "
            "over train.steps",
        ),
        (  # trained every trial to the final budget and called that convergence
            [
                "--tune",
                "model.dropout_rate=0.0,0.1",
                "--tune_steps",
                "400",
                "--tune_to_convergence",
            ],
            "--tune_to_convergence trains trials until their early stopping, but "
            "quickstart_transformer has none (train.early_stopping_patience=0)",
        ),
    ],
)
def test_bad_tune_invocations_end_with_one_line(tmp_path, arguments, message):
    arguments = ["--configs", "configs/quickstart_transformer.py", *arguments]
    assert_compare_refuses(tmp_path, arguments, message)


HALVING_CONFIG = """
from tests.conftest import tiny_config


def get_config():
    config = tiny_config("{model}")
    config.train.steps = 100_000  # each rung's minutes end the trials
    config.train.log_every_steps = 5
    config.checkpoint.every_steps = 0
    config.eval.num_examples = 4
    config.decode.max_extra_length = 5
    return config
"""
HALVING_RATES = (0.05, 0.5, 2.0, 8.0)


@pytest.fixture(scope="module")
def halved(tmp_path_factory):
    """Two tiny models over four learning rates, successive halving over two rungs."""
    root = tmp_path_factory.mktemp("halved")
    specs = []
    for name in MODELS:
        path = root / f"{name}.py"
        path.write_text(HALVING_CONFIG.format(model=name.split("_")[1]))
        specs.append(RunSpec(name, path))
    plan = make_tuning([f"train.learning_rate={','.join(map(str, HALVING_RATES))}"], 0.03, rungs=2)
    settings = Settings(slice_minutes=0)
    return plan, root / "work", tuning.tune(specs, settings, plan, root / "work")


def _bleu_at(run: RunDirectory, minutes: float) -> tuple[float, float]:
    """The first validation at or after ``minutes``: (BLEU, -perplexity), as ranked."""
    records = [r for r in run.read_metrics() if r["kind"] == "validation"]
    record = next(r for r in records if r["elapsed_seconds"] >= minutes * 60)
    return record["bleu"], -record["perplexity"]


@pytest.mark.slow
def test_successive_halving_continues_the_better_half_of_every_model(halved):
    plan, workdir, results = halved
    for result in results:
        runs = {t.point[0][1]: t.run for t in result.trials}
        first = {rate: _bleu_at(run, plan.minutes) for rate, run in runs.items()}
        assert len(set(first.values())) == 4, "tied trials: the halving chose arbitrarily"
        better = sorted(first, key=first.get, reverse=True)[:2]
        trained = {
            rate: run.read_metrics()[-1]["elapsed_seconds"] / 60 for rate, run in runs.items()
        }
        for rate, minutes in trained.items():
            if rate in better:  # trained on to the second rung's doubled minutes
                assert minutes >= plan.rung_minutes(1)
            else:
                assert plan.minutes <= minutes < plan.rung_minutes(1)
        second = {rate: _bleu_at(runs[rate], plan.rung_minutes(1)) for rate in better}
        assert result.chosen == (("train.learning_rate", max(second, key=second.get)),)
        rows = {t.point[0][1]: t for t in result.trials}
        assert [len(rows[rate].rungs) for rate in HALVING_RATES] == [
            2 if rate in better else 1 for rate in HALVING_RATES
        ]


@pytest.mark.slow
def test_the_halving_figure_draws_each_rung_apart(halved, tmp_path, monkeypatch):
    plan, _, results = halved
    drawn = {}
    monkeypatch.setattr(
        tuning.figures, "plot_tuning", lambda lines, path, keys: drawn.update(lines)
    )
    tuning.plot(plan, results, tmp_path / "tuning.png")
    for result in results:
        first = drawn[f"{result.spec.name}, {plan.rung_minutes(0):g} min"]
        second = drawn[f"{result.spec.name}, {plan.rung_minutes(1):g} min"]
        assert len(first) == len(HALVING_RATES) and len(second) == 2  # the survivors only
        continued = [t for t in result.trials if len(t.rungs) == 2]
        assert sorted(bleu for _, bleu in second) == sorted(t.validation_bleu for t in continued)
        stopped = [t for t in result.trials if len(t.rungs) == 1]
        at_first = {point["train.learning_rate"]: bleu for point, bleu in first}
        for trial in stopped:  # drawn at the minutes it trained, beside the others' first rung
            assert at_first[trial.point[0][1]] == trial.validation_bleu


def test_bad_rung_counts_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="2 trials per model can be halved at most 1 times"):
        make_tuning(["train.learning_rate=1,2"], 5, rungs=3)
    with pytest.raises(ConfigError, match="need --tune"):
        make_tuning([], None, rungs=2)


def test_model_field_keys_tune_each_configs_own_model(tmp_path):
    """``--tune model.dropout_rate`` sets the Transformer's and the RNNsearch's dropout, each in
    its own section, with the same values and trials for both; an override of either section's
    key is refused as replacing the tuned value."""
    plan = make_tuning(["model.dropout_rate=0.1,0.35"], 5)
    results = []
    for name in MODELS:
        family = name.split("_")[1]
        path = tmp_path / f"{name}.py"
        path.write_text(TINY_CONFIG.format(model=family))
        spec = RunSpec(name, path)
        trials = [tuning.make_trial(spec, point, Settings(), tmp_path) for point in plan.points()]
        for trial, rate in zip(trials, (0.1, 0.35), strict=True):
            assert trial.status == "ok", trial.reason
            assert trial.config.model[family].dropout_rate == rate
            other = "rnnsearch" if family == "transformer" else "transformer"
            default = tuning.config_lib.default_config().model[other].dropout_rate
            assert trial.config.model[other].dropout_rate == default
        result = tuning.ModelTuning(spec, trials, "val", chosen=trials[1].point)
        assert result.tuned_spec().overrides[-1] == (f"model.{family}.dropout_rate", 0.35)
        results.append(result)
    for key in ("model.transformer.dropout_rate", "model.rnnsearch.dropout_rate"):
        with pytest.raises(ConfigError, match="would replace the value --tune model.dropout_rate"):
            grid.check_overrides(plan, Settings(overrides=((key, 0.2),)))
    with pytest.raises(ConfigError, match="unknown config key 'model.dropout_rat'"):
        make_tuning(["model.dropout_rat=0.1,0.2"], 5)


@pytest.mark.slow
def test_a_winning_trial_trained_to_the_final_budget_is_the_final_run_of_its_seed(
    halved, monkeypatch
):
    plan, workdir, results = halved

    def final_runs(budget_minutes: float) -> list:
        final = Settings(budget_minutes=budget_minutes, seeds=2, slice_minutes=0)
        return [
            runner.prepare(result.tuned_spec(), final, seed, workdir)
            for result in results
            for seed in range(final.seeds)
        ]

    short = final_runs(plan.rung_minutes(1) / 2)  # shorter than the trials trained: afresh
    assert tuning.reuse_winners(results, short, plan) == []
    assert not any(outcome.run.path.exists() for outcome in short)

    outcomes = final_runs(plan.rung_minutes(1))
    copied = tuning.reuse_winners(results, outcomes, plan)
    assert copied == [f"{name}-seed0" for name in MODELS]
    runner.check_reuse(outcomes)  # the same identity as the trial: reusable, not refused
    for result in results:
        winner = next(t for t in result.trials if t.point == result.chosen)
        run = RunDirectory(workdir / f"{result.spec.name}-seed0")
        assert run.metrics_file.read_text() == winner.run.metrics_file.read_text()
        assert not (workdir / f"{result.spec.name}-seed1").exists()  # another seed: trained
    metrics = outcomes[0].run.metrics_file.read_text()
    with monkeypatch.context() as patched:  # already at its budget: not even restored
        patched.setattr(runner, "train", lambda *args, **kwargs: pytest.fail("trained again"))
        assert not runner.train_in_slices(outcomes[:1], 0)
    assert outcomes[0].run.metrics_file.read_text() == metrics
    assert tuning.reuse_winners(results, outcomes, plan) == copied  # a rerun: the same


@pytest.mark.slow
def test_a_final_run_with_a_longer_budget_continues_its_winning_trial(halved, tmp_path):
    """A final budget beyond the last rung (a cap for early stopping, say): the final run of
    the trial's seed starts from the trial, and its training picks up at the trial's step."""
    plan, workdir, results = halved
    final = Settings(budget_minutes=3 * plan.rung_minutes(1), seeds=1, slice_minutes=0)
    outcomes = [runner.prepare(r.tuned_spec(), final, 0, tmp_path) for r in results]  # new finals
    assert tuning.reuse_winners(results, outcomes, plan) == list(MODELS)  # one seed: no suffix
    first = outcomes[0]
    trial_log = Path(first.run.winning_trial_file.read_text().strip()) / "metrics.jsonl"
    trial_steps = [r["step"] for r in map(json.loads, trial_log.read_text().splitlines())]
    runner.train_in_slices(outcomes[:1], 0)
    records = first.run.read_metrics()
    trial_records = [json.loads(line) for line in trial_log.read_text().splitlines()]
    assert records[: len(trial_steps)] == trial_records
    assert max(r["step"] for r in records) > max(trial_steps)  # trained on, from the trial


def test_factors_scale_each_configs_own_value(tmp_path):
    """``x0.5``: half of each config's own rate and warm-up, whatever the family; the final
    run takes the winning trial's resolved values, and the report keeps the factors."""
    from seq2seq.config import load_config_file

    plan = make_tuning(
        ["train.learning_rate=x0.5,x2", "train.warmup_steps=x0.5"], minutes=1, rungs=1
    )
    assert [repr(value) for value in dict(plan.grid)["train.learning_rate"]] == ["x0.5", "x2"]
    results = []
    for name in ("quickstart_transformer", "quickstart_rnnsearch"):
        path = Path("configs") / f"{name}.py"
        own = load_config_file(path).train
        spec = RunSpec(name, path)
        trials = [tuning.make_trial(spec, point, Settings(), tmp_path) for point in plan.points()]
        rates = [trial.config.train.learning_rate for trial in trials]
        assert rates == pytest.approx([own.learning_rate * 0.5, own.learning_rate * 2])
        assert {trial.config.train.warmup_steps for trial in trials} == {
            round(own.warmup_steps * 0.5)
        }
        assert trials[1].run.path.name == "train.learning_rate=x2,train.warmup_steps=x0.5"
        result = tuning.ModelTuning(spec, trials, "validation", chosen=trials[1].point)
        final = dict(result.tuned_spec().overrides)
        assert final["train.learning_rate"] == pytest.approx(own.learning_rate * 2)
        results.append(result)
    summary = json.loads(json.dumps(tuning.report_json(plan, results)))
    assert summary["grid"]["train.learning_rate"] == ["x0.5", "x2"]
    assert summary["models"][0]["chosen"] == {
        "train.learning_rate": "x2",
        "train.warmup_steps": "x0.5",
    }
    section = "\n".join(report_sections._trials_table(summary).splitlines()[2:3])
    assert "| x0.5 |" in section and "'x0.5'" not in section


@pytest.mark.parametrize(
    "flag, message",
    [
        ("train.learning_rate=x0.5,0.001", "as a factor of each config's own (x0.5,x1,x2) or none"),
        ("train.learning_rate=x0,x1", "factors must be distinct and above 0"),
        ("train.learning_rate=x1,x1.0", "factors must be distinct and above 0"),
        ("train.schedule=x2", "x-factors scale a number"),
    ],
)
def test_bad_factors_are_refused_in_one_line(flag, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_tuning([flag], minutes=1)


# --tune_keep_each: a halving that cannot drop a value of one key before the last rung.

RECORDS = Path(__file__).resolve().parents[1] / "docs" / "records" / "multi30k_frontier_tuned"
# The dropout-0.1 rnnsearch-small that the old rule chose (superseded by its retuning).
SUPERSEDED = RECORDS.parent / "multi30k_frontier_superseded" / "rnnsearch-small-dropout0.1-seed0"


def _made_up_trials(scores: dict[tuple[float, float], float]) -> list[tuning.Trial]:
    """Trials at (learning rate, dropout) points with a made-up validation BLEU each."""
    trials = []
    for (rate, dropout), bleu in scores.items():
        point = (("train.learning_rate", rate), ("model.dropout_rate", dropout))
        trial = tuning.Trial(point, RunDirectory(Path("/nowhere") / f"{rate},{dropout}"))
        trial.validation_bleu, trial.validation_perplexity = bleu, 10.0
        trials.append(trial)
    return trials


def _dropouts(trials) -> list[float]:
    return [dict(t.point)["model.dropout_rate"] for t in trials]


def test_keeping_each_dropout_carries_the_best_of_each_value_to_the_last_rung():
    # Early in training the low dropout leads at both rates (nothing overfits yet): plain
    # halving keeps the two 0.1 trials, and then the better of those.
    first = {(1e-3, 0.1): 30.0, (2e-3, 0.1): 32.0, (1e-3, 0.3): 26.0, (2e-3, 0.3): 29.0}
    plain = tuning.halve(_made_up_trials(first))
    assert _dropouts(plain) == [0.1, 0.1]
    kept = tuning.halve(_made_up_trials(first), "model.dropout_rate")
    assert [dict(t.point)["train.learning_rate"] for t in kept] == [2e-3, 2e-3]
    assert _dropouts(kept) == [0.1, 0.3]  # the best of each value, best first
    # At the second rung, two trials: plain halving keeps one, the rule keeps both.
    second = {(2e-3, 0.1): 36.0, (2e-3, 0.3): 35.5}
    assert _dropouts(tuning.halve(_made_up_trials(second))) == [0.1]
    assert _dropouts(tuning.halve(_made_up_trials(second), "model.dropout_rate")) == [0.1, 0.3]
    # With more trials than values, the rest of the better half is filled by rank.
    six = {
        (r, d): b
        for (r, d), b in zip(
            [(1, 0.1), (2, 0.1), (3, 0.1), (4, 0.1), (1, 0.3), (2, 0.3)],
            [40.0, 39.0, 38.0, 37.0, 20.0, 19.0],
            strict=True,
        )
    }
    kept = tuning.halve(_made_up_trials(six), "model.dropout_rate")
    assert [t.validation_bleu for t in kept] == [40.0, 39.0, 20.0]


def _replayed(record: dict, keep_each: str | None) -> set:
    """The points a rule carries to the last rung, replayed from a committed tuning record's
    validation BLEU per rung (each trial that reached a rung has its score there)."""
    model = record["models"][0]
    keys = list(record["grid"])
    trials = model["trials"]
    alive = list(range(len(trials)))
    for rung in range(record["rungs"] - 1):
        made_up = []
        for index in alive:
            scores = trials[index]["rung_bleu"]
            if rung >= len(scores):  # the rule keeps what the old run did not train this far
                return {"needs training"}
            point = tuple((key, trials[index][key]) for key in keys)
            trial = tuning.Trial(point, RunDirectory(Path("/nowhere") / str(index)))
            trial.validation_bleu, trial.validation_perplexity = scores[rung], 0.0
            made_up.append(trial)
        survivors = tuning.halve(made_up, keep_each)
        alive = [alive[made_up.index(t)] for t in survivors]
    return {tuple(trials[i][key] for key in keys) for i in alive}


def _last_rung(record: dict) -> dict:
    """Each trial that reached a tuning record's last rung, as its point: its score there."""
    keys = list(record["grid"])
    return {
        tuple(t[key] for key in keys): t["rung_bleu"][-1]
        for t in record["models"][0]["trials"]
        if len(t["rung_bleu"]) == record["rungs"]
    }


@pytest.mark.skipif(not RECORDS.is_dir(), reason="docs/records/multi30k_frontier_tuned is absent")
def test_the_committed_trials_would_have_kept_the_dropout_the_old_rule_dropped():
    record = json.loads((SUPERSEDED / "tuning.json").read_text())
    assert "keep_each" not in record  # tuned under the old rule
    # The old rule carried only dropout 0.1 to the last rung (8,000 steps): 0.3 stopped at 4,000
    # steps, 0.28 validation BLEU behind, where the size later converged about 2 points higher.
    assert _replayed(record, None) == {("x1", 0.1)}
    assert _replayed(record, "model.dropout_rate") == {("x1", 0.1), ("x1", 0.3)}
    # Retuned under the rule, both dropouts reached the last rung (8,000 steps) and 0.3 won.
    retuned = json.loads((RECORDS / "rnnsearch-small-seed0" / "tuning.json").read_text())
    assert retuned["keep_each"] == "model.dropout_rate"
    last = [t for t in retuned["models"][0]["trials"] if len(t["rung_bleu"]) == retuned["rungs"]]
    assert sorted(t["model.dropout_rate"] for t in last) == [0.1, 0.3]
    assert retuned["models"][0]["chosen"]["model.dropout_rate"] == 0.3
    # transformer-small dropped dropout 0.3 at the first rung; the rule keeps its best trial.
    record = json.loads((RECORDS / "transformer-small-seed0" / "tuning.json").read_text())
    key = "model.transformer.dropout_rate"
    assert len(_replayed(record, None)) == 1
    assert _replayed(record, key) == {"needs training"}  # 0.3 went on: its 2,000 steps untrained


def test_keep_each_must_name_a_tuned_key_in_one_line():
    with pytest.raises(ConfigError, match="not a tuned key; give one of train.learning_rate"):
        make_tuning(["train.learning_rate=1,2"], 5, keep_each="model.dropout_rate")
    with pytest.raises(ConfigError, match="need --tune"):
        make_tuning([], None, keep_each="model.dropout_rate")
    plan = make_tuning(
        ["train.learning_rate=1,2", "model.dropout_rate=0.1,0.3"],
        5,
        rungs=2,
        keep_each="model.dropout_rate",
    )
    assert plan.keep_each == "model.dropout_rate"


# --tune_to_convergence: the last rung ends where each run's early stopping ends it.


def _converged_trial(folder: Path, bleus: list[float]) -> tuning.Trial:
    """A trial whose made-up run validated every 100 steps with these BLEU scores and ended."""
    run = RunDirectory(folder)
    run.path.mkdir()
    steps = [100 * (k + 1) for k in range(len(bleus))]
    lines = [{"kind": "train", "step": steps[-1], "learning_rate": 1e-3, "elapsed_seconds": 60.0}]
    lines += [
        {
            "kind": "validation",
            "step": step,
            "bleu": bleu,
            "perplexity": 50.0 - bleu,
            "n": 8,
            "elapsed_seconds": step * 0.1,
        }  # fmt: skip
        for step, bleu in zip(steps, bleus, strict=True)
    ]
    run.metrics_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tuning.Trial((("model.dropout_rate", folder.name),), run)


def test_a_converged_trial_is_scored_by_its_last_five_points_not_its_best(tmp_path):
    # A long run whose plateau holds one lucky point, against a shorter one with a higher plateau:
    # the highest point would pick the long run only because it drew more noisy points.
    spiky = _converged_trial(tmp_path / "0.3", [20, 30, 34, 35, 35.2, 38, 34.6, 35.2, 35.4])
    steady = _converged_trial(tmp_path / "0.1", [25, 33, 36, 36.2, 35.8, 36.1, 35.9])
    for trial in (spiky, steady):
        tuning._score(trial, None)
    assert spiky.validation_bleu == pytest.approx((35.2 + 38 + 34.6 + 35.2 + 35.4) / 5)
    assert spiky.validation_perplexity == pytest.approx(50 - spiky.validation_bleu)
    assert spiky.step == 900 and spiky.rungs == [spiky.validation_bleu]
    assert tuning.best_trial([spiky, steady]) is steady  # 36.0 against 35.68
    at_rung = tuning.Trial(spiky.point, spiky.run)
    tuning._score(at_rung, 600, "steps")  # a fixed rung: the point at its step, spike and all
    assert (at_rung.step, at_rung.validation_bleu) == (600, 38)


def test_to_convergence_needs_a_grid_in_one_line():
    with pytest.raises(ConfigError, match="--tune_to_convergence needs --tune") as caught:
        make_tuning([], None, converge=True)
    assert "\n" not in str(caught.value)
    plan = make_tuning(["model.dropout_rate=0.1,0.3"], None, rungs=2, steps=10, converge=True)
    assert (
        plan.converge and not make_tuning(["model.dropout_rate=0.1,0.3"], None, steps=10).converge
    )


@pytest.mark.slow
def test_the_last_rung_trains_to_convergence_and_its_winner_is_the_final_run(tmp_path):
    path = tmp_path / "tiny_transformer.py"
    config = STEPS_CONFIG.format(model="transformer").replace(
        "config.train.steps = 100_000  # each rung's steps end the trials",
        "config.train.steps = 24  # the final runs' cap: the last rung trains to it\n"
        "    config.eval.every_steps = 4",
    )
    path.write_text(config)
    spec = RunSpec("tiny_transformer", path)
    plan = make_tuning(["train.learning_rate=0.5,4.0"], None, rungs=2, steps=4, converge=True)
    settings = Settings(slice_minutes=0)
    (result,) = tuning.tune([spec], settings, plan, tmp_path / "work")
    ends = sorted(trial.run.read_metrics()[-1]["step"] for trial in result.trials)
    assert ends == [4, 24], "the halving's survivor trains on to the config's own 24 steps"
    winner = next(t for t in result.trials if t.point == result.chosen)
    validations = [r for r in winner.run.read_metrics() if r["kind"] == "validation"]
    assert len(validations) >= 6
    last = [r["bleu"] for r in validations[-tuning.CONVERGED_POINTS :]]
    assert winner.validation_bleu == pytest.approx(sum(last) / len(last))
    assert winner.step == validations[-1]["step"]
    summary = tuning.report_json(plan, [result])
    assert summary["last_rung"] == "convergence"
    assert "their last 5 points (`--tune_to_convergence`)" in report_sections._tuning_method(
        summary
    )  # and the intro's scoring agrees (it said "its own last validation record")
    intro = report_sections._tuning_intro(summary)[2]
    assert (
        "scored by its last validation record at each rung (at the last, the mean of its " in intro
    )
    one_rung = {**summary, "rungs": 1}  # the only rung is convergence: no trial budget to state
    assert "each with a budget" not in report_sections._tuning_method(one_rung)
    assert (
        "scored by the mean of its last 5 validation" in report_sections._tuning_intro(one_rung)[2]
    )
    # The winner trained under the final runs' budget: it is seed 0's final run, not retrained.
    final = runner.prepare(result.tuned_spec(), settings, 0, tmp_path / "work")
    assert tuning.reuse_winners([result], [final], plan) == ["tiny_transformer"]
    assert final.run.metrics_file.read_text() == winner.run.metrics_file.read_text()


CONVERGED = RECORDS.parent / "multi30k_dropout_at_convergence"


def _validation_at(record: Path, step: int) -> dict:
    lines = (record / "metrics.jsonl").read_text().splitlines()
    return next(
        r for r in map(json.loads, lines) if r.get("kind") == "validation" and r["step"] == step
    )


@pytest.mark.skipif(not CONVERGED.is_dir(), reason="docs/records/... dropout_at_convergence absent")
def test_a_dropped_trial_trained_on_alone_is_the_trial_and_the_rule_replays_on_it():
    # A run with one trial's values and seed reproduces the trial where both trained, so the
    # keep-each rule can be replayed on committed trials plus the dropped one trained on.
    small = json.loads((RECORDS / "transformer-small-seed0" / "tuning.json").read_text())
    (trial,) = [
        t
        for t in small["models"][0]["trials"]
        if t["train.learning_rate"] == 0.00566 and t["model.transformer.dropout_rate"] == 0.3
    ]
    run = _validation_at(CONVERGED / "transformer-small-dropout0.3-seed0", 1000)
    assert (run["bleu"], run["perplexity"]) == (
        trial["rung_bleu"][0],
        trial["validation_perplexity"],
    )
    superseded = (
        RECORDS.parent / "multi30k_frontier_superseded" / "rnnsearch-large-dropout0.1-seed0"
    )
    old = json.loads((superseded / "tuning.json").read_text())
    (trial,) = [
        t
        for t in old["models"][0]["trials"]
        if (t["train.learning_rate"], t["model.dropout_rate"]) == ("x0.5", 0.3)
    ]
    assert _validation_at(RECORDS / "rnnsearch-large-seed0", 2000)["bleu"] == trial["rung_bleu"][0]
    # Replayed: the old rule drops 0.3 at the first rung, the new one keeps each dropout's best,
    # and at the last rung 0.3 wins, which the retuned size's record says it chose.
    assert _replayed(old, None) == {("x0.5", 0.1)}
    assert _replayed(old, "model.dropout_rate") == {"needs training"}  # 0.3 went on, untrained
    new = json.loads((RECORDS / "rnnsearch-large-seed0" / "tuning.json").read_text())
    assert _replayed(new, "model.dropout_rate") == {("x0.5", 0.1), ("x0.5", 0.3)}
    last = _last_rung(new)
    assert set(last) == {("x0.5", 0.1), ("x0.5", 0.3)}
    assert max(last, key=last.get) == ("x0.5", 0.3)
    assert new["models"][0]["chosen"] == {"train.learning_rate": "x0.5", "model.dropout_rate": 0.3}


@pytest.mark.skipif(not CONVERGED.is_dir(), reason="docs/records/... dropout_at_convergence absent")
def test_transformer_large_under_the_rule_compares_its_dropout_0_3_with_the_other_rate():
    superseded = (
        RECORDS.parent / "multi30k_frontier_superseded" / "transformer-large-dropout0.1-seed0"
    )
    record = json.loads((superseded / "tuning.json").read_text())
    key = "model.dropout_rate"
    trials = {(t["train.learning_rate"], t[key]): t for t in record["models"][0]["trials"]}
    # The old rule: x1/0.1 alone reached the last rung (4,000 steps) and was chosen.
    assert _replayed(record, None) == {("x1", 0.1)}
    # The rule keeps each dropout's best at 1,000 steps: x0.5 for 0.1 (0.21 BLEU ahead of x1),
    # x1 for 0.3. Its 0.3 trial was stopped there, so the committed trials end the replay.
    assert trials[("x0.5", 0.1)]["rung_bleu"][0] > trials[("x1", 0.1)]["rung_bleu"][0]
    assert _replayed(record, key) == {"needs training"}
    # The run trained on alone is a fresh draw of that trial's config on another machine (1,000
    # steps: 32.31 against the trial's 33.16), so its 2,000-step score stands in for the trial's.
    run = RECORDS / "transformer-large-seed0"  # the tuned size's seed 0 now
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["transformer"]["dropout_rate"] == 0.3
    peak = trials[("x1", 0.3)]["peak_learning_rate"]  # logged in float32
    assert config["train"]["learning_rate"] == pytest.approx(peak, rel=1e-6)
    assert _validation_at(run, 1000)["bleu"] != trials[("x1", 0.3)]["rung_bleu"][0]
    trials[("x1", 0.3)]["rung_bleu"].append(_validation_at(run, 2000)["bleu"])
    # Each is its dropout's only trial at 2,000 steps, so both go on to the last rung: the 0.3
    # run is compared with x0.5/0.1, which the old halving stopped at 2,000 steps, and not
    # with the committed x1/0.1 winner. That comparison needs x0.5/0.1 trained to 4,000 steps.
    assert _replayed(record, key) == {("x0.5", 0.1), ("x1", 0.3)}
    assert len(trials[("x0.5", 0.1)]["rung_bleu"]) == record["rungs"] - 1
    # That x0.5/0.1 run, trained from scratch (a fresh draw too: 33.34 at 1,000 steps against its
    # trial's 34.08), stopped early at 3,250 steps, so the last rung scores it by its last point.
    # Scored by the tuning's own code on both records, each rule chooses dropout 0.3.
    other = CONVERGED / "transformer-large-x0.5-dropout0.1-seed0"
    config = json.loads((other / "config.json").read_text())
    assert config["model"]["transformer"]["dropout_rate"] == 0.1
    assert config["train"]["learning_rate"] == pytest.approx(
        trials[("x0.5", 0.1)]["peak_learning_rate"], rel=1e-6
    )
    assert _validation_at(other, 1000)["bleu"] != trials[("x0.5", 0.1)]["rung_bleu"][0]
    finalists = {
        dropout: tuning.Trial((("model.dropout_rate", dropout),), RunDirectory(folder))
        for dropout, folder in ((0.3, run), (0.1, other))
    }
    for steps in (record["rung_minutes"][-1], None):  # the last rung (4,000 steps); convergence
        for trial in finalists.values():
            tuning._score(trial, steps, "steps")
        assert tuning.best_trial(list(finalists.values())) is finalists[0.3], steps
    assert finalists[0.1].step == 3250  # to convergence: the last-5 means, 41.47 against 37.94
    assert finalists[0.3].validation_bleu - finalists[0.1].validation_bleu > 3
    # The tuned size's record replays the same rule from its own rung scores: both finalists
    # reach the last rung, where 0.3 wins, and the record says it chose that.
    assembled = json.loads((run / "tuning.json").read_text())
    assert assembled["keep_each"] == "model.dropout_rate"
    assert _replayed(assembled, key) == {("x0.5", 0.1), ("x1", 0.3)}
    last = _last_rung(assembled)
    assert last == {
        ("x0.5", 0.1): pytest.approx(_validation_at(other, 3250)["bleu"]),
        ("x1", 0.3): pytest.approx(_validation_at(run, 4000)["bleu"]),
    }
    assert assembled["models"][0]["chosen"] == {"train.learning_rate": "x1", key: 0.3}


def _chose(name, **point):
    return {"name": name, "chosen": {key.replace("__", "."): value for key, value in point.items()}}


def test_a_grid_end_every_model_chose_is_named_and_a_split_or_inner_choice_is_not():
    grid = {"model.dropout_rate": [0.1, 0.3], "train.learning_rate": ["x0.5", "x1"]}
    both_top = [
        _chose("rnn", model__dropout_rate=0.3, train__learning_rate="x1"),
        _chose("tf", model__dropout_rate=0.3, train__learning_rate="x0.5"),
    ]
    assert grid_ends.grid_edges(grid, both_top) == [
        "every model chose the largest `model.dropout_rate` of the grid (0.3)"
    ]
    # One model alone on two values always sits at an end: that says nothing, so nothing is said.
    assert grid_ends.grid_edges(grid, both_top[:1]) == []
    # Factors order by their size: both chose the smallest.
    low = [_chose("a", train__learning_rate="x0.5"), _chose("b", train__learning_rate="x0.5")]
    assert grid_ends.grid_edges(grid, low) == [
        "every model chose the smallest `train.learning_rate` of the grid (x0.5)"
    ]
    # Three values: any model that passed over the inner one for an end is named, alone or not.
    wide = {"model.dropout_rate": [0.3, 0.1, 0.2]}
    models = [_chose("a", model__dropout_rate=0.2), _chose("b", model__dropout_rate=0.1)]
    assert grid_ends.grid_edges(wide, models) == [
        "`b` chose the smallest `model.dropout_rate` of the grid (0.1)"
    ]
    # Names have no order; a model with no scored trial chose nothing and is left out.
    names = {"train.schedule": ["warmup_rsqrt", "warmup_cosine"]}
    assert grid_ends.grid_edges(names, [_chose("a", train__schedule="warmup_rsqrt")] * 2) == []
    unscored = [*both_top, {"name": "c", "chosen": None}]
    assert grid_ends.grid_edges(grid, unscored) == grid_ends.grid_edges(grid, both_top)


def test_the_report_names_a_grid_end_under_the_choices():
    summary = {
        "grid": {"model.dropout_rate": [0.1, 0.3]},
        "trials_per_model": {"rnn": 2, "tf": 2},
        "minutes_per_trial": 5.0,
        "rungs": 1,
        "samples": None,
        "models": [
            {**_chose("rnn", model__dropout_rate=0.3), "validation_split": "val", "trials": []},
            {**_chose("tf", model__dropout_rate=0.3), "validation_split": "val", "trials": []},
        ],
    }
    report = {"tuning": summary, "figures": {}, "copied_from_winning_trial": []}
    lines = report_sections.tuning(report)
    chosen = lines.index("- `tf`: model.dropout_rate=0.3")
    assert lines[chosen + 2].startswith(
        "**At the end of the grid**: every model chose the largest `model.dropout_rate` of the "
        "grid (0.3). Nothing beyond it was tried"
    )
    summary["models"][1]["chosen"] = {"model.dropout_rate": 0.1}
    assert not any("At the end of the grid" in line for line in report_sections.tuning(report))


def test_a_copy_of_the_winning_trial_cut_short_is_copied_again(tmp_path, monkeypatch):
    """A Ctrl-C while the winning trial was copied (minutes of checkpoints) left a folder whose
    config.json, copied first, made every rerun skip the copy: the final run trained on from
    half a checkpoint, without the trial's metrics or its winning-trial mark."""
    import contextlib
    import os
    import shutil
    from types import SimpleNamespace

    trial = RunDirectory(tmp_path / "trial")
    (trial.path / "checkpoints" / "10").mkdir(parents=True)
    trial.config_file.write_text("{}\n")
    for name in ("a", "b", "c"):
        (trial.path / "checkpoints" / "10" / name).write_text(name * 1000)
    trial.metrics_file.write_text('{"step": 10}\n')
    scandir, copyfile = os.scandir, shutil.copyfile

    @contextlib.contextmanager
    def config_first(path="."):  # as a file system that lists in creation order does
        with scandir(path) as entries:
            yield iter(sorted(entries, key=lambda e: (e.name != "config.json", e.name)))

    def cut_short(source, target, **kwargs):
        if os.fspath(source).endswith("10/b"):
            raise KeyboardInterrupt  # Ctrl-C in the middle of the checkpoint
        return copyfile(source, target, **kwargs)

    monkeypatch.setattr(os, "scandir", config_first)
    monkeypatch.setattr(shutil, "copyfile", cut_short)
    winner = SimpleNamespace(run=trial)
    outcome = SimpleNamespace(run=RunDirectory(tmp_path / "final"), name="final")
    with pytest.raises(KeyboardInterrupt):
        tuning._copy_winner(winner, outcome)
    monkeypatch.setattr(shutil, "copyfile", copyfile)
    assert not outcome.run.config_file.exists()  # not yet a run: the rerun copies it again
    tuning._copy_winner(winner, outcome)  # the rerun
    files = sorted(str(p.relative_to(outcome.run.path)) for p in outcome.run.path.rglob("*"))
    assert files == [
        "checkpoints", "checkpoints/10", "checkpoints/10/a", "checkpoints/10/b",
        "checkpoints/10/c", "config.json", "metrics.jsonl", outcome.run.winning_trial_file.name,
    ]  # fmt: skip
    assert (outcome.run.path / "checkpoints" / "10" / "b").read_text() == "b" * 1000
