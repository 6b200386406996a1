"""A job of several processes: joining it, and stopping every process when one fails.

Several processes (hosts, or ``train.py`` started by hand on one machine) train one model
together: each runs the same program on its own devices, and ``jax.jit``'s collectives join them.
Before that, each joins the job (``initialize_processes``); if one fails mid-run, the others
must not wait for it forever (``stop_every_process_on_error``). The mesh over all their devices
is ``seq2seq.training.sharding``'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

import jax

logger = logging.getLogger(__name__)

HEARTBEAT_TIMEOUT_SECONDS = 30


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
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address or None,
            num_processes=num_processes or None,
            process_id=process_id if process_id >= 0 else None,
            # A process silent this long is taken for dead and every other one stops (without
            # a checkpoint) instead of waiting for it in a collective; JAX's default is 100 s.
            heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_SECONDS,
        )
    except ValueError as error:  # JAX's "coordinator_address should be defined."
        if coordinator_address:
            raise
        raise ValueError(
            f"config.mesh.distributed=True found no cluster to join ({error}); outside Slurm, "
            "a Cloud TPU slice, Kubernetes or Open MPI, set mesh.coordinator_address, "
            "mesh.num_processes and mesh.process_id for each process (docs/scaling.md)"
        ) from None


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
    except Exception:
        if jax.process_count() == 1:
            raise
        logger.exception("process %d failed; stopping every process", jax.process_index())
        logging.shutdown()
        sys.stderr.flush()
        os._exit(1)
