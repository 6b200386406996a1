"""An output folder, or file, that appears whole or not at all (an averaged run, an exported
model; a run's scores, a report).

A command that writes a folder file by file and is interrupted (Ctrl-C, SIGTERM) would leave it
half written, and its rerun would refuse the folder as not empty. Written beside it under a
hidden name and renamed when complete, the folder is never half there; the rerun removes what
the interrupted command left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def partial_folder(output: Path) -> Path:
    """Where ``output``'s files are written until they are complete: a hidden sibling."""
    return output.with_name(f".{output.name}.partial")


@contextlib.contextmanager
def written_whole(output: Path) -> Iterator[Path]:
    """Yields the folder to write ``output``'s files in, renamed to ``output`` when the block
    ends without an error; on an error it is removed. ``output`` must be absent or empty (the
    caller's refusal says so first)."""
    partial = partial_folder(output)
    if partial.exists():  # an interrupted earlier attempt's
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if output.exists():
        output.rmdir()  # empty: the caller checked
    partial.rename(output)


def write_whole(path: Path, content: str | bytes) -> None:
    """``content`` (text as UTF-8) as ``path``'s, there whole or not at all: written to a
    hidden sibling and renamed over ``path``, so a Ctrl-C, SIGKILL or full disk leaves the old
    file (or none), never one cut short that a later command would read as complete; and
    another process reading meanwhile (one of a multi-process job) sees the old one or the new."""
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        if isinstance(content, bytes):
            temporary.write_bytes(content)
        else:
            temporary.write_text(content, encoding="utf-8")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
