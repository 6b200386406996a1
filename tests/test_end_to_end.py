"""One small run per model through the real entry points: train.py, then eval.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from seq2seq.data import synthetic
from tests.conftest import ONE_SEARCH_LOOP, REPO, SHRINK, subprocess_env

pytestmark = pytest.mark.slow


def _run(*args):
    result = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both models trained briefly under ``runs/NAME``, as ``make quickstart`` lays them out."""
    root = tmp_path_factory.mktemp("runs")
    results = {}
    for name in ("transformer", "rnnsearch"):
        workdir = root / name
        training = _run(*_train_arguments(name, workdir))
        # Greedy: an untrained model's outputs run to the length limit, and beam search has its
        # own tests (test_decoding, test_evaluation); this one is about the pipeline.
        evaluation = _run(
            "eval.py", "--workdir", str(workdir), "--split", "test", "--beam_size", "1"
        )
        results[name] = json.loads(evaluation.stdout.strip().splitlines()[-1])
        results[name]["train_log"] = training.stderr
        results[name]["eval_stdout"] = evaluation.stdout
    return root, results


def _train_arguments(name: str, workdir) -> list[str]:
    return [
        "train.py",
        "--config",
        f"configs/quickstart_{name}.py",
        "--workdir",
        str(workdir),
        "--config.train.steps=12",
        "--config.train.log_every_steps=4",
        "--config.checkpoint.every_steps=8",
        "--config.data.tokens_per_batch=512",
        "--config.eval.num_examples=32",
        "--config.data.bucket_width=48",  # one padded length (the quickstarts' longest): one
        ONE_SEARCH_LOOP,  # training step and one search to compile, in train.py and eval.py
        *SHRINK[name],
    ]


@pytest.fixture(params=["transformer", "rnnsearch"])
def trained(request, runs):
    root, results = runs
    return root / request.param, results[request.param]


def test_metrics_log_has_a_line_per_logged_step(trained):
    workdir, _ = trained
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r["kind"] == "train"]
    assert [r["step"] for r in records] == [4, 8, 12]
    for record in records:
        assert record["loss"] > 0 and record["learning_rate"] > 0
        assert record["target_tokens_per_second"] > 0


def test_the_log_without_a_terminal_says_how_far_the_run_is_and_what_is_left(trained):
    _, result = trained
    lines = [line for line in result["train_log"].splitlines() if ": mean loss " in line]
    assert len(lines) == 3, lines
    assert "step 4/12 (33%, " in lines[0] and "step 8/12 (67%, " in lines[1]
    assert "step 12/12 (100%, 0 s of training to go): mean loss " in lines[2]


def test_eval_bleu_equals_sacrebleu_on_its_hypothesis_file(trained):
    workdir, result = trained  # greedy, filed beside the run's own beam's scores: "-beam1"
    hypotheses = (workdir / "eval" / "test-beam1.hyp.txt").read_text().splitlines()
    references = [target for _, target in synthetic.load_split("test")]
    assert len(hypotheses) == len(references) == result["n"]
    metric = BLEU()
    expected = metric.corpus_score(hypotheses, [references])
    assert result["bleu"] == pytest.approx(expected.score, abs=1e-9)
    assert result["bleu"] > 0  # the hypotheses translate the references' own sources
    assert result["signature"] == str(metric.get_signature())


def test_eval_names_its_two_files_and_leaves_the_provenance_in_them(trained):
    """Its last line was a page long: the provenance (versions, flags, CPU) of run and eval."""
    workdir, result = trained
    printed = {k: v for k, v in result.items() if k not in ("train_log", "eval_stdout")}
    assert "provenance" not in printed
    assert result["eval_stdout"].splitlines()[-2] == (
        f"  written to {workdir / 'eval' / 'test-beam1.json'} (the scores and their provenance) "
        f"and {workdir / 'eval' / 'test-beam1.hyp.txt'}"
    )
    assert not (workdir / "eval" / "test.json").exists()  # the run's own beam: not scored here
    filed = json.loads((workdir / "eval" / "test-beam1.json").read_text())
    assert filed.pop("provenance")["run"]["argv"][0] == "train.py"
    assert filed == printed


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full, the full disk here")
def test_a_full_disk_is_one_line_saying_what_to_do(runs, tmp_path):
    """Writes to /dev/full fail as on a full disk, naming no file: it was a traceback."""
    root, _ = runs
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s, _ in synthetic.load_split("test")[:3]))
    result = subprocess.run(
        [sys.executable, "eval.py", "--workdir", str(root / "transformer"),
         "--input", str(source), "--output", "/dev/full"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=subprocess_env(),
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        "error: No space left on device; free some space and rerun the command\n"
    )


def test_the_same_command_again_says_the_run_has_ended_and_changes_nothing(runs):
    """It printed "trained to step 12, loss nan, 0 s"."""
    workdir = runs[0] / "transformer"
    checkpoints = sorted(p.name for p in (workdir / "checkpoints").iterdir())
    log = (workdir / "metrics.jsonl").read_text()
    again = _run(*_train_arguments("transformer", workdir))
    assert again.stdout.splitlines()[-1] == (
        "nothing to train: the run here had already trained to step 12, its budget; raise "
        "--config.train.steps (or train.time_budget_minutes) to go on"
    )
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == checkpoints
    assert (workdir / "metrics.jsonl").read_text() == log


def test_fewer_steps_than_the_run_trained_are_refused_and_nothing_is_written(runs):
    """It said "nothing to train" but rewrote config.json to the lower steps (the record then
    understated what the run trained) and added a provenance entry and a TensorBoard file."""
    workdir = runs[0] / "transformer"

    def contents():
        files = sorted(p for p in workdir.rglob("*") if p.is_file())
        return {str(p.relative_to(workdir)): p.read_bytes() for p in files}

    before = contents()
    arguments = _train_arguments("transformer", workdir)
    arguments[arguments.index("--config.train.steps=12")] = "--config.train.steps=8"
    result = subprocess.run(
        [sys.executable, *arguments], cwd=REPO, capture_output=True, text=True, timeout=300,
        env=subprocess_env(),
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {workdir} has trained to step 12, past the 8 steps asked for (train.steps); "
        "nothing was changed: raise --config.train.steps to 12 or more to go on, score a step "
        "it kept with eval.py --checkpoint STEP, or pass a new --workdir for a shorter run\n"
    )
    assert contents() == before


def test_run_saved_its_config_and_final_checkpoint(trained):
    workdir, _ = trained
    assert json.loads((workdir / "config.json").read_text())["train"]["steps"] == 12
    assert (workdir / "checkpoints" / "12").is_dir()


def test_a_run_trains_on_from_its_own_saved_config(runs, tmp_path):
    """``--config configs/from_run.py:RUN`` with the run's own folder (a copy of the trained
    Transformer): it resumes with every value it saved, the override on top, nothing else."""
    import shutil

    from seq2seq import config as config_lib

    run = tmp_path / "transformer"
    shutil.copytree(runs[0] / "transformer", run)
    before = config_lib.load_saved(run / "config.json").to_dict()
    on = _run("train.py", "--config", f"configs/from_run.py:{run}", "--workdir", str(run),
              "--config.train.steps=14")  # fmt: skip
    assert "trained to step 14" in on.stdout, on.stderr[-2000:]
    after = config_lib.load_saved(run / "config.json").to_dict()
    assert after["train"].pop("steps") == 14 and before["train"].pop("steps") == 12
    assert after == before


def test_tensorboard_lists_the_run_by_its_hyperparameters_beside_its_validation(trained):
    """``make tensorboard``'s HParams dashboard: the run is a session whose hyperparameters are
    its config's, its own family's section only, with its validation BLEU to sort by."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    workdir, _ = trained
    family = workdir.name
    events = EventAccumulator(str(workdir / "tensorboard")).Reload()
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    shown = HParamsPluginData.FromString(content).session_start_info.hparams
    assert shown["model.name"].string_value == family
    assert shown["train.steps"].number_value == 12  # the command line's override
    assert shown["data.tokens_per_batch"].number_value == 512
    other = "rnnsearch" if family == "transformer" else "transformer"
    assert any(key.startswith(f"model.{family}.") for key in shown)
    assert not any(key.startswith(f"model.{other}.") for key in shown)
    assert "validation/bleu" in events.Tags()["scalars"]


def test_alignment_figures_of_trained_models(runs, tmp_path, monkeypatch):
    """RNNsearch gives one heatmap, the Transformer a layer x (heads + mean) grid."""
    from seq2seq.evaluation.translator import Translator
    from seq2seq.report import figures

    drawn = {}
    for form in ("plot_rnn_alignment", "plot_transformer_attention"):
        original = getattr(figures, form)

        def spy(alignment, path, title, form=form, original=original):
            figure = original(alignment, path, title)
            drawn[path.name] = (form, len(figure.axes))
            return figure

        monkeypatch.setattr(figures, form, spy)
    root, _ = runs
    sentence = synthetic.load_split("test")[0][0]
    for name in ("rnnsearch", "transformer"):
        translator = Translator.restore(root / name, beam_size=1)
        (path,) = figures.alignment_figures(translator, [sentence], tmp_path, name)
        assert path.stat().st_size > 10_000
    transformer = json.loads((root / "transformer" / "config.json").read_text())["model"]
    layers, heads = (
        transformer["transformer"]["decoder_layers"],
        transformer["transformer"]["num_heads"],
    )
    assert drawn == {
        "rnnsearch_alignment_1.png": ("plot_rnn_alignment", 1),
        "transformer_alignment_1.png": ("plot_transformer_attention", layers * (heads + 1)),
    }


def test_eval_draws_each_non_empty_line_s_attention_named_by_its_line(runs, tmp_path):
    root, _ = runs
    sources = [source for source, _ in synthetic.load_split("test")[:2]]
    given, folder = tmp_path / "in.txt", tmp_path / "attention"
    given.write_text(f"{sources[0]}\n\n{sources[1]}\n")
    folder.mkdir()  # an earlier input's figures (its line 2 is this one's empty line), and a file
    for name in ("line2.png", "line9.png", "notes.png"):  # of the user's
        (folder / name).write_bytes(b"not this input's")
    result = _run("eval.py", "--workdir", str(root / "rnnsearch"), "--input", str(given),
                  "--output", str(tmp_path / "out.txt"), "--attention", str(folder),
                  "--beam_size", "1")  # fmt: skip
    assert sorted(p.name for p in folder.iterdir()) == ["line1.png", "line3.png", "notes.png"]
    for path in folder.glob("line*.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.stdout.splitlines()[-2] == (
        f"  attention of 2 lines drawn in {folder} (lineN.png: input line N); 2 figures of "
        "another input removed"
    )
    printed = json.loads(result.stdout.splitlines()[-1])
    assert printed["attention"] == {"folder": str(folder), "figures": 2}


def test_each_line_s_attention_is_of_its_source_and_the_translation_given(
    runs, tmp_path, monkeypatch
):
    """The translation written is forced through the model, not searched again: the figure's
    rows are its words, whatever the model would say now."""
    from seq2seq.evaluation.translator import Translator
    from seq2seq.report import figures

    drawn = {}

    def spy(alignment, path, title=""):
        words = [
            "".join(pieces[:-1]).replace("\u2581", " ").strip()
            for pieces in (alignment.source_pieces, alignment.target_pieces)
        ]
        drawn[path.name] = (*words, alignment.weights.shape[2:], title)

    monkeypatch.setattr(figures, "draw_attention", spy)
    root, _ = runs
    source = synthetic.load_split("test")[0][0]
    translator = Translator.restore(root / "rnnsearch", beam_size=1)
    lines = [(2, source, "der hund"), (5, source, "")]
    figures.attention_of_lines(translator, lines, tmp_path, "rnnsearch")
    length = len(source.split()) + 1  # the word tokenizer's pieces, and EOS
    assert drawn == {
        "line2.png": (source, "der hund", (3, length), "rnnsearch, line 2"),
        "line5.png": (source, "", (1, length), "rnnsearch, line 5"),
    }
