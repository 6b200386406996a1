"""Enough XLA threads for simulated CPU devices, so that their collectives cannot starve.

``XLA_FLAGS=--xla_force_host_platform_device_count=8`` splits the CPU into eight devices that
share one pool of XLA threads, by default as many threads as devices when the cores are fewer.
A collective holds its thread until every device has reached it, and one device can hold two:
in RNNsearch's data-parallel backward pass, a scan whose body all-reduces runs beside an
all-reduce outside it. When one device holds two threads, another device finds none, the
collective waits for it for ever, and XLA ends the process ("only 7 of 8 arrived"). The eight-
device mesh test hung so in 3 of 4 runs (2026-12-06). ``PJRT_NPROC`` sizes the pool: four
threads a device leave room for a device held in several scans at once, and idle threads cost
nothing. A ``PJRT_NPROC`` already set wins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

VARIABLE = "PJRT_NPROC"
THREADS_PER_DEVICE = 4
_DEVICE_COUNT = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


def simulated_device_count(environ: Mapping[str, str]) -> int:
    """How many CPU devices ``XLA_FLAGS`` asks for (the last setting wins, as in XLA); 1 if
    none."""
    counts = _DEVICE_COUNT.findall(environ.get("XLA_FLAGS", ""))
    return int(counts[-1]) if counts else 1


def threads_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``PJRT_NPROC`` at ``THREADS_PER_DEVICE`` threads for each simulated
    device, where ``XLA_FLAGS`` asks for more than one and ``PJRT_NPROC`` is not set."""
    devices = simulated_device_count(environ)
    if devices <= 1 or VARIABLE in environ:
        return dict(environ)
    return {**environ, VARIABLE: str(THREADS_PER_DEVICE * devices)}


def size_thread_pool() -> None:
    """Sets ``threads_environment`` in this process (before JAX creates its CPU client)."""
    os.environ.update(threads_environment(os.environ))
