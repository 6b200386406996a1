"""What the bench's command lines read before JAX loads: the matmul sizes that measure the peak,
the input pipeline's target, and the check of ``--matmul_sizes``. ``seq2seq.bench.measure``
measures with the same constants."""

from __future__ import annotations

from seq2seq.config import ConfigError

MATMUL_SIZES = (512, 1024, 2048)  # square n x n @ n x n; the largest usually runs fastest
# The input pipeline's target on the 2-core development CPU: its tokens/s over what training
# consumes (each family's own targets are in its registry entry, ``BenchTargets``).
TARGET_DATA_MULTIPLE = 10.0


def parse_matmul_sizes(values: list[str]) -> tuple[int, ...]:
    """``--matmul_sizes`` as integers; anything but positive integers is a one-line error."""
    if not values or not all(value.strip().isdigit() and int(value) > 0 for value in values):
        raise ConfigError(
            f"--matmul_sizes {','.join(values)!r}: give positive integers, e.g. 512,1024"
        )
    return tuple(int(value) for value in values)
