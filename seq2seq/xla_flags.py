"""The XLA option every command sets before JAX loads: matrix products from the GPU's library.

On an NVIDIA GPU, XLA can write the step's matrix products itself (with Triton) and then tries
several tilings of every one while it compiles. For these models cuBLAS's kernels are as fast,
and the compile takes a fraction of the time: Transformer-big's training step on an H200 ran
76 ms a step after a 23 s compile with cuBLAS, 83 ms after 78 s with Triton's
(docs/benchmarks.md). Other platforms ignore the option; a setting of it in ``XLA_FLAGS`` wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

OPTION = "xla_gpu_enable_triton_gemm"
LIBRARY_GEMMS = f"--{OPTION}=false"


def flags_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``LIBRARY_GEMMS`` added to ``XLA_FLAGS``, unless it sets the option."""
    flags = environ.get("XLA_FLAGS", "")
    if OPTION in flags:
        return dict(environ)
    return {**environ, "XLA_FLAGS": " ".join(filter(None, [flags, LIBRARY_GEMMS]))}


def use_library_gemms() -> None:
    """Sets ``flags_environment`` in this process (before JAX loads: XLA reads it once)."""
    os.environ.update(flags_environment(os.environ))
