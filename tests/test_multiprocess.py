"""Two real processes sharing one work directory train exactly as one process on two devices.

Both runs see the same global batches split the same way: the batch planner gives process ``p``
rows ``[p * B/2, (p + 1) * B/2)`` of each planned batch, and the one-process run puts those same
rows on its device ``p``. Parameters start from the same seed, every device runs the same
compiled program on the same rows, and the cross-device sum of two partial losses and gradients
is the same two-term sum whether XLA or Gloo adds it (addition of two numbers commutes), so the
logged losses agree to float32 rounding; a process that fed only part of its rows (as with the
old double host split) changes the batch and the loss at the first logged step.
"""

from __future__ import annotations

import json
import socket
import subprocess

import numpy as np
import pytest

from tests.conftest import REPO, subprocess_env, train_command

# One bucket of 48 tokens holds 512 // 48 = 10 sentences, so every step has one shape (one
# compilation) and splits evenly over two devices or two processes.
TINY = [
    "--config.data.bucket_width=48",
    "--config.train.log_every_steps=2",
    "--config.eval.num_examples=4",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def _train_losses(workdir) -> dict[int, float]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"}


def _one_process(workdir, steps: int) -> str:
    command = train_command(workdir, "transformer", f"--config.train.steps={steps}", *TINY)
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, env=subprocess_env(2)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def _two_processes(workdir, steps: int) -> list[str]:
    """Starts process 0 and 1 of one job (one CPU device each); returns their logs."""
    mesh = [
        f"--config.mesh.coordinator_address=localhost:{_free_port()}",
        "--config.mesh.num_processes=2",
    ]
    command = train_command(workdir, "transformer", f"--config.train.steps={steps}", *TINY, *mesh)
    processes = [
        subprocess.Popen(
            [*command, f"--config.mesh.process_id={index}"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(1),
        )
        for index in range(2)
    ]
    logs = []
    try:
        for process in processes:
            _, stderr = process.communicate(timeout=300)
            logs.append(stderr)
            assert process.returncode == 0, stderr[-3000:]
    finally:
        for process in processes:  # a failed process leaves its peer waiting: stop it
            if process.poll() is None:
                process.kill()
                process.wait()
    return logs


@pytest.mark.slow
def test_two_processes_train_and_resume_as_one_process_on_two_devices(tmp_path):
    one = tmp_path / "one"
    _one_process(one, steps=6)
    shared = tmp_path / "two"
    for log in _two_processes(shared, steps=4):
        assert "mesh {'data': 2, 'fsdp': 1, 'tensor': 1} over 2 devices" in log, log[-3000:]
    # Restart both: they resume from step 4's checkpoint and train steps 5 and 6.
    for log in _two_processes(shared, steps=6):
        assert "resumed from step 4" in log, log[-3000:]

    expected, actual = _train_losses(one), _train_losses(shared)
    assert sorted(actual) == sorted(expected) == [2, 4, 6]  # one writer: no line twice
    np.testing.assert_allclose(
        [actual[step] for step in (2, 4, 6)], [expected[step] for step in (2, 4, 6)], rtol=1e-6
    )
    assert sorted(p.name for p in (shared / "checkpoints").iterdir()) == ["4", "6"]
    assert not list(shared.rglob("*.tmp*")), "a temporary file was left behind"
    starts = json.loads((shared / "provenance.json").read_text())["entries"]
    assert [start["process_count"] for start in starts] == [2, 2]  # process 0 records each start
