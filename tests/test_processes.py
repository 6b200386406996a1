"""How one process of a multi-process job stops when it fails or when a peer has gone: without
real processes, by standing in for the process count and for the exit."""

from __future__ import annotations

import logging

import jax
import pytest

from seq2seq.training import processes

# as a Ctrl-C to process 1 during the tokenizer's training left process 0 with it
GLOO_PEER_GONE = (
    "UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/pair.cc:547] Connection "
    "closed by peer [127.0.0.1]:42137"
)


class Exited(Exception):
    """What the stand-in for ``os._exit`` raises, with the status."""


@pytest.fixture
def two_processes(monkeypatch):
    def exit_now(status):
        raise Exited(status)

    monkeypatch.setattr(processes.jax, "process_count", lambda: 2)
    monkeypatch.setattr(processes.jax, "process_index", lambda: 0)
    monkeypatch.setattr(processes.os, "_exit", exit_now)


@pytest.mark.parametrize("kind", [ValueError, jax.errors.JaxRuntimeError])
def test_a_peer_that_stopped_ends_this_process_with_one_line(two_processes, caplog, kind):
    """A Ctrl-C to process 1 while process 0 trained the tokenizer: process 0 printed a page
    of traceback under "process 0 failed", as for a bug (a ValueError from
    ``process_allgather``; a step's collective raises JaxRuntimeError)."""
    guarded = processes.stop_every_process_on_error()
    with caplog.at_level(logging.ERROR), pytest.raises(Exited, match="1"), guarded:
        raise kind(GLOO_PEER_GONE)
    (record,) = caplog.records
    assert record.getMessage().startswith("process 0: another process of the job stopped (")
    assert "Connection closed by peer" in record.getMessage() and record.exc_info is None


def test_any_other_failure_keeps_its_traceback(two_processes, caplog):
    guarded = processes.stop_every_process_on_error()
    with caplog.at_level(logging.ERROR), pytest.raises(Exited, match="1"), guarded:
        raise ValueError("a bug")
    (record,) = caplog.records
    assert record.getMessage() == "process 0 failed; stopping every process"
    assert record.exc_info is not None


def test_one_process_raises_as_it_would_without_the_guard():
    with pytest.raises(jax.errors.JaxRuntimeError), processes.stop_every_process_on_error():
        raise jax.errors.JaxRuntimeError(GLOO_PEER_GONE)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("mesh.fsdp", 3, "config.mesh.fsdp=3 x mesh.tensor=1 does not divide"),
        ("train.grad_accum_steps", 3, "data.sentences_per_batch=16 is not a multiple of 3"),
    ],
)
def test_a_mesh_or_batch_that_cannot_split_is_refused_before_the_guard(
    tmp_path, monkeypatch, key, value, said
):
    """Two processes with ``mesh.fsdp=3`` over 8 devices printed a traceback under "process 0
    failed; stopping every process": the same refusal that one process gives in one line. Every
    process refuses it alike, so it comes before the guard that stops the others."""
    from seq2seq.training import trainer
    from tests.conftest import tiny_config

    def guard():
        pytest.fail("the refusal came inside stop_every_process_on_error")

    monkeypatch.setattr(trainer.processes, "stop_every_process_on_error", guard)
    config = tiny_config("transformer")
    config.data.sentences_per_batch, config.data.tokens_per_batch = 16, 0
    section, name = key.split(".")
    config[section][name] = value
    with pytest.raises(ValueError, match=said):
        trainer.train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()
