"""Entry points restart once with glibc settings that keep freed host memory for the next step."""

import ast
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from seq2seq.runtime.host_memory import TUNABLES, restart_environment

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
            from seq2seq.runtime.host_memory import keep_host_memory
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


def _commands() -> list:
    """Every file that runs as a command: the two scripts and each ``python -m seq2seq...``."""
    repo = Path(__file__).resolve().parents[1]
    files = [repo / "train.py", repo / "eval.py", *sorted((repo / "seq2seq").rglob("*.py"))]
    return [f for f in files if any(map(_is_main_guard, ast.parse(f.read_text()).body))]


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"


def test_every_command_starts_with_the_shared_preamble_before_any_other_import():
    commands = _commands()
    assert {f.name for f in commands} >= {"train.py", "eval.py", "average.py", "summary.py"}
    for path in commands:
        body = ast.parse(path.read_text()).body
        body = [node for node in body if not isinstance(node, ast.Expr)]  # the docstring
        if isinstance(body[0], ast.ImportFrom) and body[0].module == "__future__":
            body = body[1:]
        assert _is_main_guard(body[0]), f"{path}: the first statement is not the preamble"
        assert "cli.start()" in ast.unparse(body[0]), f"{path}: the preamble is not cli.start()"
        assert _is_main_guard(body[-1]), f"{path}: does not end in a __main__ block"
