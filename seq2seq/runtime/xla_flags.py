"""The XLA option every command sets before JAX loads: matrix products from the GPU's library.

On an NVIDIA GPU, XLA can write the step's matrix products itself (with Triton) and then tries
several tilings of every one while it compiles. For these models cuBLAS's kernels are as fast,
and the compile takes a fraction of the time: Transformer-big's training step on an H200 ran
76 ms a step after a 23 s compile with cuBLAS, 83 ms after 78 s with Triton's
(docs/benchmarks.md). The option is set only where JAX has a CUDA plugin installed, so a
CPU-only install's ``XLA_FLAGS`` (and the keys of its compiled programs on disk) stay as they
were; a setting of it in ``XLA_FLAGS`` wins.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

OPTION = "xla_gpu_enable_triton_gemm"
LIBRARY_GEMMS = f"--{OPTION}=false"
# JAX's CUDA plugins and their PJRT parts, by the modules they install.
CUDA_PLUGINS = (
    "jax_cuda12_plugin",
    "jax_cuda13_plugin",
    "jax_plugins.xla_cuda12",
    "jax_plugins.xla_cuda13",
)


def flags_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``LIBRARY_GEMMS`` added to ``XLA_FLAGS``, unless it sets the option."""
    flags = environ.get("XLA_FLAGS", "")
    if OPTION in flags:
        return dict(environ)
    return {**environ, "XLA_FLAGS": " ".join(filter(None, [flags, LIBRARY_GEMMS]))}


def cuda_installed() -> bool:
    """Whether one of JAX's CUDA plugins is installed (found without importing JAX)."""
    for name in CUDA_PLUGINS:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ModuleNotFoundError:  # no jax_plugins package at all
            continue
    return False


def use_library_gemms() -> None:
    """Sets ``flags_environment`` in this process where JAX may run on an NVIDIA GPU (before
    JAX loads: XLA reads the variable once)."""
    if cuda_installed():
        os.environ.update(flags_environment(os.environ))
