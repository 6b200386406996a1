"""Shared test set-up: JAX's persistent compilation cache, tiny configs and session fixtures."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path


def with_xla_flag(environ, flag: str) -> str:
    """``environ``'s ``XLA_FLAGS`` with ``flag`` added after the flags already set."""
    return " ".join(filter(None, [environ.get("XLA_FLAGS"), flag]))


# The suite compiles thousands of small programs and runs each for a few steps, so XLA's CPU
# backend builds them cheaply (docs/testing.md): at its lowest optimisation level (a cold tiny
# RNNsearch train.py run took 27-28 s against 38-45 s, each step about 10% longer), and with its
# older loop emitters instead of the MLIR fusion emitters, whose fixed cost per fusion dominates
# a tiny program (six compile-bound files took 380 s against 265 s). They are set before JAX
# loads, for the test processes and everything they start; commands run outside the tests keep
# XLA's defaults. A collective of simulated CPU devices may wait a while for threads that 2 busy
# cores have not scheduled, so tests allow it 10 minutes instead of XLA's 40 s (the waits that
# never ended were a starved thread pool: seq2seq.runtime.simulated_devices, subprocess_env).
# A flag already in XLA_FLAGS, with any value, is left as it is.
TEST_XLA_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_cpu_collective_call_terminate_timeout_seconds=600",
)
for _flag in TEST_XLA_FLAGS:
    if _flag.split("=")[0] + "=" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = with_xla_flag(os.environ, _flag)

import jax  # noqa: E402
import jax.extend.core  # noqa: E402
import pytest  # noqa: E402

from seq2seq.runtime.simulated_devices import threads_environment  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"

# Compile each program once per machine, not once per process: the test processes, every
# entry-point subprocess and the notebooks' kernels share one cache. It keeps every program,
# however fast it compiled: the subprocesses compile the same tiny programs again and again, and
# a threshold in seconds would make what is kept depend on how busy the machine is.
COMPILATION_CACHE = {
    "JAX_COMPILATION_CACHE_DIR": str(REPO / ".jax_cache"),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
}
jax.config.update("jax_compilation_cache_dir", COMPILATION_CACHE["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding slow tests run first, each file's tests in their own order.

    ``make test`` hands whole files to one worker per core: starting with the long files lets
    the short ones fill the gaps at the end, so no worker is left alone with a long file.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order within stays


# The tests decode a few sentences, in one batch: a beam search that goes on in smaller batches
# as sentences finish (``decode.min_rows``) would compile a loop per batch size for nothing.
# Any batch up to this many rows is searched in one loop; tests/test_decoding.py checks the
# shrinking search against one loop.
ONE_LOOP_ROWS = 1024
ONE_SEARCH_LOOP = f"--config.decode.min_rows={ONE_LOOP_ROWS}"


def tiny_config(model_name: str = "transformer"):
    """A model of a few thousand parameters on the synthetic task, for fast tests."""
    from seq2seq.config import default_config

    config = default_config()
    config.model.name = model_name
    t = config.model.transformer
    t.d_model, t.d_ff, t.num_heads, t.d_k, t.d_v = 32, 64, 4, 8, 8
    t.encoder_layers = t.decoder_layers = 2
    r = config.model.rnnsearch
    r.embedding_size, r.encoder_hidden_size, r.decoder_hidden_size = 16, 24, 24
    r.alignment_size, r.maxout_size = 16, 12
    config.data.source = "synthetic"
    config.data.tokenizer = "word"
    config.data.vocab_size = 1000
    config.data.max_length = 48
    # One bucket as wide as the longest pair: every batch has one shape, so each jitted
    # program compiles once per run instead of once per bucket (tests of bucketing set their own).
    config.data.bucket_width = config.data.max_length
    config.data.tokens_per_batch = 512
    config.train.steps = 20
    config.train.log_every_steps = 5
    config.train.warmup_steps = 10
    config.checkpoint.every_steps = 10
    config.eval.num_examples = 8  # validation sentences (the default 500 take seconds to decode)
    config.decode.min_rows = ONE_LOOP_ROWS
    return config


@pytest.fixture(scope="session")
def multi30k() -> Path:
    if not (MULTI30K / "train.de").exists():
        pytest.skip(f"Multi30k not found at {MULTI30K} (shared data is absent on this machine)")
    return MULTI30K


# Tiny models for end-to-end runs of the real entry points.
SHRINK = {
    "transformer": [
        "--config.model.transformer.d_model=32",
        "--config.model.transformer.d_ff=64",
        "--config.model.transformer.d_k=8",
        "--config.model.transformer.d_v=8",
        "--config.model.transformer.encoder_layers=1",
        "--config.model.transformer.decoder_layers=1",
    ],
    "rnnsearch": [
        "--config.model.rnnsearch.embedding_size=16",
        "--config.model.rnnsearch.encoder_hidden_size=16",
        "--config.model.rnnsearch.decoder_hidden_size=16",
        "--config.model.rnnsearch.alignment_size=16",
        "--config.model.rnnsearch.maxout_size=8",
    ],
}


def subprocess_env(devices: int = 1) -> dict[str, str]:
    """Environment for entry-point subprocesses: shared compilation cache, simulated devices."""
    env = {**os.environ, **COMPILATION_CACHE}
    env["JAX_PLATFORMS"] = "cpu"
    if devices > 1:
        env["XLA_FLAGS"] = with_xla_flag(env, f"--xla_force_host_platform_device_count={devices}")
    return threads_environment(env)  # see seq2seq.runtime.simulated_devices


def run_python(script: str, *arguments: str, env: dict[str, str]) -> str:
    """The standard output of ``python -c SCRIPT ARGUMENTS`` run in the repository with ``env``;
    the test fails with the end of its standard error if it fails."""
    import subprocess
    import sys

    command = [sys.executable, "-c", script, *arguments]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def assert_compare_refuses(workdir: Path, arguments: list[str], message: str) -> None:
    """``python -m seq2seq.compare --workdir WORKDIR ARGUMENTS`` fails with one error line that
    names ``message``, and writes nothing into the work directory."""
    import subprocess
    import sys
    import textwrap

    command = [sys.executable, "-m", "seq2seq.compare", "--workdir", str(workdir), *arguments]
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=120
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last, textwrap.shorten(result.stderr, 800)
    assert not any(workdir.iterdir()), "a refused comparison wrote something"


def train_command(workdir, model: str = "transformer", *overrides: str) -> list[str]:
    """``python train.py`` on the quickstart config, shrunk to a tiny model validated on 8
    sentences instead of 500, searched in one loop."""
    import sys

    return [
        sys.executable, "train.py", "--config", f"configs/quickstart_{model}.py",
        "--workdir", str(workdir), "--config.data.tokens_per_batch=512",
        "--config.train.time_budget_minutes=0", "--config.eval.num_examples=8", ONE_SEARCH_LOOP,
        *SHRINK[model], *overrides,
    ]  # fmt: skip


def dot_operand_dtypes(function, *args) -> set[tuple[str, str]]:
    """(lhs, rhs) dtypes of every matrix product in ``function``'s jaxpr, nested ones included."""
    found = set()

    def walk(jaxpr):
        for equation in jaxpr.eqns:
            if equation.primitive.name == "dot_general":
                found.add(tuple(str(v.aval.dtype) for v in equation.invars))
            for sub in jax.extend.core.jaxprs_in_params(equation.params):
                walk(sub)

    walk(jax.make_jaxpr(function)(*args).jaxpr)
    return found


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_differences(config, record: Path) -> dict[str, tuple]:
    """Where ``config`` differs from the config a committed run record trained (``record``'s
    config.json), key by dotted key: (config's value, the record's). A key the record lacks (added
    since it was written) counts only where ``config`` moves it off its default."""
    from seq2seq.config import default_config

    mine = _flat(json.loads(config.to_json()))
    trained = _flat(json.loads((record / "config.json").read_text()))
    defaults = _flat(json.loads(default_config().to_json()))
    return {
        key: (mine.get(key), trained.get(key))
        for key in mine.keys() | trained.keys()
        if mine.get(key) != trained.get(key)
        and not (key not in trained and mine[key] == defaults.get(key))
    }


class Terminal(io.StringIO):
    """Standard error as a person's terminal, where progress bars are drawn. Put it in place in
    the test itself (``monkeypatch.setattr(sys, "stderr", Terminal())``): pytest puts its own
    standard error back after the fixtures."""

    def isatty(self) -> bool:
        return True


def interruptible(command: list[str]) -> list[str]:
    """``command`` started through a Python that gives Ctrl-C (SIGINT) back its default first: a
    suite run in the background starts with SIGINT ignored, which the command would inherit and
    a test's Ctrl-C would then not reach."""
    launcher = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        f"os.execv(sys.executable, {command!r})"
    )
    return [sys.executable, "-c", launcher]
