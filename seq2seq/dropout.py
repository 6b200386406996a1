"""Dropout from 16 random bits per element: the one dropout both models and attention use.

``jax.random.bernoulli`` spends a whole 32-bit draw on each element, and each 32-bit draw is
one call of the Threefry-2x32 hash with its 64 output bits folded to 32. On a CPU those calls are
most of what dropout costs: at ``bench_small``'s shapes the 17 dropout sites of a Transformer step
drew 9 million of them, about 70 ms of a 640 ms step. A 16-bit draw decides ``rate = 0.1`` just
as well, so ``keep_mask`` calls the same hash (JAX's ``threefry2x32`` primitive, keyed by the
site's key, counting 0, 1, 2, ...) once per four elements and reads its 64 bits as four 16-bit
draws: a quarter of the hashing.

The price is resolution: the drop probability is ``rate`` rounded to a multiple of 2^-16
(``0.1`` becomes ``6554 / 65536 = 0.1000061``). The survivors are scaled by the reciprocal of the
probability actually used, so the expected output equals the input exactly.
"""

from __future__ import annotations

import math

import jax
import jax.extend.random
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
    probability; a quarter of a Threefry-2x32 call (16 of its 64 bits) per element."""
    threshold = drop_threshold(rate)
    size = math.prod(shape)
    counters = jax.lax.iota(jnp.uint32, -(-size // 4))
    key_words = jax.random.key_data(key).reshape(-1, 2)  # [1, 2] for Threefry keys
    key_words = jax.lax.reduce(key_words, jnp.uint32(0), jax.lax.bitwise_xor, (0,))
    high, low = jax.extend.random.threefry2x32_p.bind(
        key_words[0], key_words[1], counters, jnp.zeros_like(counters)
    )
    # [W, 2] uint32 -> [W, 2, 2] uint16 -> [4W]: in row-major order these reshapes move no data.
    draws = jax.lax.bitcast_convert_type(jnp.stack([high, low], axis=-1), jnp.uint16).reshape(-1)
    if draws.shape[0] != size:
        draws = draws[:size]
    return draws.reshape(shape) >= threshold, 1.0 - threshold / _LEVELS


def dropout(x: Array, rate: float, key: Array) -> Array:
    """Zeroes each element of ``x`` with probability ``rate`` and scales the rest so the
    expectation is unchanged; the identity at rate 0."""
    if rate <= 0.0:
        return x
    keep, keep_probability = keep_mask(key, rate, x.shape)
    return jnp.where(keep, x / keep_probability, 0.0).astype(x.dtype)
