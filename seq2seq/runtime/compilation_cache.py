"""JAX's persistent compilation cache, on for every command: a restart or an eval reuses programs.

Each bucket shape of a training step, and each beam-search loop, is a program XLA compiles when a
process first runs it: on an accelerator, a minute or more for the big Transformer. JAX can keep
compiled programs on disk, keyed by the program, the compiler options and the devices, and load
them in later processes instead of compiling again. Every entry point turns that on before JAX
loads (``cli.start``), in a per-user directory::

    $XDG_CACHE_HOME/seq2seq/jax        (~/.cache/seq2seq/jax when XDG_CACHE_HOME is unset)

It is set through JAX's own environment variables, so that the processes a command starts share
it, and so that each can be changed without this module:

* ``--nocompilation_cache`` on any command line, or ``JAX_ENABLE_COMPILATION_CACHE=false``,
  turns the cache off;
* ``JAX_COMPILATION_CACHE_DIR=DIR`` puts it elsewhere (the tests keep theirs in the checkout);
* ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` keeps only programs that took at least this
  long to compile (JAX's default, 1 s: what compiles faster is not worth a file).

Library modules never turn it on: importing ``seq2seq`` changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DIRECTORY_VARIABLE = "JAX_COMPILATION_CACHE_DIR"  # read by JAX as ``jax_compilation_cache_dir``


def default_directory(environ: Mapping[str, str]) -> Path:
    """The per-user cache directory: under ``XDG_CACHE_HOME``, else ``~/.cache``."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "seq2seq" / "jax"


def cache_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with the cache directory set, unless it names one already."""
    if environ.get(DIRECTORY_VARIABLE):
        return dict(environ)
    return {**environ, DIRECTORY_VARIABLE: str(default_directory(environ))}


def compile_afresh() -> None:
    """Turns the cache off in this process and in the processes it starts
    (``--nocompilation_cache``: every program compiled anew, nothing written)."""
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    import jax  # loaded by the command's imports, or now (and then it reads the variable)

    jax.config.update("jax_enable_compilation_cache", False)


def keep_compiled_programs() -> None:
    """Points JAX's persistent compilation cache at the per-user directory (call before JAX
    loads: JAX reads the variable when it starts; ``JAX_ENABLE_COMPILATION_CACHE=false`` still
    turns the cache off)."""
    os.environ.update(cache_environment(os.environ))
