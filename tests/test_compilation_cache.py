"""Every command keeps its compiled programs on disk, and a second start loads them back."""

import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq.runtime.compilation_cache import cache_environment, default_directory
from tests.conftest import REPO, subprocess_env, train_command


def test_the_cache_lives_in_the_users_cache_directory():
    assert default_directory({"XDG_CACHE_HOME": "/c"}) == Path("/c/seq2seq/jax")
    assert default_directory({}) == Path.home() / ".cache" / "seq2seq" / "jax"
    assert cache_environment({"XDG_CACHE_HOME": "/c"})["JAX_COMPILATION_CACHE_DIR"] == (
        "/c/seq2seq/jax"
    )


def test_a_cache_directory_already_chosen_is_kept():
    chosen = {"JAX_COMPILATION_CACHE_DIR": "/mine", "XDG_CACHE_HOME": "/c"}
    assert cache_environment(chosen) == chosen


def _entries(directory: Path) -> set[str]:
    """The compiled programs a cache directory holds (JAX writes one ``KEY-cache`` file each)."""
    if not directory.exists():
        return set()
    return {path.name for path in directory.iterdir() if path.name.endswith("-cache")}


def _train(workdir: Path, environment: dict[str, str], *flags: str, steps: int = 2) -> str:
    command = train_command(
        workdir, "rnnsearch", f"--config.train.steps={steps}", "--config.eval.every_minutes=0",
        *flags,
    )  # fmt: skip
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, env=environment
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


@pytest.mark.slow
def test_a_second_start_compiles_nothing_new(tmp_path):
    # The tests' shared cache directory is left out: train.py must choose the per-user one.
    environment = {k: v for k, v in subprocess_env().items() if k != "JAX_COMPILATION_CACHE_DIR"}
    environment["XDG_CACHE_HOME"] = str(tmp_path / "user_cache")
    environment["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # tiny programs kept too
    cache = tmp_path / "user_cache" / "seq2seq" / "jax"

    assert "encoded before" not in _train(tmp_path / "first", environment)
    first = _entries(cache)
    assert any(name.startswith("jit__search-") for name in first), sorted(first)  # beam search
    assert len(first) >= 10, sorted(first)  # the training step, validation and initialisation

    _train(tmp_path / "second", environment)
    assert _entries(cache) == first, "the second start compiled programs the first had kept"

    # Resumed, the run does not tokenize again: its encoded split is read from disk. (Steps 3
    # and 4 may draw batches of a new shape, whose step is compiled once, then kept.)
    log = _train(tmp_path / "first", environment, steps=4)
    assert "training split encoded before" in log, log[-3000:]

    # An eval compiles the search for its own batches once; evaluating again loads them.
    trained = _entries(cache)
    _evaluate(tmp_path / "first", environment)
    evaluated = _entries(cache)
    assert evaluated > trained, "the eval kept nothing"  # its batches: another search shape
    _evaluate(tmp_path / "first", environment)
    assert _entries(cache) == evaluated, "a second eval compiled programs the first had kept"

    # Turned off, a one-sentence eval (one search loop to compile) with an empty cache
    # directory, where it would keep every program it compiles, writes nothing there.
    environment["XDG_CACHE_HOME"] = str(tmp_path / "off_cache")
    sentence = tmp_path / "sentence.txt"
    sentence.write_text("a b c\n")
    off = ["--input", str(sentence), "--output", str(tmp_path / "out.txt"), "--nocompilation_cache"]
    _evaluate(tmp_path / "first", environment, *off)
    assert (tmp_path / "out.txt").read_text().count("\n") == 1
    assert not _entries(tmp_path / "off_cache" / "seq2seq" / "jax"), "written although off"


def _evaluate(workdir: Path, environment: dict[str, str], *flags: str) -> None:
    """eval.py on ``workdir``: 64 sentences of its validation split, unless ``flags`` name an
    --input file."""
    split = [] if "--input" in flags else ["--split", "validation", "--max_sentences", "64"]
    command = [sys.executable, "eval.py", "--workdir", str(workdir), *split, *flags]
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, env=environment
    )
    assert result.returncode == 0, result.stderr[-3000:]
