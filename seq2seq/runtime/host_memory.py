"""XLA's host memory kept between steps: glibc settings every entry point starts with.

On a CPU, XLA allocates one temporary buffer for each execution of a compiled function (403 MB
for a ``bench_small`` training step) and frees it when the execution ends. By default glibc
serves a block that large with a fresh ``mmap`` and unmaps it on ``free``, so on every step the
kernel maps and zeroes it again, 4 KiB at a time: a page fault per 4 KiB, on every step. Four
of glibc's tunables make it keep the memory instead:

* ``glibc.malloc.arena_max=1``: XLA's worker threads allocate from the main heap, the one that
  can grow to any size (a thread's own arena cannot hold a block this large, and maps it);
* ``glibc.malloc.mmap_max=0``: large blocks come from that heap, not from fresh mappings;
* ``glibc.malloc.trim_threshold=2**36``: freed memory stays with the process for the next step;
* ``glibc.malloc.hugetlb=1``: what the kernel does map comes in 2 MiB pages where it allows.

With them a step takes no page faults (the speed gained: docs/benchmarks.md). The price is
memory the process no longer returns: a higher peak resident size.

glibc reads its tunables when a process starts, so ``keep_host_memory`` restarts the command
once with them in ``GLIBC_TUNABLES``; entry points call it before they import JAX. It does
nothing away from Linux and glibc, and nothing when ``GLIBC_TUNABLES`` already sets any
``glibc.malloc`` tunable (set one, e.g. ``glibc.malloc.hugetlb=0``, to keep glibc's defaults).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

TUNABLES = (
    "glibc.malloc.arena_max=1",
    "glibc.malloc.mmap_max=0",
    f"glibc.malloc.trim_threshold={2**36}",
    "glibc.malloc.hugetlb=1",
)


def restart_environment(environ: Mapping[str, str], libc: str) -> dict[str, str] | None:
    """The environment to restart the process in, or None to carry on unchanged.

    Args:
      environ: the current environment.
      libc: the C library's name, as ``platform.libc_ver()`` gives it.
    """
    tunables = environ.get("GLIBC_TUNABLES", "")
    if libc != "glibc" or "glibc.malloc." in tunables:
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, [tunables, *TUNABLES]))}


def keep_host_memory() -> None:
    """Restarts this command with ``TUNABLES`` (see above) where they apply; returns without
    doing anything otherwise, and always in the restarted process."""
    environment = restart_environment(os.environ, platform.libc_ver()[0])
    if environment is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
