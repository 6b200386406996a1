"""A job of several processes: joining it, and stopping every process when one fails.

Several processes (hosts, or ``train.py`` started by hand on one machine) train one model
together: each runs the same program on its own devices, and ``jax.jit``'s collectives join them.
Before that, each joins the job (``initialize_processes``) and checks that all were started
with one config (``check_same_config``); if one fails mid-run, the others must not wait for it
forever (``stop_every_process_on_error``). The mesh over all their devices
is ``seq2seq.training.sharding``'s.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from seq2seq.config import ConfigError, flatten

logger = logging.getLogger(__name__)

HEARTBEAT_TIMEOUT_SECONDS = 30
JOIN_TIMEOUT_SECONDS = 300  # how long a process waits for the others to start (JAX's default)


def initialize_processes(
    coordinator_address: str = "", num_processes: int = 0, process_id: int = -1
) -> None:
    """Joins this process to a multi-process job (``jax.distributed.initialize``).

    Call before anything touches a device. Unset arguments ("", 0, -1) are detected from the
    cluster (SLURM, Cloud TPU, ...); set, they describe processes started by hand, e.g. two
    ``train.py`` on one machine.
    """
    # Devices of different processes on CPU reduce gradients over TCP with Gloo: the default
    # of the installed jax, named here so that a jax whose default is "none" still works.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if coordinator_address and process_id == 0:
        check_port_free(coordinator_address)
    who = f"process {process_id} of {num_processes}" if num_processes else "this process"
    where = f" at {coordinator_address}" if coordinator_address else ""
    if coordinator_address:  # started by hand: say where it waits (a cluster's launcher knows)
        logger.info(
            "%s: joining the job%s (waiting up to %.0f min for every process)",
            who, where, JOIN_TIMEOUT_SECONDS / 60,
        )  # fmt: skip
    # JAX aborts the process with a page of native stack when the others do not come: a line
    # of our own, a little before that, says what to do instead.
    watchdog = threading.Timer(JOIN_TIMEOUT_SECONDS - 5, _give_up, (who, where, num_processes))
    watchdog.daemon = True
    watchdog.start()
    # SIGTERM goes to JAX's preemption service, which tells every process to save at one step;
    # the command's own handler (``cli.stop_on_sigterm``) would stop this process alone.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address or None,
            num_processes=num_processes or None,
            process_id=process_id if process_id >= 0 else None,
            # A process silent this long is taken for dead and every other one stops (without
            # a checkpoint) instead of waiting for it in a collective; JAX's default is 100 s.
            heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_SECONDS,
            initialization_timeout=JOIN_TIMEOUT_SECONDS,
        )
    except ValueError as error:  # JAX's "coordinator_address should be defined."
        if coordinator_address:
            raise
        raise ValueError(
            f"config.mesh.distributed=True found no cluster to join ({error}); outside Slurm, "
            "a Cloud TPU slice, Kubernetes or Open MPI, set mesh.coordinator_address, "
            "mesh.num_processes and mesh.process_id for each process (docs/scaling.md)"
        ) from None
    finally:
        watchdog.cancel()


def _give_up(who: str, where: str, count: int) -> None:
    """Ends a process whose job never gathered (run by the watchdog thread: JAX's wait holds
    no lock that keeps it from running)."""
    started = f"all {count} processes (mesh.process_id 0 to {count - 1})" if count else "them all"
    sys.stderr.write(
        f"error: {who} waited {JOIN_TIMEOUT_SECONDS - 5:.0f} s for the job's processes{where} "
        f"and not all joined; start {started} with the same mesh.coordinator_address and "
        "mesh.num_processes\n"
    )
    sys.stderr.flush()
    os._exit(1)


def check_port_free(coordinator_address: str) -> None:
    """Refuses a coordinator address whose port something on this machine already listens on
    (another job, or one still stopping): JAX's coordination service fails to bind it and the
    process ends in a segmentation fault. Process 0 hosts the service, so only it checks.

    Raises:
      ValueError: one line naming the port and the fix.
    """
    port = coordinator_address.rpartition(":")[2]
    if not port.isdigit():
        raise ValueError(
            f"config.mesh.coordinator_address={coordinator_address!r} has no port; write "
            "HOST:PORT, e.g. localhost:12355"
        )
    for family, anywhere in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this machine
            continue
        with probe:
            # as gRPC binds: a port left in TIME_WAIT by a job that just ended is free to it
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((anywhere, int(port)))
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    continue
                raise ValueError(
                    f"config.mesh.coordinator_address={coordinator_address}: port {port} is in "
                    "use on this machine (another job?); pick a free port and pass it to "
                    "every process"
                ) from None
            return


def check_same_config(config: ml_collections.ConfigDict) -> None:
    """Refuses a job whose processes were started with different configs (another
    ``train.steps`` typed in one terminal): each would run its own number of steps, and the
    one with more would wait in a collective for the others forever. Every process compares
    its config with process 0's, but for ``mesh.process_id``, before anything is written.

    Raises:
      ConfigError: in every process, one line; those that differ name the keys.
    """
    if jax.process_count() == 1:
        return
    text = json.dumps(_comparable(config), sort_keys=True, default=str).encode()
    mine = json.loads(text)  # as process 0's arrives: tuples become lists
    size = int(multihost_utils.broadcast_one_to_all(np.int64(len(text))))
    buffer = np.zeros(size, np.uint8)
    if jax.process_index() == 0:
        buffer[:] = np.frombuffer(text, np.uint8)
    first = json.loads(bytes(multihost_utils.broadcast_one_to_all(buffer)).decode())
    differ = sorted(k for k in mine.keys() | first.keys() if mine.get(k) != first.get(k))
    flags = np.asarray(multihost_utils.process_allgather(np.int32(bool(differ))))
    if differ:
        shown = "; ".join(f"{k}: {first.get(k)!r} -> {mine.get(k)!r}" for k in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise ConfigError(
            f"process {jax.process_index()} was started with another config than process 0 "
            f"({shown}{more}); start every process with the same config and flags"
        )
    if flags.any():
        others = ", ".join(str(i) for i in np.flatnonzero(flags))
        raise ConfigError(
            f"process {others} was started with another config than this one (its error names "
            "the keys); start every process with the same config and flags"
        )


def _comparable(config: ml_collections.ConfigDict) -> dict:
    """The config's keys and values that every process must share."""
    return {key: value for key, value in flatten(config) if key != "mesh.process_id"}


@contextlib.contextmanager
def stop_every_process_on_error() -> Iterator[None]:
    """With several processes, an exception in one ends that process at once.

    Its peers are then waiting for it in a collective, and a normal exit would wait for them in
    JAX's shutdown barrier: neither side would ever move. Ended at once (``os._exit``, after the
    traceback is logged), the process stops answering the coordination service, which then
    stops the others: at once if it was process 0 (the service's host), otherwise after
    ``HEARTBEAT_TIMEOUT_SECONDS``. No checkpoint is written (one being written is left
    unfinished in its temporary folder, which orbax never reads).
    """
    try:
        yield
    except Exception as error:
        if jax.process_count() == 1:
            raise
        if gone := _peer_left(error):  # a peer stopped (Ctrl-C, SIGTERM before training)
            logger.error(
                "process %d: another process of the job stopped (%s); stopping this one too",
                jax.process_index(), gone,
            )  # fmt: skip
        else:
            logger.exception("process %d failed; stopping every process", jax.process_index())
        logging.shutdown()
        sys.stderr.flush()
        os._exit(1)


# How Gloo reports a collective whose peer process has gone away.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def _peer_left(error: Exception) -> str:
    """The line of a collective's error that says a peer process went away, else "" (JAX
    raises it as a ValueError or a JaxRuntimeError, by where the collective ran)."""
    if not isinstance(error, (ValueError, jax.errors.JaxRuntimeError)):
        return ""
    lines = [line.strip() for line in str(error).splitlines()]
    return next((line for line in lines if any(gone in line for gone in PEER_GONE)), "")
