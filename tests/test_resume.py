"""Training never loses work: exact resume after SIGKILL, SIGTERM saves, damaged and
incompatible checkpoints, NaN losses. Each test drives the real ``train.py`` in a subprocess."""

import json
import shutil
import signal
import subprocess
import time

import pytest

from tests.conftest import REPO, subprocess_env, train_command

pytestmark = pytest.mark.slow

STEPS = 20
COMMON = (
    f"--config.train.steps={STEPS}",
    # Two buckets (24 and 48 tokens) instead of the quickstarts' six: resuming still has to
    # find its place among several, with a third of the step shapes to compile.
    "--config.data.bucket_width=24",
    "--config.train.log_every_steps=2",
    "--config.checkpoint.every_steps=5",
    "--config.checkpoint.keep=3",
)


def _losses(workdir) -> dict[int, float]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"}


def _run(workdir, *overrides, check=True, model="transformer"):
    result = subprocess.run(
        train_command(workdir, model, *COMMON, *overrides),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(),
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def _start(workdir, model="transformer"):
    return subprocess.Popen(
        train_command(workdir, model, *COMMON),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )


def _wait_for_step(process, workdir, step, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (workdir / "metrics.jsonl").exists() and max(_losses(workdir), default=0) >= step:
            return
        assert process.poll() is None, process.stderr.read()[-3000:]
        time.sleep(0.05)
    raise TimeoutError(f"step {step} was not logged in {timeout} s")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    _run(workdir)
    return workdir


def test_resume_after_sigkill_is_bit_exact(uninterrupted, tmp_path):
    process = _start(tmp_path)
    _wait_for_step(process, tmp_path, 9)
    process.kill()  # SIGKILL: no handler runs, a save may be half-way
    process.wait()
    assert max(_losses(tmp_path)) < STEPS, "the run finished before it could be killed"
    _run(tmp_path)
    assert _losses(tmp_path) == _losses(uninterrupted)  # every logged step, bit for bit


def test_rnnsearch_resume_after_sigkill_is_bit_exact(tmp_path):
    """The same for RNNsearch, whose state and batches (bucketed, not packed) differ."""
    uninterrupted = tmp_path / "uninterrupted"
    _run(uninterrupted, model="rnnsearch")
    process = _start(tmp_path / "killed", "rnnsearch")
    _wait_for_step(process, tmp_path / "killed", 9)
    process.kill()
    process.wait()
    assert max(_losses(tmp_path / "killed")) < STEPS, "the run finished before it could be killed"
    _run(tmp_path / "killed", model="rnnsearch")
    assert _losses(tmp_path / "killed") == _losses(uninterrupted)


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        (signal.SIGTERM, "SIGTERM: saved step"),
        (signal.SIGINT, "interrupted (Ctrl-C): saved step"),  # no traceback, nothing lost
    ],
)
def test_sigterm_or_ctrl_c_saves_a_checkpoint_before_exiting(uninterrupted, tmp_path, sent, said):
    process = _start(tmp_path)
    _wait_for_step(process, tmp_path, 7)
    process.send_signal(sent)
    assert process.wait(timeout=120) == 143
    stderr = process.stderr.read()
    assert said in stderr and "Traceback" not in stderr, stderr[-3000:]
    saved = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
    assert saved and saved[-1] >= 7, saved
    assert saved[-1] >= max(_losses(tmp_path)), "the save must hold the last step taken"
    _run(tmp_path)
    assert _losses(tmp_path) == _losses(uninterrupted)


@pytest.mark.parametrize("damage", ["every file", "the arrays' data"])
def test_damaged_latest_checkpoint_falls_back_to_the_previous(uninterrupted, tmp_path, damage):
    """With its arrays' data gone (their metadata kept), orbax's reads still in flight when the
    first failed printed a traceback each (90 of them) after the warning, and the warning held
    a page of tensorstore's JSON."""
    workdir = tmp_path / "run"
    shutil.copytree(uninterrupted, workdir)
    latest = workdir / "checkpoints" / str(STEPS)
    for path in (latest / "state").rglob("*"):
        if path.is_file() and damage == "every file":
            path.write_bytes(b"damaged")
        elif path.is_file() and path.parent.name == "d":
            path.unlink()
    result = _run(workdir, f"--config.train.steps={STEPS + 4}")
    assert f"checkpoint {STEPS} is unreadable" in result.stderr
    assert "Traceback" not in result.stderr and "tensorstore_spec" not in result.stderr
    losses, reference = _losses(workdir), _losses(uninterrupted)
    for step in range(STEPS - 4, STEPS + 1, 2):  # redone from step 15: the same numbers
        assert losses[step] == reference[step]
    assert max(losses) == STEPS + 4


def test_incompatible_config_is_refused_and_nothing_is_overwritten(uninterrupted, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(uninterrupted, workdir)
    before = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    result = _run(workdir, "--config.model.transformer.d_model=48", check=False)
    assert result.returncode != 0
    assert "config.model" in result.stderr.strip().splitlines()[-1]
    after = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    assert after == before


def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    result = _run(
        tmp_path,
        "--config.train.schedule=constant",
        "--config.train.learning_rate=1e30",
        "--config.train.steps=12",
        check=False,
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "not finite" in last and "step" in last
    checkpoints = tmp_path / "checkpoints"
    saved = (
        [p.name for p in checkpoints.iterdir() if p.name.isdigit()] if checkpoints.exists() else []
    )
    assert str(12) not in saved
