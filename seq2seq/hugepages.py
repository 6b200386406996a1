"""Large host buffers on transparent huge pages: what every entry point asks for first.

On a CPU, XLA allocates one temporary buffer for each execution of a compiled function (403 MB
for a ``bench_small`` training step) and frees it when the execution ends. glibc serves a block
that large with a fresh ``mmap`` and unmaps it on ``free``, so on every step the kernel maps and
zeroes it again, 4 KiB at a time: 116,000 page faults and about 170 ms of CPU time per step,
measured. glibc's ``glibc.malloc.hugetlb=1`` tunable asks for transparent huge pages (2 MiB) for
such blocks instead: about 550 faults per step, and the bench_small step went from 533 to 493 ms.

glibc reads its tunables when a process starts, so ``use_huge_pages`` restarts the command once,
with the tunable added to ``GLIBC_TUNABLES``; entry points call it before they import JAX. It
does nothing where it cannot help: away from Linux and glibc, where the kernel already gives
huge pages to every large mapping (``always``) or to none (``never``), and wherever
``GLIBC_TUNABLES`` already mentions ``glibc.malloc.hugetlb`` (``glibc.malloc.hugetlb=0`` opts
out).
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Mapping
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb"
KERNEL_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def kernel_mode(setting: Path = KERNEL_SETTING) -> str | None:
    """The kernel's transparent-huge-page mode (``always``, ``madvise`` or ``never``), or None
    where the setting cannot be read (not Linux, no such kernel feature)."""
    try:
        match = re.search(r"\[(\w+)\]", setting.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def restart_environment(
    environ: Mapping[str, str], mode: str | None, libc: str
) -> dict[str, str] | None:
    """The environment to restart the process in, or None to carry on unchanged.

    Args:
      environ: the current environment.
      mode: ``kernel_mode()``.
      libc: the C library's name, as ``platform.libc_ver()`` gives it.
    """
    tunables = environ.get("GLIBC_TUNABLES", "")
    if libc != "glibc" or mode != "madvise" or TUNABLE in tunables:
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, [tunables, f"{TUNABLE}=1"]))}


def use_huge_pages() -> None:
    """Restarts this command with ``glibc.malloc.hugetlb=1`` where that helps (see above);
    returns without doing anything otherwise, and always in the restarted process."""
    environment = restart_environment(os.environ, kernel_mode(), platform.libc_ver()[0])
    if environment is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
