"""Dropout from 16 random bits per element: the one dropout both models and attention use.

``jax.random.bernoulli`` spends a whole 32-bit draw of the counter-based generator on each
element, and on a CPU those draws are most of what dropout costs: at ``bench_small``'s shapes the
17 dropout sites of a Transformer step drew 9 million of them, about 70 ms of a 640 ms step. A
16-bit draw decides ``rate = 0.1`` just as well, so ``keep_mask`` asks the generator for half as
many 32-bit words and reads each as two 16-bit halves, which halves the work.

The price is resolution: the drop probability is ``rate`` rounded to a multiple of 2^-16
(``0.1`` becomes ``6554 / 65536 = 0.1000061``). The survivors are scaled by the reciprocal of the
probability actually used, so the expected output equals the input exactly.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Array = jax.Array

_LEVELS = 1 << 16  # 16-bit draws


def drop_threshold(rate: float) -> int:
    """Draws below this of the 2^16 levels are dropped: ``rate`` rounded to the nearest level."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    return round(rate * _LEVELS)


def keep_mask(key: Array, rate: float, shape: tuple[int, ...]) -> tuple[Array, float]:
    """A boolean mask of ``shape``, True with probability 1 - ``rate`` (to 2^-16), and that
    probability, from one 16-bit half of a 32-bit random word per element."""
    threshold = drop_threshold(rate)
    size = math.prod(shape)
    words = jax.random.bits(key, ((size + 1) // 2,), jnp.uint32)
    # [W] uint32 -> [W, 2] uint16 -> [2W]: in row-major order these reshapes move no data.
    halves = jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(-1)
    if halves.shape[0] != size:
        halves = halves[:size]
    return halves.reshape(shape) >= threshold, 1.0 - threshold / _LEVELS


def dropout(x: Array, rate: float, key: Array) -> Array:
    """Zeroes each element of ``x`` with probability ``rate`` and scales the rest so the
    expectation is unchanged; the identity at rate 0."""
    if rate <= 0.0:
        return x
    keep, keep_probability = keep_mask(key, rate, x.shape)
    return jnp.where(keep, x / keep_probability, 0.0).astype(x.dtype)
