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
    """Yields the folder to write ``output``'s files in, put in ``output``'s place when the
    block ends without an error (an ``output`` already there is replaced: the caller's refusal
    says first what may be); on an error it is removed."""
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
        old = output.with_name(f".{output.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        output.rename(old)
        partial.rename(output)
        shutil.rmtree(old)
    else:
        partial.rename(output)


@contextlib.contextmanager
def file_written_whole(path: Path) -> Iterator[Path]:
    """Yields a hidden sibling of ``path`` to write, renamed over ``path`` when the block ends
    without an error (removed on one): a Ctrl-C, SIGKILL or full disk leaves the old file (or
    none), never one cut short that a later command would read as complete; and another
    process reading meanwhile (one of a multi-process job) sees the old one or the new."""
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_whole(path: Path, content: str | bytes) -> None:
    """``content`` (text as UTF-8) as ``path``'s, there whole or not at all
    (``file_written_whole``)."""
    with file_written_whole(path) as temporary:
        if isinstance(content, bytes):
            temporary.write_bytes(content)
        else:
            temporary.write_text(content, encoding="utf-8")
