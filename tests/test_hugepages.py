"""Entry points restart once with glibc's huge-page tunable, and only where it helps."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from seq2seq.hugepages import kernel_mode, restart_environment

HELPS_HERE = kernel_mode() == "madvise" and platform.libc_ver()[0] == "glibc"
NEEDS_MADVISE = pytest.mark.skipif(
    not HELPS_HERE, reason="needs Linux with glibc and transparent huge pages in madvise mode"
)


def test_the_tunable_is_added_to_what_glibc_tunables_already_holds():
    assert restart_environment({"HOME": "/h"}, "madvise", "glibc") == {
        "HOME": "/h",
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    }
    environment = restart_environment(
        {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "madvise", "glibc"
    )
    assert environment == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}


def test_no_restart_where_it_cannot_help_or_was_decided_already():
    assert restart_environment({}, "always", "glibc") is None  # every mapping gets huge pages
    assert restart_environment({}, "never", "glibc") is None
    assert restart_environment({}, None, "glibc") is None  # not Linux
    assert restart_environment({}, "madvise", "") is None  # musl, macOS
    opted_out = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    assert restart_environment(opted_out, "madvise", "glibc") is None  # also the restarted one


def test_kernel_mode_is_the_bracketed_choice(tmp_path):
    setting = tmp_path / "enabled"
    setting.write_text("always [madvise] never\n")
    assert kernel_mode(setting) == "madvise"
    assert kernel_mode(tmp_path / "missing") is None


@NEEDS_MADVISE
def test_a_restarted_command_keeps_its_arguments_and_gains_the_tunable(tmp_path):
    script = tmp_path / "entry.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from seq2seq.hugepages import use_huge_pages
            print("start", flush=True)
            use_huge_pages()
            print(sys.argv[1:], os.environ["GLIBC_TUNABLES"])
            """
        )
    )
    environment = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    result = subprocess.run(
        [sys.executable, "-u", str(script), "--flag", "a b"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    # Printed twice: once before the restart, once in the restarted process.
    assert result.stdout.splitlines() == [
        "start",
        "start",
        "['--flag', 'a b'] glibc.malloc.hugetlb=1",
    ]


@NEEDS_MADVISE
def test_the_tunable_takes_large_blocks_on_huge_pages():
    """A 64 MiB block from glibc's malloc, written and freed five times: 4 KiB pages fault
    16,384 times a block, huge pages 32 times. (Not through numpy, which asks for huge pages
    itself.)"""
    probe = textwrap.dedent(
        """
        import ctypes, resource
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(5):
            block = libc.malloc(64 << 20)
            ctypes.memset(block, 1, 64 << 20)
            libc.free(block)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        """
    )

    def faults(tunables: str) -> int:
        environment = {**os.environ, "GLIBC_TUNABLES": tunables}
        result = subprocess.run(
            [sys.executable, "-c", probe], env=environment, capture_output=True, text=True
        )
        return int(result.stdout)

    small_pages, huge_pages = faults("glibc.malloc.hugetlb=0"), faults("glibc.malloc.hugetlb=1")
    assert small_pages > 5 * 16_000
    assert huge_pages < small_pages / 10
