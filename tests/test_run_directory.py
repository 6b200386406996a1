"""The work directory: one owner of its layout, a run's identity from the schema, light reads."""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from seq2seq import config as config_lib
from seq2seq.data.sources import corpus_fingerprint
from seq2seq.records.run_directory import RunDirectory, RunDirectoryError
from tests.conftest import REPO, tiny_config


def test_a_file_is_refused_as_a_work_directory(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    with pytest.raises(RunDirectoryError, match="is an existing file"):
        RunDirectory(path).create()
    assert path.read_text() == "keep me"


def test_a_folder_of_other_things_is_refused_and_a_runs_own_folder_is_not(tmp_path):
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    for name in ("notes.txt", "README.md", "train.en", "train.de", ".DS_Store"):
        (folder / name).write_text(name)
    with pytest.raises(RunDirectoryError) as error:
        RunDirectory(folder).create()
    assert str(error.value) == (
        f"--workdir {folder} holds no run but 5 entries of its own (README.md, data/, notes.txt, "
        "train.de, ...); nothing was written: pass a new or empty folder"
    )
    assert sorted(p.name for p in folder.iterdir()) == [
        ".DS_Store", "README.md", "data", "notes.txt", "train.de", "train.en"
    ]  # fmt: skip
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / ".ipynb_checkpoints").mkdir()
    RunDirectory(hidden).create().save_config(tiny_config("transformer"))
    # a run's folder may hold anything beside the run: a researcher's notes on it
    (hidden / "notes.txt").write_text("lr too high?")
    RunDirectory(hidden).create()


def test_a_folder_of_runs_passed_as_one_names_the_runs_in_it(tmp_path):
    """``eval.py --workdir runs/quickstart``: the comparison's folder, not one of its runs."""
    comparison = tmp_path / "quickstart"
    for name in ("quickstart_transformer", "quickstart_rnnsearch"):
        RunDirectory(comparison / name).create().save_config(tiny_config("transformer"))
    (comparison / "figures").mkdir()
    with pytest.raises(RunDirectoryError) as error:
        RunDirectory(comparison).load_config()
    assert str(error.value) == (
        f"{comparison} is not a run but holds 2 runs in its folders (quickstart_rnnsearch, "
        f"quickstart_transformer); pass one of them, e.g. --workdir "
        f"{comparison}/quickstart_rnnsearch"
    )
    with pytest.raises(RunDirectoryError) as error:
        RunDirectory(comparison / "figures").require()
    assert str(error.value) == (
        f"{comparison}/figures holds no run (no config.json); pass the --workdir that train.py "
        "or compare trained a run in"
    )


def test_every_file_of_the_layout_may_be_in_a_folder_a_run_starts_in(tmp_path):
    """A start after a failed one, or a final run copied from its tuning trial, finds the
    layout's own files and no config: none of them may count as another tool's."""
    run = RunDirectory(tmp_path / "run")
    names = [n for n, v in vars(RunDirectory).items() if isinstance(v, property) and n != "path"]
    assert len(names) == 13, names  # every path the layout names
    for name in names:
        path = getattr(run, name)
        if name.endswith("_dir"):
            (path / "made").mkdir(parents=True)
        elif name != "config_file":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
    run.create().save_config(tiny_config("transformer"))
    assert run.load_config().model.name == "transformer"


def test_each_checkpoint_rule_has_its_own_eval_files(tmp_path):
    run = RunDirectory(tmp_path)
    names = {
        rule: (
            run.eval_result_file("test_2016", rule).name,
            run.hypotheses_file("test_2016", rule).name,
        )
        for rule in ("latest", "best", "average:5", "1500")
    }
    assert names == {
        "latest": ("test_2016.json", "test_2016.hyp.txt"),
        "best": ("test_2016@best.json", "test_2016@best.hyp.txt"),
        "average:5": ("test_2016@average5.json", "test_2016@average5.hyp.txt"),
        "1500": ("test_2016@step1500.json", "test_2016@step1500.hyp.txt"),
    }
    run.eval_dir.mkdir()
    run.eval_result_file("test_2016", "best").write_text('{"bleu": 1.0}')
    assert run.read_eval_result("test_2016", "best") == {"bleu": 1.0}
    assert run.read_eval_result("test_2016") is None


def test_identity_covers_every_data_key_and_only_the_chosen_model():
    config = tiny_config("transformer")
    keys = config_lib.identity_keys(config)
    data_keys = [key for key, _ in config_lib.flatten(config.data)]
    assert {f"data.{key}" for key in data_keys} - set(keys) == {
        "data.eval_split",
        "data.test_split",
    }
    assert "seed" in keys and "model.transformer.d_model" in keys
    assert not any(key.startswith("model.rnnsearch.") for key in keys)
    assert not any(key.startswith(("eval.", "decode.", "checkpoint.")) for key in keys)
    # Optimisation changes what is trained; how far it goes does not.
    assert {"train.learning_rate", "train.label_smoothing", "train.warmup_steps"} <= set(keys)
    assert not {"train.steps", "train.time_budget_minutes"} & set(keys)
    config.train.schedule = "warmup_cosine"  # decays over train.steps: more steps, new schedule
    assert "train.steps" in config_lib.identity_keys(config)


def _started(run: RunDirectory) -> RunDirectory:
    """The run has made something: a log line of its first steps."""
    run.metrics_file.write_text('{"step": 2, "kind": "train", "loss": 3.0}\n')
    return run


def test_a_changed_learning_rate_is_refused_naming_every_changed_key(tmp_path):
    run = RunDirectory(tmp_path).create()
    run.save_config(tiny_config("transformer"))
    _started(run)
    saved = run.config_file.read_text()
    other = tiny_config("transformer")
    other.train.learning_rate = 0.5
    other.train.label_smoothing = 0.0
    with pytest.raises(RunDirectoryError) as error:
        run.save_config(other)
    message = str(error.value)
    assert "config.train.learning_rate: 1.0 -> 0.5" in message
    assert "config.train.label_smoothing: 0.1 -> 0.0" in message
    assert "\n" not in message and "new --workdir" in message
    assert run.config_file.read_text() == saved


def test_a_run_of_another_shape_is_refused_and_nothing_is_overwritten(tmp_path):
    run = RunDirectory(tmp_path).create()
    config = tiny_config("transformer")
    run.save_config(config)
    _started(run)
    saved = run.config_file.read_text()
    other = tiny_config("transformer")
    other.data.bucket_width = 8  # changes the stream of batches a resume continues
    with pytest.raises(RunDirectoryError, match="config.data.bucket_width"):
        run.save_config(other)
    assert run.config_file.read_text() == saved
    longer = tiny_config("transformer")
    longer.train.steps = 999  # training longer is the same run
    longer.model.rnnsearch.maxout_size = 7  # the other model's fields do not count
    run.save_config(longer)
    assert run.load_config().train.steps == 999


@pytest.mark.parametrize("made", ["metrics.jsonl", "checkpoints/5/state/data", "eval/test.json"])
def test_a_start_that_failed_before_training_does_not_hold_the_folder(tmp_path, made):
    # A first start with a bad value (here the wrong source language) stopped on its data: its
    # config, provenance and what they derive before training (a tokenizer, an encoded split)
    # are all it left, so a corrected start may take the folder, and drops what it derived.
    run = RunDirectory(tmp_path).create()
    wrong = tiny_config("transformer")
    wrong.data.src_lang = "xx"
    run.save_config(wrong)
    run.provenance_file.write_text('{"entries": []}\n')
    for derived in ("tokenizer/spm.model", "encoded/train-0123/source_ids.npy"):
        (tmp_path / derived).parent.mkdir(parents=True)
        (tmp_path / derived).write_text("x")
    assert run.never_started()
    faster = wrong.copy_and_resolve_references()
    faster.train.learning_rate *= 2  # not a data key: the tokenizer stays
    run.save_config(faster)
    assert run.tokenizer_dir.exists() and run.encoded_dir.exists()
    right = tiny_config("transformer")
    run.save_config(right)
    assert run.load_config().data.src_lang == right.data.src_lang
    assert not run.tokenizer_dir.exists() and not run.encoded_dir.exists()
    # Once the run has made anything else (a log line, a checkpoint, a score), its config is
    # its identity again.
    (tmp_path / made).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / made).write_text("x")
    with pytest.raises(RunDirectoryError, match="config.data.src_lang"):
        run.save_config(wrong)
    assert run.load_config().data.src_lang == right.data.src_lang


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"architectures": ["BertModel"]}\n', "unknown config key 'architectures'"),
        ("hidden_size: 768\n", "not JSON: Expecting value"),
        ("[1, 2]\n", "not a JSON object"),
    ],
)
def test_another_tools_config_json_is_never_replaced(tmp_path, text, reason):
    # Alone in its folder, it looked like the config of a start that made nothing.
    (tmp_path / "config.json").write_text(text)
    run = RunDirectory(tmp_path).create()
    with pytest.raises(RunDirectoryError) as error:
        run.save_config(tiny_config("transformer"))
    message = str(error.value)
    assert message.startswith(f"{run.config_file} is not a config this version of seq2seq saved")
    assert reason in message and "nothing was overwritten" in message and "\n" not in message
    assert (tmp_path / "config.json").read_text() == text
    with pytest.raises(config_lib.ConfigError) as error:  # eval.py's reading of it
        run.load_config()
    assert str(error.value) == (
        f"{run.config_file} is not a config this version of seq2seq saved ({error.value.reason}"
        "); put back the run's own config.json, or pass another run's folder"
    )
    assert error.value.reason.startswith(reason)


def test_reading_a_run_for_evaluation_never_imports_the_trainer():
    code = (
        "import sys, seq2seq.evaluation.evaluate, seq2seq.evaluation.translator;"
        "print(sorted(m for m in sys.modules if m.startswith('seq2seq.training')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = eval(result.stdout)  # a printed list of module names
    assert "seq2seq.training.trainer" not in loaded
    assert "seq2seq.training.schedules" not in loaded


def _text_corpus(folder, pairs) -> str:
    """``pairs`` written as Multi30k-style files train.en / train.de in ``folder``."""
    folder.mkdir()
    (folder / "train.en").write_text("".join(f"{en}\n" for en, _ in pairs), "utf-8")
    (folder / "train.de").write_text("".join(f"{de}\n" for _, de in pairs), "utf-8")
    return str(folder)


def _text_config(folder: str):
    config = tiny_config("transformer")
    config.data.source, config.data.dir = "text", folder
    return config


PAIRS = [("a dog runs", "ein Hund rennt"), ("two men sit", "zwei Männer sitzen")]


def test_a_text_corpus_moved_to_another_folder_is_the_same_run_and_a_changed_one_is_not(tmp_path):
    first = _text_corpus(tmp_path / "first", PAIRS)
    run = RunDirectory(tmp_path / "run").create()
    run.save_config(_text_config(first))
    run.record_corpus(_text_config(first), corpus_fingerprint)
    _started(run)
    recorded = run.corpus_file.read_text()
    assert json.loads(recorded)["train.de"]["bytes"] == len(
        "ein Hund rennt\nzwei Männer sitzen\n".encode()
    )

    moved = shutil.copytree(first, tmp_path / "moved")
    shutil.rmtree(first)
    run.save_config(_text_config(str(moved)), fingerprint=corpus_fingerprint)  # same bytes
    assert run.load_config().data.dir == str(moved)
    run.record_corpus(_text_config(str(moved)), corpus_fingerprint)
    assert run.corpus_file.read_text() == recorded  # the first start's record is kept

    edited = _text_corpus(tmp_path / "edited", [PAIRS[0], ("two men sit", "zwei Männer stehen")])
    with pytest.raises(RunDirectoryError) as error:
        run.save_config(_text_config(edited), fingerprint=corpus_fingerprint)
    message = str(error.value)
    assert f"config.data.dir: {str(moved)!r} -> {edited!r}" in message
    assert "its train.de are not the files this run trained on" in message
    with pytest.raises(RunDirectoryError, match=f"data folder {tmp_path / 'gone'} does not exist"):
        run.save_config(_text_config(str(tmp_path / "gone")), fingerprint=corpus_fingerprint)
    assert run.load_config().data.dir == str(moved)

    # Without a way to read the files (or a record of them) a new folder is refused, as before.
    with pytest.raises(RunDirectoryError, match="config.data.dir"):
        run.save_config(_text_config(first))
    run.corpus_file.unlink()
    with pytest.raises(RunDirectoryError, match="started before runs recorded one"):
        run.save_config(_text_config(first), fingerprint=corpus_fingerprint)


def test_a_folder_without_the_recorded_training_files_holds_another_corpus(tmp_path):
    """eval.py --data_dir files scores apart when the folder is not the run's corpus moved."""
    first = _text_corpus(tmp_path / "first", PAIRS)
    run = RunDirectory(tmp_path / "run").create()
    run.save_config(_text_config(first))
    assert not run.holds_another_corpus(_text_config(first), corpus_fingerprint)  # none recorded
    run.record_corpus(_text_config(first), corpus_fingerprint)
    moved = shutil.copytree(first, tmp_path / "moved")
    assert not run.holds_another_corpus(_text_config(str(moved)), corpus_fingerprint)
    edited = _text_corpus(tmp_path / "edited", [PAIRS[0], ("two men sit", "zwei Männer stehen")])
    assert run.holds_another_corpus(_text_config(edited), corpus_fingerprint)
    held_out = tmp_path / "held_out"  # test files only
    held_out.mkdir()
    (held_out / "test.en").write_text("a dog runs\n", "utf-8")
    (held_out / "test.de").write_text("ein Hund rennt\n", "utf-8")
    assert run.holds_another_corpus(_text_config(str(held_out)), corpus_fingerprint)


def test_the_comparison_reuses_a_run_whose_corpus_moved_and_refuses_one_whose_corpus_changed(
    tmp_path,
):
    from seq2seq.compare import runner

    first = _text_corpus(tmp_path / "first", PAIRS)
    run = RunDirectory(tmp_path / "run").create()
    run.save_config(_text_config(first))
    run.record_corpus(_text_config(first), corpus_fingerprint)
    _started(run)
    moved = shutil.copytree(first, tmp_path / "moved")
    runner.check_reuse([SimpleNamespace(config=_text_config(str(moved)), run=run)])
    (moved / "train.en").write_text("a cat runs\ntwo men sit\n", "utf-8")
    with pytest.raises(config_lib.ConfigError, match="train.en are not the files"):
        runner.check_reuse([SimpleNamespace(config=_text_config(str(moved)), run=run)])


@pytest.mark.slow
def test_training_continues_from_its_corpus_in_another_folder(tmp_path, caplog):
    from seq2seq.data.sources import load_pairs
    from seq2seq.training.trainer import train

    synthetic = tiny_config("transformer")
    first = _text_corpus(tmp_path / "first", load_pairs(synthetic.data, "train", seed=0))
    config = _text_config(first)
    config.train.steps = 10
    workdir = tmp_path / "run"
    assert train(config, workdir).step == 10
    tokenizer = {p.name: p.read_bytes() for p in RunDirectory(workdir).tokenizer_dir.iterdir()}

    moved = shutil.move(first, tmp_path / "moved")
    config = _text_config(str(moved))
    config.train.steps = 20
    with caplog.at_level(logging.INFO, logger="seq2seq.data.pipeline"):
        assert train(config, workdir).step == 20
    assert "training split encoded before" in caplog.text  # not read and tokenized again
    run = RunDirectory(workdir)
    steps = [r["step"] for r in run.read_metrics() if r["kind"] == "train"]
    assert steps == [5, 10, 15, 20]  # continued from step 10, not trained afresh
    assert {p.name: p.read_bytes() for p in run.tokenizer_dir.iterdir()} == tokenizer
    assert run.load_config().data.dir == str(moved)
    assert set(json.loads(run.corpus_file.read_text())) == {"train.de", "train.en"}


def test_a_second_process_cannot_train_a_run_while_one_does(tmp_path):
    """Two ``train.py`` on one folder both trained, writing checkpoints and one metrics.jsonl
    between them. A lock taken twice conflicts even in one process (``flock`` is per open)."""
    from seq2seq.training.trainer import train

    run = RunDirectory(tmp_path / "run").create()
    config = tiny_config("transformer")
    with run.training():
        holder = f"process {os.getpid()} on {socket.gethostname()}"
        with pytest.raises(RunDirectoryError) as error, run.training():
            pass
        assert str(error.value) == (
            f"{run.path} is being trained by {holder}; wait for it to finish (or stop it), then "
            "rerun to continue"
        )
        with pytest.raises(RunDirectoryError, match="is being trained by"):
            train(config, run)  # refused before it writes anything
        assert sorted(p.name for p in run.path.iterdir()) == [".training.lock"]
    assert run.lock_file.read_text() == ""  # the holder's name goes with the lock
    with run.training():  # free again
        run.save_config(config)
    assert run.never_started()  # the lock's file is not something the run made


def test_a_start_that_failed_after_its_tokenizer_takes_the_corrected_config(tmp_path):
    """A data error found once the tokenizer and encoding are written (every pair filtered out
    by data.max_length) left a folder that refused the corrected rerun as a changed run."""
    from seq2seq.training.trainer import train

    run = RunDirectory(tmp_path / "run")
    config = tiny_config("transformer")
    config.train.steps = 2
    wrong = config.copy_and_resolve_references()
    wrong.data.max_length = 2
    with pytest.raises(ValueError, match="no training pairs left after filtering"):
        train(wrong, run)
    assert run.tokenizer_dir.is_dir() and run.encoded_dir.is_dir() and run.never_started()
    stale = run.tokenizer_dir / "stale.txt"  # gone with the config that derived it
    stale.write_text("x")
    train(config, run)
    assert not stale.exists() and run.load_config().data.max_length == config.data.max_length
    assert run.saved_steps() == [2] and not run.never_started()


def test_a_rerun_of_a_start_that_never_trained_records_the_corpus_it_reads(tmp_path):
    """Only a run that trained keeps its first corpus record. One that stopped after its
    tokenizer (a line past the tokenizer's sample was not UTF-8) recorded the bad file, and
    refused the fixed corpus once it had moved."""
    first = _text_corpus(tmp_path / "first", PAIRS)
    run = RunDirectory(tmp_path / "run").create()
    run.save_config(_text_config(first))
    run.record_corpus(_text_config(first), corpus_fingerprint)
    run.tokenizer_dir.mkdir()
    (run.tokenizer_dir / "shared.model").write_text("a model")
    bad = json.loads(run.corpus_file.read_text())
    (tmp_path / "first" / "train.en").write_text("a dog runs\ntwo men stand\n", "utf-8")
    run.save_config(_text_config(first), fingerprint=corpus_fingerprint)
    assert (run.tokenizer_dir / "shared.model").exists()  # the same config keeps its tokenizer
    run.record_corpus(_text_config(first), corpus_fingerprint)
    fixed = json.loads(run.corpus_file.read_text())
    assert fixed != bad and fixed == corpus_fingerprint(_text_config(first))

    _started(run)
    (tmp_path / "first" / "train.en").write_text("a dog runs\ntwo men sat\n", "utf-8")
    run.record_corpus(_text_config(first), corpus_fingerprint)
    assert json.loads(run.corpus_file.read_text()) == fixed  # a run that trained keeps it


def test_a_config_being_written_leaves_the_folder_a_run_to_another_process(tmp_path, monkeypatch):
    """Process 1 of a job checks the folder (``create``) while process 0 writes config.json:
    it found ``config.json.tmp27280`` and refused the folder as holding a stranger's file."""
    from tests.conftest import tiny_config

    run = RunDirectory(tmp_path / "run").create()
    replace, written = config_lib.os.replace, []

    def check_then_replace(source, target):
        RunDirectory(run.path).create()  # what the other process's start does meanwhile
        written.append(os.path.basename(source))
        replace(source, target)

    monkeypatch.setattr(config_lib.os, "replace", check_then_replace)
    config_lib.save(tiny_config(), run.config_file)
    assert len(written) == 1 and run.config_file.is_file()


def test_a_file_written_whole_is_the_old_one_or_the_new_one_never_a_cut_one(tmp_path, monkeypatch):
    """A run's scores and a comparison's report were written in place: a Ctrl-C, SIGKILL or
    full disk during the write left a cut JSON that every later comparison failed the run on."""
    from pathlib import Path

    from seq2seq.records.whole import write_whole

    path = tmp_path / "test@latest.json"
    path.write_text('{"bleu": 30.0}\n')
    write_text = Path.write_text

    def cut_short(self, text, *args, **kwargs):  # half of it on disk, then the interruption
        write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut_short)
    with pytest.raises(KeyboardInterrupt):
        write_whole(path, '{"bleu": 31.5, "n": 1000}\n')
    monkeypatch.undo()
    assert path.read_text() == '{"bleu": 30.0}\n'
    assert [entry.name for entry in tmp_path.iterdir()] == [path.name]  # no temporary left
    write_whole(path, '{"bleu": 31.5}\n')
    assert json.loads(path.read_text()) == {"bleu": 31.5}
