"""The notebooks' helpers: their settings, their configs, and the trace of attention inputs."""

import json
import logging

import jax
import numpy as np
import pytest

from seq2seq.attention.layers import MultiHeadAttention
from seq2seq.compare import notebook_runs
from seq2seq.compare.notebook_runs import (
    NotebookSettings,
    comparison_settings,
    ensure_comparison,
    ensure_trained,
    has_checkpoint,
    load_comparison,
    notebook_config,
    notebook_settings,
    progress_lines,
)
from seq2seq.compare.suites import expand_suite
from seq2seq.config import ConfigError, flatten, load_config_file
from seq2seq.models import build_model
from seq2seq.models.base import shift_right
from seq2seq.records.run_directory import RunDirectoryError
from seq2seq.report.attention_trace import record_attention_inputs
from tests.conftest import REPO, tiny_config


def test_settings_default_to_the_full_mode_under_the_repository():
    settings = notebook_settings({})
    assert not settings.short
    assert settings.runs == REPO / "runs" / "quickstart"  # make quickstart's runs, shared


def test_settings_read_the_short_switch_and_a_relative_or_absolute_run_directory(tmp_path):
    settings = notebook_settings({"SEQ2SEQ_NOTEBOOK_SHORT": "1", "SEQ2SEQ_NOTEBOOK_RUNS": "runs/x"})
    assert settings.short
    assert settings.runs == REPO / "runs" / "x"
    assert notebook_settings({"SEQ2SEQ_NOTEBOOK_RUNS": str(tmp_path)}).runs == tmp_path
    # The tiny models never land in the full mode's directory (their shapes differ).
    assert notebook_settings({"SEQ2SEQ_NOTEBOOK_SHORT": "1"}).runs != notebook_settings({}).runs


def test_settings_refuse_a_switch_that_is_not_one():
    with pytest.raises(ConfigError, match="SEQ2SEQ_NOTEBOOK_SHORT"):
        notebook_settings({"SEQ2SEQ_NOTEBOOK_SHORT": "yes please"})


@pytest.mark.parametrize("model_name", ["rnnsearch", "transformer"])
def test_full_mode_trains_the_quickstart_model_itself(model_name):
    quickstart = dict(flatten(load_config_file(REPO / f"configs/quickstart_{model_name}.py")))
    full = dict(flatten(notebook_config(model_name, short=False)))
    changed = {key for key in quickstart if quickstart[key] != full[key]}
    assert changed <= {"train.steps"}  # so the notebook and make quickstart share their runs


@pytest.mark.parametrize("model_name", ["rnnsearch", "transformer"])
def test_short_mode_is_smaller_and_compiles_one_batch_shape(model_name):
    full = notebook_config(model_name, short=False)
    short = notebook_config(model_name, short=True)
    assert short.train.steps < full.train.steps
    widths = [value for _, value in flatten(short.model[model_name]) if isinstance(value, int)]
    full_widths = [value for _, value in flatten(full.model[model_name]) if isinstance(value, int)]
    assert sum(widths) < sum(full_widths)
    assert short.data.bucket_width == short.data.max_length


def test_has_checkpoint_needs_a_numbered_checkpoint(tmp_path):
    assert not has_checkpoint(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    assert not has_checkpoint(tmp_path)
    (tmp_path / "checkpoints" / "20").mkdir()
    assert has_checkpoint(tmp_path)


def test_attention_inputs_name_where_queries_keys_and_values_come_from():
    config = tiny_config("transformer")
    model = build_model(config, 30, 30, seed=0)
    source = jax.random.randint(jax.random.key(0), (2, 7), 3, 30)
    target_inputs = shift_right(jax.random.randint(jax.random.key(1), (2, 5), 3, 30))
    project_query = MultiHeadAttention.project_query

    calls = record_attention_inputs(model, source, target_inputs)

    assert MultiHeadAttention.project_query is project_query  # the class is left as it was
    assert [call.module for call in calls] == [
        "encoder_layers/0/self_attention",
        "encoder_layers/1/self_attention",
        "decoder_layers/0/self_attention",
        "decoder_layers/0/cross_attention",
        "decoder_layers/1/self_attention",
        "decoder_layers/1/cross_attention",
    ]
    memory = np.asarray(model.encode(source)["memory"])  # [B, S, D]
    for call in calls:
        if call.module.endswith("cross_attention"):
            np.testing.assert_allclose(call.key_value_inputs, memory, atol=1e-6)
            assert call.query_inputs.shape == (2, 5, config.model.transformer.d_model)
        else:
            np.testing.assert_array_equal(call.query_inputs, call.key_value_inputs)


def test_a_report_finds_its_runs_from_any_folder_also_one_written_with_relative_paths(
    tmp_path, monkeypatch
):
    """Reports before absolute paths held each run's folder relative to where the comparison
    ran (``make quickstart``: the repository root); read from elsewhere (a notebook runs in
    notebooks/), the run is found beside the report."""
    comparison = tmp_path / "runs" / "quickstart"
    for name, loss in (("quickstart_rnnsearch", 1.5), ("moved", 2.5)):
        (comparison / name).mkdir(parents=True)
        (comparison / name / "metrics.jsonl").write_text(json.dumps({"loss": loss}) + "\n")
    runs = [
        {"workdir": "runs/quickstart/quickstart_rnnsearch"},  # relative to the comparison's cwd
        {"workdir": str(comparison / "moved")},  # absolute
    ]
    (comparison / "report.json").write_text(json.dumps({"runs": runs}))
    monkeypatch.chdir(tmp_path / "runs")  # not where the comparison ran
    report = load_comparison(comparison)
    assert [run["records"] for run in report["runs"]] == [[{"loss": 1.5}], [{"loss": 2.5}]]
    assert report["runs"][0]["workdir"] == str(comparison / "quickstart_rnnsearch")


def test_the_comparison_runs_once_into_a_folder_without_a_report(tmp_path, monkeypatch):
    """The quickstart suite with the mode's settings, as ``make quickstart``'s command runs it
    (tests/test_notebooks.py runs that command and both notebooks on its report)."""
    calls = []

    def record(specs, workdir, settings):
        calls.append((specs, workdir, settings))
        (workdir / "report.json").write_text("{}")

    monkeypatch.setattr(notebook_runs, "compare", record)
    settings = NotebookSettings(short=True, runs=tmp_path / "runs")
    (tmp_path / "runs").mkdir()
    assert ensure_comparison(settings) == ensure_comparison(settings) == settings.runs
    assert calls == [(expand_suite("quickstart"), settings.runs, comparison_settings(settings))]


def test_a_comparison_the_notebook_runs_shows_the_command_line_s_progress_lines(
    tmp_path, monkeypatch, capsys
):
    """A notebook sets up no logging: training printed nothing for minutes. The lines come as
    the command line prints them (message only), once each when the cell runs again, and the
    logger is left as it was for callers outside a notebook."""
    logger = logging.getLogger("seq2seq")
    before = (logger.level, logger.propagate, list(logger.handlers))

    def log_a_round(specs, workdir, settings):
        logging.getLogger("seq2seq.compare.runner").info("== round %d: %d runs to train", 1, 2)
        logging.getLogger("seq2seq.data.pipeline").warning("vocabulary: smaller")
        logging.getLogger("elsewhere").info("not the project's")

    monkeypatch.setattr(notebook_runs, "compare", log_a_round)
    settings = NotebookSettings(short=True, runs=tmp_path)
    for _ in range(2):  # the cell run again
        ensure_comparison(settings)
        shown = capsys.readouterr()
        assert shown.out.splitlines()[1:] == ["== round 1: 2 runs to train"]
        assert shown.err == "vocabulary: smaller\n"
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    with progress_lines():
        pass
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


@pytest.mark.parametrize("what", ["a train.py run", "a folder of run records"])
def test_a_runs_folder_that_is_not_a_comparison_s_is_refused_before_anything_trains(
    tmp_path, monkeypatch, what
):
    """SEQ2SEQ_NOTEBOOK_RUNS pointed at a ``train.py`` run trained the whole quickstart suite
    inside it, where ``compare --workdir`` refuses the folder."""
    runs = tmp_path / "t"
    if what == "a train.py run":
        (runs / "checkpoints" / "60").mkdir(parents=True)
        (runs / "config.json").write_text("{}")
    else:  # --save_records' copies: a config and metrics, no checkpoints
        (runs / "quickstart_rnnsearch").mkdir(parents=True)
        (runs / "quickstart_rnnsearch" / "config.json").write_text("{}")
        (runs / "quickstart_rnnsearch" / "metrics.jsonl").write_text("")
    before = sorted(p.relative_to(runs) for p in runs.rglob("*"))
    monkeypatch.setattr(notebook_runs, "compare", lambda *_: pytest.fail("compare ran"))
    monkeypatch.setattr(notebook_runs, "train", lambda *_: pytest.fail("train ran"))
    settings = NotebookSettings(short=True, runs=runs)
    for ensure in (ensure_comparison, lambda s: ensure_trained(s, "transformer")):
        with pytest.raises(RunDirectoryError, match=f"^SEQ2SEQ_NOTEBOOK_RUNS {runs} holds "):
            ensure(settings)
    assert sorted(p.relative_to(runs) for p in runs.rglob("*")) == before


def test_a_model_the_notebook_trains_is_validated_as_train_py_validates(tmp_path):
    """attention_qkv.ipynb trains the quickstart runs on a fresh clone; ``make quickstart`` then
    finds RNNsearch at its steps and trains nothing, so its report's validation curve and best
    perplexity are the records written here."""
    settings = NotebookSettings(short=True, runs=tmp_path)
    workdir = ensure_trained(settings, "rnnsearch")
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    validations = [r for r in records if r.get("kind") == "validation"]
    assert validations and validations[-1]["step"] == notebook_config("rnnsearch", True).train.steps
    assert validations[-1]["perplexity"] > 1.0
