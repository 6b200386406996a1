"""Entry points restart once with glibc settings that keep freed host memory for the next step."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from seq2seq.host_memory import TUNABLES, restart_environment

ALL = ":".join(TUNABLES)
NEEDS_GLIBC = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="needs Linux with glibc"
)


def test_the_tunables_are_added_to_what_glibc_tunables_already_holds():
    assert restart_environment({"HOME": "/h"}, "glibc") == {"HOME": "/h", "GLIBC_TUNABLES": ALL}
    environment = restart_environment({"GLIBC_TUNABLES": "glibc.rtld.nns=4"}, "glibc")
    assert environment == {"GLIBC_TUNABLES": "glibc.rtld.nns=4:" + ALL}


def test_no_restart_without_glibc_or_once_any_malloc_tunable_is_set():
    assert restart_environment({}, "") is None  # musl, macOS
    opted_out = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    assert restart_environment(opted_out, "glibc") is None
    assert restart_environment({"GLIBC_TUNABLES": ALL}, "glibc") is None  # the restarted process


@NEEDS_GLIBC
def test_a_restarted_command_keeps_its_arguments_and_gains_the_tunables(tmp_path):
    script = tmp_path / "entry.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from seq2seq.host_memory import keep_host_memory
            print("start", flush=True)
            keep_host_memory()
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
    # "start" twice: once before the restart, once in the restarted process.
    assert result.stdout.splitlines() == ["start", "start", f"['--flag', 'a b'] {ALL}"]


@NEEDS_GLIBC
def test_with_the_tunables_a_freed_block_is_reused_instead_of_mapped_again():
    """A 64 MiB block from glibc's malloc (not numpy's allocator, which has its own habits),
    written and freed five times on a worker thread, as XLA's temporaries are: by default each
    block is a fresh mapping, 16,384 page faults of 4 KiB; kept, only the first one faults."""
    probe = textwrap.dedent(
        """
        import ctypes, resource, threading
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        def steps():
            for _ in range(5):
                block = libc.malloc(64 << 20)
                ctypes.memset(block, 1, 64 << 20)
                libc.free(block)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        worker = threading.Thread(target=steps)
        worker.start()
        worker.join()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        """
    )

    def faults(tunables: str | None) -> int:
        environment = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
        if tunables:
            environment["GLIBC_TUNABLES"] = tunables
        result = subprocess.run(
            [sys.executable, "-c", probe], env=environment, capture_output=True, text=True
        )
        return int(result.stdout)

    assert faults(None) > 5 * 16_000
    assert faults(ALL) < 2 * 16_384
