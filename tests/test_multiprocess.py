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

import errno
import json
import random
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from seq2seq.evaluation.restore import restore_model
from seq2seq.records.run_directory import RunDirectory
from tests.conftest import REPO, subprocess_env, train_command

# One bucket of 48 tokens holds 512 // 48 = 10 sentences, so every step has one shape (one
# compilation) and splits evenly over two devices or two processes.
TINY = [
    "--config.data.bucket_width=48",
    "--config.train.log_every_steps=2",
    "--config.eval.num_examples=4",
]


def _free_port() -> int:
    """A port for a coordinator, free on every interface, below Linux's ephemeral range
    (32768-60999).

    A port the kernel hands out (``bind(("localhost", 0))``) comes from that range, and so does
    the local port of every outgoing connection: another test's client took one between this
    probe and the coordinator's bind on ``[::]`` ("Failed to add port to server", seen once in
    CI). Below the range only a listener can hold the port, and the probe binds as the
    coordinator does, on all interfaces.
    """
    draw = random.SystemRandom()
    for _ in range(200):
        port = draw.randint(20_000, 32_767)
        try:
            _probe(port)
        except OSError:
            continue
        return port
    raise RuntimeError("no free port in 20000-32767 after 200 tries")


def _probe(port: int) -> None:
    """Binds ``port`` on all interfaces (IPv6 and IPv4 where the machine has IPv6)."""
    if socket.has_ipv6:
        try:
            with socket.socket(socket.AF_INET6) as probe:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                probe.bind(("::", port))
            return
        except OSError as error:
            if error.errno != errno.EAFNOSUPPORT:  # IPv6 compiled in but switched off
                raise
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", port))


def _train_records(workdir) -> dict[int, dict]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r["kind"] == "train"}


def _validation(workdir) -> dict[int, dict]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r["kind"] == "validation"}


def _samples(log: str) -> list[str]:
    """The sample translations a validation logged (``sample I: source: ... output: ...``)."""
    return [line for line in log.splitlines() if line.startswith("sample ")]


def _one_process(workdir, steps: int) -> str:
    command = train_command(workdir, "transformer", f"--config.train.steps={steps}", *TINY)
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, env=subprocess_env(2)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def _start_both(workdir, port: int, per_process: list[list[str]]) -> list[subprocess.Popen]:
    """Processes 0 and 1 of one job at ``port``, each with its own extra flags."""
    mesh = [f"--config.mesh.coordinator_address=localhost:{port}", "--config.mesh.num_processes=2"]
    command = train_command(workdir, "transformer", *TINY, *mesh)
    return [
        subprocess.Popen(
            [*command, f"--config.mesh.process_id={index}", *flags],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(1),
        )  # fmt: skip
        for index, flags in enumerate(per_process)
    ]


def _finish(processes: list[subprocess.Popen], timeout: float) -> list[str]:
    """Each process's log once it has ended (killed, and the test failed, past ``timeout``)."""
    try:
        return [process.communicate(timeout=timeout)[1] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _two_processes(workdir, steps: int, *overrides: str) -> list[str]:
    """Starts process 0 and 1 of one job (one CPU device each); returns their logs."""
    flags = [f"--config.train.steps={steps}", *overrides]
    workers = _start_both(workdir, _free_port(), [flags, flags])
    logs = _finish(workers, timeout=600)
    for worker, log in zip(workers, logs, strict=True):
        assert worker.returncode == 0, log[-3000:]
    return logs


@pytest.mark.slow
def test_two_processes_train_and_resume_as_one_process_on_two_devices(tmp_path):
    one = tmp_path / "one"
    one_log = _one_process(one, steps=6)
    shared = tmp_path / "two"
    first_logs = _two_processes(shared, steps=4)
    for log in first_logs:
        assert "mesh data 2 x fsdp 1 x tensor 1 over 2 devices" in log, log[-3000:]
    # Process 0 alone encoded the training split; process 1 read its copy.
    assert "encoded by process 0" in first_logs[1] and "encoded by" not in first_logs[0]
    assert len(list((shared / "encoded").iterdir())) == 1
    # Restart both: they resume from step 4's checkpoint and train steps 5 and 6.
    two_logs = _two_processes(shared, steps=6)
    for log in two_logs:
        assert "resumed from step 4" in log, log[-3000:]

    # Validation (at the end of each run) split its sentences over the two processes: the same
    # loss, BLEU and sample translations as one process that decoded them all.
    expected_validation, actual_validation = _validation(one), _validation(shared)
    assert sorted(actual_validation) == [4, 6] and 6 in expected_validation
    for key in ("loss", "bleu", "n"):
        np.testing.assert_allclose(
            actual_validation[6][key], expected_validation[6][key], rtol=1e-6
        )
    assert _samples(one_log) == _samples(two_logs[0]) and len(_samples(one_log)) == 3

    expected, actual = _train_records(one), _train_records(shared)
    assert sorted(actual) == sorted(expected) == [2, 4, 6]  # one writer: no line twice
    # The losses, and what the logs count of each batch, are the whole global batch's: process
    # 0 writes them, and counting its own rows would log half of the FLOPs the run spent.
    for key in ("loss", "train_flops", "padding_share", "source_tokens", "target_tokens"):
        np.testing.assert_allclose(
            [actual[step][key] for step in (2, 4, 6)],
            [expected[step][key] for step in (2, 4, 6)],
            rtol=1e-6,
            err_msg=key,
        )
    assert sorted(p.name for p in (shared / "checkpoints").iterdir()) == ["4", "6"]
    assert not list(shared.rglob("*.tmp*")), "a temporary file was left behind"
    starts = json.loads((shared / "provenance.json").read_text())["entries"]
    assert [start["process_count"] for start in starts] == [2, 2]  # process 0 records each start

    # As if a signal had stopped both after step 6, before its validation and stop record: the
    # next start validates together (process 0 alone reads the log; the others must follow it
    # into the collective validation), and writes what was missing.
    lines = (shared / "metrics.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["kind"] not in ("validation", "stop")
            or json.loads(line)["step"] < 6]  # fmt: skip
    (shared / "metrics.jsonl").write_text("".join(line + "\n" for line in kept))
    _two_processes(shared, steps=6)
    again = _validation(shared)
    np.testing.assert_allclose(again[6]["loss"], actual_validation[6]["loss"], rtol=1e-6)
    records = [json.loads(line) for line in (shared / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "stop" and records[-1]["step"] == 6


@pytest.mark.slow
def test_two_processes_validate_by_minutes_together_at_log_steps(tmp_path):
    """A validation every N minutes on two processes: their one clock agrees at log steps, so
    both validate at the same steps (one that validated alone would leave the other waiting
    in a collective) and without a collective at every step. An interval of 1e-6 minutes is
    due at every step where the clock moves: at the log steps 2, 4 and 6."""
    _two_processes(tmp_path, 6, "--config.eval.every_minutes=1e-6")
    assert sorted(_validation(tmp_path)) == [2, 4, 6]


def test_two_processes_gather_each_others_share_of_texts_in_order():
    address = f"localhost:{_free_port()}"
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.processes_worker", address, str(index)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(1),
        )  # fmt: skip
        for index in range(2)
    ]
    try:
        outputs = [worker.communicate(timeout=120) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    reports = []
    for worker, (stdout, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr[-3000:]
        reports.append(json.loads(stdout.strip().splitlines()[-1]))
    assert [report["mine"] for report in reports] == [[0, 2, 4, 6], [1, 3, 5]]
    texts = [
        "ein Hund",
        "",
        "zwei Männer spielen Fußball",
        "x",
        "日本語の文",
        "a b c d e f g",
        "Ende",
    ]
    assert all(report["gathered"] == texts for report in reports)
    assert all(report["total"] == [7, 30] for report in reports)
    assert [report["slowest"] for report in reports] == [3.0, 3.0]  # pieces sized alike


def _signal_one_of_two(tmp_path, signal_number: int) -> tuple[list, list[str], float]:
    """Two processes training without end; once both run, ``signal_number`` goes to process 1.

    Returns the processes (ended, or killed after 60 s), their logs and the seconds from the
    signal until both had ended.
    """
    mesh = [
        f"--config.mesh.coordinator_address=localhost:{_free_port()}",
        "--config.mesh.num_processes=2",
        "--config.train.log_every_steps=1",
        "--config.checkpoint.every_steps=0",
    ]
    command = train_command(
        tmp_path / "run", "transformer", "--config.train.steps=100000", *TINY, *mesh
    )
    logs = [tmp_path / f"process{index}.log" for index in range(2)]
    workers = [
        subprocess.Popen(
            [*command, f"--config.mesh.process_id={index}"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            env=subprocess_env(1),
        )  # fmt: skip
        for index, log in enumerate(logs)
    ]
    try:
        deadline = time.monotonic() + 600
        while "step 3/" not in logs[1].read_text():  # training, compiled, past a few steps
            assert all(worker.poll() is None for worker in workers), logs[1].read_text()[-3000:]
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(1)
        workers[1].send_signal(signal_number)
        signalled = time.monotonic()
        for worker in workers:
            try:
                worker.wait(timeout=max(1.0, 60 - (time.monotonic() - signalled)))
            except subprocess.TimeoutExpired:
                break
        seconds = time.monotonic() - signalled
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return workers, [log.read_text() for log in logs], seconds


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signal_number", "said"),
    [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "interrupted (Ctrl-C)")],
    ids=["SIGTERM", "Ctrl-C"],
)
def test_sigterm_or_ctrl_c_to_one_process_stops_both_at_one_step_with_a_checkpoint(
    tmp_path, signal_number, said
):
    """Process 1 gets SIGTERM, or Ctrl-C's SIGINT, mid-training: both save one checkpoint at an
    agreed step and exit (status 143), within a minute; the checkpoint restores."""
    workers, logs, seconds = _signal_one_of_two(tmp_path, signal_number)
    assert seconds < 60, logs[0][-3000:]
    assert [worker.returncode for worker in workers] == [143, 143], logs[1][-3000:]
    workdir = tmp_path / "run"
    saved = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert len(saved) == 1 and saved[0] > 3, saved
    assert f"{said}: saved step {saved[0]}" in logs[1], logs[1][-3000:]
    assert f"SIGTERM: saved step {saved[0]}" in logs[0], logs[0][-3000:]  # told by the service
    config = RunDirectory(workdir).load_config()
    _, _, params, choice = restore_model(workdir, config)
    assert choice.steps == (saved[0],) and params is not None


@pytest.mark.slow
def test_a_crashed_process_stops_the_other_within_a_minute(tmp_path):
    """Process 1 is killed (no chance to save): process 0, waiting for it in a collective, is
    stopped by the coordination service instead of hanging."""
    workers, logs, seconds = _signal_one_of_two(tmp_path, signal.SIGKILL)
    assert seconds < 60, logs[0][-3000:]
    assert workers[1].returncode == -signal.SIGKILL
    assert workers[0].returncode not in (0, None), logs[0][-3000:]


def test_processes_started_with_different_configs_both_refuse_before_writing(tmp_path):
    """Another train.steps typed in one terminal: the process with more steps waited in a
    collective for the other, which had ended, and both hung for good."""
    workdir = tmp_path / "run"
    processes = _start_both(
        workdir, _free_port(), [["--config.train.steps=6"], ["--config.train.steps=8"]]
    )
    logs = _finish(processes, timeout=240)
    assert [p.returncode for p in processes] == [1, 1], logs
    assert logs[1].strip().splitlines()[-1] == (
        "error: process 1 was started with another config than process 0 (train.steps: 6 -> "
        "8); start every process with the same config and flags"
    )
    assert (
        logs[0]
        .strip()
        .splitlines()[-1]
        .startswith("error: process 1 was started with another config than this one")
    )
    assert not (workdir / "config.json").exists()


def test_a_coordinator_port_in_use_is_refused_in_one_line(tmp_path):
    """JAX's coordination service failed to bind it and process 0 died of a segmentation
    fault."""
    port = _free_port()
    with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as holder:
        holder.bind(("::" if socket.has_ipv6 else "0.0.0.0", port))
        holder.listen()
        (process,) = _start_both(tmp_path / "run", port, [["--config.train.steps=6"]])
        (log,) = _finish([process], timeout=120)
    assert process.returncode == 1, log[-3000:]
    assert log.strip().splitlines()[-1] == (
        f"error: config.mesh.coordinator_address=localhost:{port}: port {port} is in use on "
        "this machine (another job?); pick a free port and pass it to every process"
    )


def test_a_process_whose_peers_never_start_ends_with_one_line():
    """Process 0 of 2 alone: JAX waits its initialization timeout, then aborts the process
    with a page of native stack. The watchdog says what to do a little before."""
    script = (
        "from seq2seq.training import processes; processes.JOIN_TIMEOUT_SECONDS = 8; "
        f"processes.initialize_processes('localhost:{_free_port()}', 2, 0)"
    )
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
        env=subprocess_env(1),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("error: process 0 of 2 waited 3 s for the job's processes at localhost:")
    )
    assert "start all 2 processes (mesh.process_id 0 to 1)" in result.stderr
    assert time.monotonic() - start < 60
