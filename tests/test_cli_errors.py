"""Bad inputs to the real entry points: one line naming the problem and the fix, nothing lost."""

from __future__ import annotations

import errno
import subprocess
import sys
import tempfile

import pytest

from seq2seq import cli
from seq2seq import config as config_lib
from tests.conftest import REPO, subprocess_env, tiny_config, train_command


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    """The single stderr line of a failed run (fails the test on a traceback or exit 0)."""
    assert result.returncode != 0, result.stdout[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    return lines[0]


def _with_config(command: list[str], config_file: str) -> list[str]:
    command = list(command)
    command[command.index("--config") + 1] = config_file
    return command


def test_a_workdir_that_is_a_file_is_refused_and_left_alone(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    line = _one_error_line(_run(train_command(notes)))
    assert str(notes) in line and "is a file" in line and "pass a new folder" in line
    assert notes.read_text() == "my notes\n"
    under = _one_error_line(_run(train_command(notes / "run")))
    assert f"lies under {notes}, which is a file" in under
    assert notes.read_text() == "my notes\n"


def test_a_missing_config_file_is_named(tmp_path):
    workdir = tmp_path / "run"
    line = _one_error_line(_run(_with_config(train_command(workdir), "configs/no_such.py")))
    assert "no config file at configs/no_such.py" in line
    assert "configs/quickstart_transformer.py" in line  # the fix: an example that exists
    assert not workdir.exists(), "no work may start without a config"


@pytest.mark.parametrize(
    ("body", "line_number", "what"),
    [
        ("def get_config(:\n    pass\n", 1, "SyntaxError: invalid syntax"),
        (
            "from seq2seq.config import default_config\n\n\ndef get_config():\n"
            "    config = default_config()\n"
            "    config.train.steps = int('ten')\n"
            "    return config\n",
            6,
            "ValueError: invalid literal for int()",
        ),
    ],
)
def test_an_error_inside_a_config_file_names_the_file_and_line(tmp_path, body, line_number, what):
    broken = tmp_path / "broken.py"
    broken.write_text(body)
    workdir = tmp_path / "run"
    line = _one_error_line(_run(_with_config(train_command(workdir), str(broken))))
    assert f"{broken} line {line_number}: {what}" in line, line
    assert "fix the config file" in line
    assert not workdir.exists()


@pytest.fixture
def text_run(tmp_path):
    """A work directory whose config reads Multi30k-like files (only its config is needed)."""
    data = tmp_path / "data"
    data.mkdir()
    for stem in ("train", "val", "test_2016_flickr"):
        (data / f"{stem}.en").write_text("a dog\n")
        (data / f"{stem}.de").write_text("ein Hund\n")
    (data / "mono.en").write_text("one side only\n")  # not a split: no German side
    config = tiny_config()
    config.data.source, config.data.dir = "text", str(data)
    config.data.eval_split, config.data.test_split = "val", "test_2016_flickr"
    workdir = tmp_path / "run"
    workdir.mkdir()
    config_lib.save(config, workdir / "config.json")
    return workdir


def test_an_unknown_eval_split_lists_the_roles_and_the_splits(text_run):
    saved = (text_run / "config.json").read_text()
    result = _run([sys.executable, "eval.py", "--workdir", str(text_run), "--split", "test2017"])
    line = _one_error_line(result)
    assert "unknown split 'test2017'" in line
    assert "validation (val), test (test_2016_flickr)" in line
    assert line.endswith(": test_2016_flickr, train, val"), line  # "mono" has no German side
    assert sorted(p.name for p in text_run.iterdir()) == ["config.json"]
    assert (text_run / "config.json").read_text() == saved


def test_a_validation_stem_the_folder_lacks_stops_train_py_before_it_writes(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for stem in ("train", "dev"):  # the corpus says "dev" where the config says "validation"
        (data / f"{stem}.en").write_text("a dog\n")
        (data / f"{stem}.de").write_text("ein Hund\n")
    workdir = tmp_path / "run"
    command = train_command(workdir, "transformer", "--config.data.source=text",
                            f"--config.data.dir={data}")  # fmt: skip
    line = _one_error_line(_run(command))
    assert line == (
        f"error: data.eval_split='validation': no validation.en and validation.de in {data} "
        "(its en-de splits: dev, train); pass --config.data.eval_split=dev"
    )
    assert not workdir.exists()  # no tokenizer trained, no folder left behind


def test_a_data_folder_that_does_not_exist_stops_train_py_before_it_writes(tmp_path):
    workdir, gone = tmp_path / "run", tmp_path / "gone"
    command = train_command(workdir, "transformer", "--config.data.source=text",
                            f"--config.data.dir={gone}")  # fmt: skip
    line = _one_error_line(_run(command))
    assert line.startswith(f"error: data folder {gone} does not exist; point config.data.dir")
    assert not workdir.exists()  # it used to leave config.json behind


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        (("--config.mesh.tensor=3",), "config.mesh.fsdp=1 x mesh.tensor=3 does not divide the "
         "job's device count, 4; pick sizes whose product divides it"),
        (("--config.mesh.data=2",), "config.mesh.data=2 x mesh.fsdp=1 x mesh.tensor=1 makes 2 "
         "devices, but the job has 4; set mesh.data=-1"),
    ],
)  # fmt: skip
def test_a_mesh_the_devices_cannot_hold_stops_train_py_before_it_writes(tmp_path, sizes, expected):
    workdir = tmp_path / "run"
    result = subprocess.run(
        train_command(workdir, "transformer", *sizes), cwd=REPO, env=subprocess_env(devices=4),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert _one_error_line(result).startswith(f"error: {expected}")
    assert not workdir.exists()  # it used to leave config.json and provenance.json


def test_a_test_stem_the_moved_corpus_lacks_is_named_with_what_eval_py_can_pass(text_run):
    """eval.py takes no config keys: a folder's test.en and test.de are what ``test`` means
    where the config's stem is not there; other stems are passed as --split."""
    moved = text_run.parent / "moved"
    moved.mkdir()
    for stem in ("train", "val", "test", "dev2010"):
        (moved / f"{stem}.en").write_text("a dog\n")
        (moved / f"{stem}.de").write_text("ein Hund\n")
    command = [sys.executable, "eval.py", "--workdir", str(text_run), "--data_dir", str(moved)]
    result = _run(command)  # resolved, with a warning: it stops only at the missing model
    lines = result.stderr.strip().splitlines()
    assert "no such files in" in lines[0] and "reading its test.en and test.de" in lines[0]
    assert result.returncode != 0 and "holds no trained model yet" in lines[-1], result.stderr[
        -2000:
    ]
    (moved / "test.en").unlink()
    line = _one_error_line(_run(command))
    assert line.endswith("(its en-de splits: dev2010, train, val); pass --split=dev2010")


def test_data_dir_is_refused_for_a_run_of_the_synthetic_task(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    config_lib.save(tiny_config(), run / "config.json")  # the synthetic task
    command = [sys.executable, "eval.py", "--workdir", str(run), "--data_dir", str(tmp_path)]
    line = _one_error_line(_run(command))  # it used to be ignored, scoring the synthetic test
    assert line.startswith("error: --data_dir: this run's data is the built-in synthetic task")


def test_eval_split_roles_are_resolved_before_the_model_is_loaded(text_run):
    # "validation" means the config's eval split "val": the run gets as far as loading the
    # model, which this work directory lacks (an unknown split would have stopped earlier).
    result = _run([sys.executable, "eval.py", "--workdir", str(text_run), "--split", "validation"])
    assert "holds no trained model yet" in _one_error_line(result)


def test_a_config_file_without_get_config_is_named_with_the_fix(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("steps = 10\n")
    workdir = tmp_path / "run"
    line = _one_error_line(_run(_with_config(train_command(workdir), str(plain))))
    assert line == (
        f"error: {plain} defines no get_config(); a config file returns its ConfigDict from "
        "get_config() (see configs/quickstart_transformer.py)"
    )
    assert not workdir.exists()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["-m", "seq2seq.serve", "--workdir", "runs/x", "--port", "99999"], "--port=99999: 99999"),
        (["-m", "seq2seq.serve", "--workdir", "runs/x", "--port", "-5"], "in the range [0, 65535]"),
        (["-m", "seq2seq.bench", "train", "--steps", "-1"], "--steps=-1: -1 is not a positive"),
        (["eval.py", "--workdir", "runs/x", "--sampling", "topk:5", "--seed", "-1"], "--seed=-1"),
    ],
)
def test_out_of_range_numbers_are_refused_before_any_work(command, message):
    # The server announced port 99999 and listened on 99999 mod 65536; the bench ran for 12 s
    # before failing on an empty median.
    line = _one_error_line(_run([sys.executable, *command]))
    assert message in line


def test_help_is_printed_with_exit_status_0_and_a_bad_flag_still_fails(tmp_path):
    # absl ends --help with exit 1, which a script or `make` reads as a failure.
    helped = _run([sys.executable, "train.py", "--help"])
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "--workdir" in helped.stdout and "--config" in helped.stdout
    # -h, which absl does not know, is read as --help: the same page, exit 0.
    short = _run([sys.executable, "train.py", "-h"])
    assert short.returncode == 0 and short.stdout == helped.stdout, short.stderr[-2000:]
    # Past "--" the word is an argument, not a request for help: a flag error as before.
    assert _run([sys.executable, "train.py", "--", "--help"]).returncode != 0
    assert _run([sys.executable, "train.py", "--", "-h"]).returncode != 0
    unknown = _run([sys.executable, "train.py", "--helpme", "--workdir", str(tmp_path / "run")])
    assert unknown.returncode != 0 and not (tmp_path / "run").exists()


def test_every_entry_point_reads_its_flags_through_cli_run():
    # cli.run is what turns --help and -h into exit 0 and a bad flag into one line; a command
    # that calls absl's app.run itself answers --help with exit 1 and -h with a flag error.
    package = REPO / "seq2seq"
    bypassing = [
        str(path.relative_to(REPO))
        for path in [REPO / "train.py", REPO / "eval.py", *package.rglob("*.py")]
        if path.name != "cli.py" and "app.run(" in path.read_text()
    ]
    assert not bypassing, f"entry points that call app.run instead of cli.run: {bypassing}"
    device = _run([sys.executable, "-m", "seq2seq.bench.device", "-h"])
    assert device.returncode == 0 and "--parts" in device.stdout, device.stderr[-2000:]


def _without_jax(tmp_path) -> dict[str, str]:
    """An environment where importing jax fails: a "jax" that raises stands before the real one.

    JAX and flax take about 2 s to import, and a command refused on its flags or files needs
    neither: run under this environment, any import of them ends the command in a traceback.
    """
    blocker = tmp_path / "blocker" / "jax"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('jax was imported')\n")
    env = subprocess_env()
    env["PYTHONPATH"] = f"{blocker.parent}:{env.get('PYTHONPATH', '')}"
    return env


# eval.py translating a file, the input last: what --attention draws from
_ATTENTION_OF = ["eval.py", "--workdir", "{tmp}", "--output", "{tmp}/o.txt", "--input"]
_RECORD = "docs/records/multi30k_ende/rnnsearch-medium-seed0"  # a run's folder, in git
_QUICK_COMPARISON = ["-m", "seq2seq.compare", "--workdir", "{tmp}/w", "--suite", "quickstart"]


def _sysfs_refuses_files() -> bool:
    """Whether /sys refuses a new file even to root: a folder no one may write, to test on."""
    try:
        tempfile.TemporaryFile(dir="/sys").close()
    except OSError:
        return True
    return False


_UNWRITABLE = pytest.mark.skipif(
    not _sysfs_refuses_files(), reason="no folder here refuses writes (/sys takes files)"
)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["train.py", "--config", "configs/missing.py", "--workdir", "{tmp}/run"],
            "no config file",
        ),
        (["eval.py", "--workdir", "{tmp}/no_run"], "no work directory at {tmp}/no_run"),
        (["eval.py", "--workdir", "{tmp}", "--engine", "nope"], "unknown --engine 'nope'"),
        (["eval.py", "--workdir", "{tmp}", "--beam_size", "0"], "--beam_size 0 must be at least 1"),
        (
            ["eval.py", "--workdir", "{tmp}", "--alpha=-0.5"],
            "--alpha -0.5 must be a finite number >= 0",
        ),
        (
            ["eval.py", "--workdir", "{tmp}", "--alpha=nan"],
            "--alpha nan must be a finite number >= 0",
        ),
        (
            [*_QUICK_COMPARISON, "--alpha=nan"],
            "--alpha nan must be a finite number",
        ),  # trained first
        (
            [*_QUICK_COMPARISON, "--save_records", "README.md/records"],
            "--save_records README.md/records lies under README.md, which is a file, not a dir",
        ),  # it trained and scored every run first
        (["-m", "seq2seq.serve", "--workdir", "{tmp}", "--wait_ms=nan"], "--wait_ms nan must be a"),
        (["eval.py", "--workdir", "{tmp}", "--split", ""], "--split is empty; name what it takes"),
        (
            ["eval.py", "--workdir", "{tmp}", "--input", "", "--output", "{tmp}/o"],
            "--input is empty",
        ),  # it scored the test split instead
        (
            [
                "eval.py",
                "--workdir",
                "{tmp}",
                "--input",
                "README.md",
                "--output",
                f"{_RECORD}/metrics.jsonl",
            ],
            f"--output {_RECORD}/metrics.jsonl is one of the run ",
        ),  # it replaced the run's file with the translations
        (
            [*_ATTENTION_OF, ".ci/run", "--attention", _RECORD],
            f"--attention {_RECORD} is a run's folder or in one",
        ),  # the figures went in among the run's files
        (
            ["-m", "seq2seq.bench", "decode", "--beam_size", "0"],
            "--beam_size=0: 0 is not a positive",
        ),
        (
            ["-m", "seq2seq.bench", "decode", "--sentences", "0"],
            "--sentences=0: 0 is not a positive",
        ),
        (
            [
                "-m",
                "seq2seq.bench.summary",
                "--config",
                "configs/bench_small.py",
                "--target_length=0",
            ],
            "--target_length=0: 0 is not a positive integer",
        ),  # a division by zero
        (["eval.py", "--workdir", "{tmp}", "--sampling", "topk:0"], "topk takes a whole number"),
        (["-m", "seq2seq.evaluation.average", "--last=0"], "--last"),
        (["eval.py", "--workdir", "{tmp}", "--max_sentences", "0"], "must be at least 1"),
        (
            [*_ATTENTION_OF, "README.md", "--max_sentences", "5"],
            "--max_sentences takes the first N pairs of a split; --input translates a whole file",
        ),
        (
            ["eval.py", "--workdir", "{tmp}", "--attention", "{tmp}/a"],
            "--attention draws the lines of a file; pass --input FILE --output FILE with it",
        ),
        (
            [*_ATTENTION_OF, ".ci/run", "--attention", "{tmp}/a", "--workdir", "{tmp}/b"],
            "drop --engine ctranslate2, a second --workdir, --sampling and --nbest",
        ),
        (
            [*_ATTENTION_OF, "README.md", "--attention", "{tmp}/a"],
            "over 100; pass the lines you want to look at in a shorter file",
        ),
        (
            [*_ATTENTION_OF, ".ci/run", "--attention", "README.md"],
            "--attention README.md is a file, not a directory; name a folder for the figures",
        ),
        (["train.py", "-h"], None),  # the help page, exit 0
        # a folder this user may not write: found before any work, where it was a traceback
        pytest.param(
            ["train.py", "--config", "configs/quickstart_transformer.py", "--workdir", "/sys/r"],
            "--workdir /sys/r: cannot write in /sys (",
            marks=_UNWRITABLE,
        ),
        pytest.param(
            [*_QUICK_COMPARISON[:2], "--workdir", "/sys/w", *_QUICK_COMPARISON[4:]],
            "--workdir /sys/w: cannot write in /sys (",
            marks=_UNWRITABLE,
        ),
        pytest.param(
            ["eval.py", "--workdir", "{tmp}", "--input", "README.md", "--output", "/sys/o/t.txt"],
            "--output /sys/o/t.txt: cannot write in /sys (",
            marks=_UNWRITABLE,
        ),
        pytest.param(
            [*_QUICK_COMPARISON, "--save_records", "/sys/records"],
            "--save_records /sys/records: cannot write in /sys (",
            marks=_UNWRITABLE,
        ),  # it trained and scored every run, then failed to write the records
        pytest.param(
            ["-m", "seq2seq.evaluation.average", "--workdir", "{tmp}", "--output", "/sys/avg"],
            "--output /sys/avg: cannot write in /sys (",
            marks=_UNWRITABLE,
        ),
        (
            ["train.py", "--config", "configs/quickstart_transformer.py", "--workdir", "{tmp}"],
            "--workdir {tmp} holds no run but an entry of its own (blocker/); nothing was written",
        ),  # it wrote the run's files beside the folder's own
        (
            ["train.py", "--workdir", "{tmp}/run"],
            "--config is required: Experiment config file (configs/*.py); pass it",
        ),
        (["-m", "seq2seq.evaluation.average", "--workdir", "{tmp}"], "--output is required: "),
        (
            [
                "train.py",
                "--config",
                "configs/quickstart_transformer.py",
                "--workdir",
                "{tmp}/run",
                "--config.model.transformer.norm=mid",
            ],
            "config.model.transformer.norm='mid' is not one of post, pre",
        ),
        (["-m", "seq2seq.compare", "--workdir", "{tmp}/w", "--suite", "nope"], "--suite=nope"),
        (
            ["-m", "seq2seq.compare", "--workdir", "{tmp}", "--suite", "quickstart"],
            "--workdir {tmp} holds an entry that no comparison wrote (blocker/); nothing was",
        ),
        ([*_QUICK_COMPARISON, "--beam_size", "0"], "--beam_size 0 must be at least 1 (1: greedy)"),
        (
            [
                "-m",
                "seq2seq.compare",
                "--workdir",
                "docs/records/multi30k_ende",
                "--suite",
                "frontier_tuned",
            ],
            "--workdir docs/records/multi30k_ende holds run records, not runs (",
        ),  # its runs counted as finished, then each failed to score
        (
            [*_QUICK_COMPARISON, "--tune", "nope.key=1,2", "--tune_steps", "5"],
            "--tune: unknown config key 'nope.key'",
        ),
        (["-m", "seq2seq.bench.summary"], "--config is required: Experiment config file"),
        (["-m", "seq2seq.bench", "nope"], "name one command of matmul, train"),
        (["-m", "seq2seq.bench", "train"], "bench train needs --config FILE"),
        (
            ["-m", "seq2seq.bench", "matmul", "--matmul_sizes", "512,big"],
            "--matmul_sizes '512,big': give positive integers",
        ),
        (
            ["-m", "seq2seq.bench", "train", "--config", "configs/bench_small.py", "--meshes=2x2"],
            "--meshes '2x2': give DATAxFSDPxTENSOR",
        ),
        # the accelerator's commands: a refusal there costs the loan's seconds
        (["-m", "seq2seq.bench.device", "--minutes=0"], "--minutes=0: give a budget above 0"),
        (
            ["-m", "seq2seq.bench.real_loop", "--config", "configs/wmt14_ende_transformer_base.py"],
            "--config FILE and --out DIR are required",
        ),
        (
            ["-m", "seq2seq.bench.rnnsearch_bound", "--config", "configs/multi30k_transformer.py"],
            "--config trains model.name='transformer'; this measures RNNsearch's recurrences",
        ),
        (["-m", "seq2seq.bench.step_alone", "--batches=0"], "--batches=0 must be at least 1"),
        (["-m", "seq2seq.serve", "--workdir", "{tmp}/no_run"], "no work directory at {tmp}/no_run"),
        (["-m", "seq2seq.bench", "decode", "--engine", "nope"], "unknown --engine 'nope'"),
        (
            ["-m", "seq2seq.bench", "decode", "--workdir", "{tmp}", "--engine", "ctranslate2"],
            "--engine ctranslate2 times a whole split beside JAX; pass --split",
        ),  # it used to be ignored, timing JAX alone
        (["-m", "seq2seq.serve", "--workdir", "{tmp}", "--beam_size=0"], "--beam_size 0 must be"),
        (  # it warmed up for minutes, gigabytes deep
            ["-m", "seq2seq.serve", "--workdir", "{tmp}", "--beam_size=100000"],
            "--beam_size 100000 is over 64, the widest beam searched",
        ),
        (["-m", "seq2seq.bench.timed_run", "--job", "{tmp}/j.json"], "no job file at {tmp}/j.json"),
        (
            ["-m", "seq2seq.bench.device_frontier", "--out", "{tmp}/o", "--checkpoint", "7"],
            "checkpoint='7': a comparison applies one rule to every run",
        ),
    ],
)
def test_a_refused_command_line_ends_before_jax_is_imported(tmp_path, arguments, message):
    command = [sys.executable, *(a.format(tmp=tmp_path) for a in arguments)]
    result = subprocess.run(
        command, cwd=REPO, env=_without_jax(tmp_path), capture_output=True, text=True, timeout=60
    )
    if message is None:
        assert result.returncode == 0 and "--workdir" in result.stdout, result.stderr[-2000:]
    else:
        assert message.format(tmp=tmp_path) in _one_error_line(result)


def test_a_port_in_use_is_refused_before_the_models_load(tmp_path):
    """It used to be found by uvicorn after every model had compiled, below a line saying the
    models were being served."""
    import socket

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")  # a run's folder, as far as the check goes
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "seq2seq.serve", "--workdir", str(run),
                   "--port", str(port)]  # fmt: skip
        result = subprocess.run(
            command, cwd=REPO, env=_without_jax(tmp_path), capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    assert _one_error_line(result) == (
        f"error: cannot listen on 127.0.0.1:{port} (Address already in use); pass another --port "
        "(0: any free one)"
    )
    assert result.stdout == ""


def test_a_record_folder_that_would_replace_runs_is_refused_before_any_training(tmp_path):
    """``--save_records`` replaced each ``DEST/<run name>`` whole after training: given the
    comparison's own --workdir, or another comparison's, it deleted the runs (checkpoints,
    tokenizer) and then failed to copy from them."""
    comparison = [*_QUICK_COMPARISON[:2], "--workdir", str(tmp_path / "w"), "--suite", "quickstart"]
    env = _without_jax(tmp_path)  # both are refused before JAX loads
    same = subprocess.run(
        [sys.executable, *comparison, "--save_records", f"{tmp_path}/w/"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert _one_error_line(same) == (
        f"error: --save_records {tmp_path}/w/ is the --workdir: each run's record would replace "
        "the run itself; name another folder (e.g. docs/records/NAME)"
    )
    other = tmp_path / "other"  # another comparison's folder, whose run has the same name
    (other / "quickstart_transformer" / "checkpoints" / "2000").mkdir(parents=True)
    (other / "quickstart_transformer" / "config.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, *comparison, "--save_records", str(other)], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert _one_error_line(result) == (
        f"error: --save_records: {other}/quickstart_transformer holds more than a run's record "
        "(checkpoints/): a run, not a copy of one; nothing was replaced: pass another "
        "--save_records folder"
    )
    assert (other / "quickstart_transformer" / "checkpoints" / "2000").is_dir()
    assert not (tmp_path / "w").exists()  # nothing trained


def test_overrides_given_before_the_config_file_apply_to_it(tmp_path):
    """ml_collections refuses ``--config.KEY=V`` before ``--config FILE`` ("Found ... before a
    value for --config was specified"); the commands move the file first instead."""
    from seq2seq.cli import _config_files_first

    argv = ["train.py", "--config.train.steps=3", "--workdir", "w", "--config", "c.py", "-x"]
    assert _config_files_first(argv) == [
        "train.py", "--config", "c.py", "--config.train.steps=3", "--workdir", "w", "-x"
    ]  # fmt: skip
    equals = ["eval.py", "--config.seed=1", "--config=c.py:big"]
    assert _config_files_first(equals) == ["eval.py", "--config=c.py:big", "--config.seed=1"]
    after = ["t.py", "--config", "c.py", "--config.seed=1", "--", "--config.seed=2"]
    assert _config_files_first(after) == after  # in order already; nothing after "--" moves
    summaries = [
        _run([sys.executable, "-m", "seq2seq.bench.summary", *arguments]).stdout
        for arguments in (
            ["--config.model.transformer.d_model=64", "--config", "configs/bench_small.py"],
            ["--config", "configs/bench_small.py", "--config.model.transformer.d_model=64"],
            ["--config", "configs/bench_small.py"],
        )
    ]
    assert summaries[0] == summaries[1] != summaries[2] and '"params"' in summaries[0]


def test_distributed_without_a_cluster_says_how_to_start_processes_by_hand(tmp_path):
    env = {
        key: value
        for key, value in subprocess_env().items()
        if not key.startswith(("SLURM_", "KUBERNETES_", "OMPI_", "TPU_", "CLOUD_TPU"))
    }
    workdir = tmp_path / "run"
    command = train_command(workdir, "transformer", "--config.mesh.distributed=True")
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    line = _one_error_line(result)  # JAX's own was "coordinator_address should be defined."
    assert line.startswith("error: config.mesh.distributed=True found no cluster to join")
    assert "set mesh.coordinator_address, mesh.num_processes and mesh.process_id" in line
    assert not workdir.exists()


def test_a_file_the_work_cannot_read_or_write_is_named_with_what_to_do():
    """What ``cli.exit_on_error`` prints for a path's OSError; a full disk's names no file."""
    unreadable = PermissionError(errno.EACCES, "Permission denied", "/data/train.de")
    assert cli.file_error_message(unreadable) == (
        "/data/train.de: Permission denied; check its permissions, or pass a path you may use"
    )
    full = OSError(errno.ENOSPC, "No space left on device")
    assert cli.file_error_message(full) == (
        "No space left on device; free some space and rerun the command"
    )


def test_make_serve_before_make_quickstart_says_to_run_it(tmp_path):
    """A new user's order mixed up: it was the server's flag advice ("pass the --workdir")."""
    command = ["make", "--no-print-directory", "-f", str(REPO / "Makefile"),
               "-o", ".venv/.installed", "serve"]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "error: no run at runs/quickstart/quickstart_transformer; make quickstart trains it "
        "(make serve serves the quickstart's runs)"
    )
    assert list(tmp_path.iterdir()) == []


def test_help_pages_keep_their_example_commands_line_breaks():
    """A command's --help prints its module docstring, where a lone backslash before a newline
    is Python's line continuation: the example's two lines printed as one, with a gap inside."""
    import ast
    import re

    joined = []
    for path in [REPO / "train.py", REPO / "eval.py", *sorted((REPO / "seq2seq").rglob("*.py"))]:
        source = path.read_text()
        body = ast.parse(source).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            written = ast.get_source_segment(source, body[0])  # as typed, escapes and all
            if not written.startswith("r") and re.search(r"(?<!\\)\\\n", written):
                joined.append(str(path.relative_to(REPO)))
    assert joined == []


LATE_THREAD = """
import concurrent.futures
import threading
import time

from seq2seq import cli


def commit():  # as orbax's thread writing a checkpoint: more work, once the main thread ended
    time.sleep(1.0)
    concurrent.futures.ThreadPoolExecutor(1).submit(print, "committed")


def main(argv):
    threading.Thread(target=commit).start()
    raise KeyboardInterrupt  # the second Ctrl-C, while the first one's checkpoint is written
"""


def test_a_second_ctrl_c_while_a_checkpoint_is_written_is_one_line(tmp_path):
    """The interpreter shut down around orbax's thread, which printed its traceback."""
    script = tmp_path / "command.py"
    script.write_text(LATE_THREAD + "\ncli.run(main)\n")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=subprocess_env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 130
    assert result.stderr == (
        "interrupted: what had finished is kept; rerun the same command to continue\n"
    )
    assert "committed" not in result.stdout  # it stopped at once


def test_attention_of_a_model_without_any_is_refused_before_jax_is_imported(tmp_path):
    """An encoder-decoder without attention (RNNencdec) has no weights to draw."""
    run = tmp_path / "rnnencdec"
    run.mkdir()
    config = config_lib.load_config_file(REPO / "configs" / "quickstart_rnnencdec.py")
    (run / "config.json").write_text(config.to_json())
    given = tmp_path / "in.txt"
    given.write_text("the old man saw a dog\n")
    output, folder = tmp_path / "out.txt", tmp_path / "a"
    command = [sys.executable, "eval.py", "--workdir", str(run), "--input", str(given),
               "--output", str(output), "--attention", str(folder)]  # fmt: skip
    result = subprocess.run(
        command, cwd=REPO, env=_without_jax(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert _one_error_line(result) == (
        f"error: --attention: {run} is an encoder-decoder without attention "
        "(model.rnnsearch.attention='none'): it has none to draw"
    )
    assert not folder.exists() and not output.exists()


def _from_run_module():
    """configs/from_run.py loaded as ``--config`` loads a config file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("from_run", REPO / "configs" / "from_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_from_run_reads_back_every_value_a_run_saved(tmp_path):
    """A compare run's overrides and tuned values are in its config.json, not in any config
    file: from_run gives them back, from the folder or from the file."""
    config = config_lib.load_config_file(REPO / "configs" / "quickstart_rnnsearch.py")
    config.train.learning_rate, config.model.rnnsearch.dropout_rate, config.seed = 7e-4, 0.35, 3
    (tmp_path / "run").mkdir()
    config_lib.save(config, tmp_path / "run" / "config.json")
    from_run = _from_run_module()
    for given in (tmp_path / "run", tmp_path / "run" / "config.json"):
        read = from_run.get_config(str(given))
        assert read.to_dict() == config.to_dict()
        assert (read.train.learning_rate, read.model.rnnsearch.dropout_rate) == (7e-4, 0.35)
        assert read.seed == 3
    with pytest.raises(config_lib.ConfigError, match="needs a run after a colon"):
        from_run.get_config()


def test_a_saved_config_given_as_a_config_file_is_refused_with_the_way_to_use_it(tmp_path):
    (tmp_path / "run").mkdir()
    saved = tmp_path / "run" / "config.json"
    config_lib.save(tiny_config(), saved)
    line = _one_error_line(_run(_with_config(train_command(tmp_path / "w"), str(saved))))
    assert line == (
        f"error: --config {saved} is a run's saved config, not a config file; pass "
        f"configs/from_run.py:{saved} in its place (it reads a run's config.json)"
    )
    missing = _one_error_line(
        _run(_with_config(train_command(tmp_path / "w"), f"configs/from_run.py:{tmp_path}/no"))
    )  # the message of the ConfigError alone: no "line N of configs/from_run.py, fix it"
    assert (
        missing
        == f"error: no config at {tmp_path}/no; pass the folder of a run (train.py saves one)"
    )
    bare = _one_error_line(_run(_with_config(train_command(tmp_path / "w"), "configs/from_run.py")))
    assert "needs a run after a colon, e.g. --config configs/from_run.py:runs/" in bare
    assert not (tmp_path / "w").exists()
    compared = _run([sys.executable, "-m", "seq2seq.compare", "--configs", str(saved), "--workdir",
                     str(tmp_path / "c")])  # fmt: skip
    assert (
        f"{saved} is a run's saved config, not a config file; pass configs/from_run.py:{saved}"
        in compared.stderr
    )
    assert compared.returncode == 1 and not (tmp_path / "c").exists()


def test_a_comparison_names_a_saved_runs_config_by_its_run_folder(tmp_path):
    """``compare --configs configs/from_run.py:RUN`` retrains runs from their records; each is
    named by its folder (the file's stem, from_run, would give every one the same name)."""
    from seq2seq.compare.__main__ import _specs
    from seq2seq.compare.settings import Settings, run_config

    for name, seed in (("transformer-small-seed0", 0), ("rnnsearch-medium-seed1", 1)):
        config = tiny_config("transformer" if "transformer" in name else "rnnsearch")
        config.seed = seed
        (tmp_path / name).mkdir()
        config_lib.save(config, tmp_path / name / "config.json")
    given = [
        f"configs/from_run.py:{tmp_path / 'transformer-small-seed0'}",
        f"configs/from_run.py:{tmp_path / 'rnnsearch-medium-seed1' / 'config.json'}",
    ]
    specs, title = _specs(given, None, None, [])
    assert [spec.name for spec in specs] == ["transformer-small-seed0", "rnnsearch-medium-seed1"]
    assert title == "Comparison: transformer-small-seed0, rnnsearch-medium-seed1"
    configs = [run_config(spec, Settings(budget_steps=7), 0) for spec in specs]
    assert [(c.model.name, c.seed, c.train.steps) for c in configs] == [
        ("transformer", 0, 7), ("rnnsearch", 1, 7)
    ]  # fmt: skip
    plain = _specs(["configs/quickstart_rnnsearch.py"], None, None, [])[0]
    assert [spec.name for spec in plain] == ["quickstart_rnnsearch"]
    with pytest.raises(ValueError, match="no config file at configs/from_rn.py; check the path"):
        _specs([f"configs/from_rn.py:{tmp_path}"], None, None, [])


def test_a_config_file_python_will_not_read_is_named_in_one_line(tmp_path):
    """A NUL byte is refused before Python parses the file, so the error names no file or line
    and came out as a traceback through importlib."""
    config = tmp_path / "damaged.py"
    config.write_bytes(b"def get_config():\x00\n")
    command = [
        sys.executable,
        "train.py",
        "--config",
        str(config),
        "--workdir",
        str(tmp_path / "r"),
    ]
    result = subprocess.run(
        command, cwd=REPO, env=_without_jax(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert _one_error_line(result) == (
        f"error: {config}: SyntaxError: source code string cannot contain null bytes; fix the "
        "config file"
    )
    assert not (tmp_path / "r").exists()


GARBAGE_COLLECTED_CTRL_C = """
import gc
import os
import sys
import time

from seq2seq import cli


def main(argv):
    fired = []

    def callback(phase, info):  # a Ctrl-C that lands in a collector's callback (JAX has one)
        if phase == "start" and not fired:
            fired.append(1)
            raise {raised}

    gc.callbacks.append(callback)
    gc.collect()
    {then}
    print("ran to its end")


cli.run(main)
"""

AFTER_THE_COLLECTION = {
    "works on": "for _ in range(250): time.sleep(0.02)",
    "waits for a line": "os.read(sys.stdin.fileno(), 1)",  # standard input stays open
    "ends at once": "pass",
}


@pytest.mark.parametrize("then", list(AFTER_THE_COLLECTION))
@pytest.mark.parametrize(
    ("raised", "status", "line"),
    [
        ("KeyboardInterrupt", 130, cli.RESUMES),
        (
            "cli.Terminated",
            143,
            "terminated (SIGTERM): " + cli.RESUMES.removeprefix("interrupted: "),
        ),
    ],
    ids=["Ctrl-C", "SIGTERM"],
)
def test_a_ctrl_c_that_lands_in_a_garbage_collectors_callback_stops_the_command(
    tmp_path, then, raised, status, line
):
    """Python reports such an interrupt as unraisable and forgets it: train.py and eval.py
    printed "Exception ignored in: <function _xla_gc_callback>" with a traceback, then ran to
    their end and exited 0 (3 of 5 Ctrl-Cs during train.py's start). Handed back to the main
    thread, it still waited for the next line of ``eval.py --input -`` (it did not wake a
    blocked read), and a command that ended within 50 ms exited 0, once in CI; SIGTERM came
    back as Ctrl-C."""
    script = tmp_path / "command.py"
    script.write_text(
        GARBAGE_COLLECTED_CTRL_C.format(raised=raised, then=AFTER_THE_COLLECTION[then])
    )
    process = subprocess.Popen(
        [sys.executable, str(script)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=subprocess_env(),
    )  # fmt: skip
    try:
        process.wait(timeout=60)  # standard input still open: no line, no end of input
    finally:
        if process.poll() is None:  # still waiting: the test fails on its status
            process.kill()
        stdout, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr) == (status, f"{line}\n")
    assert stdout == ("ran to its end\n" if then == "ends at once" else "")
