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
