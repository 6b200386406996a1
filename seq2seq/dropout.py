"""Dropout from 16 random bits per element: the one dropout both models and attention use.

``jax.random.bernoulli`` spends a whole 32-bit draw on each element, and each 32-bit draw is
one call of the Threefry-2x32 hash (20 rounds) with its 64 output bits folded to 32. On a CPU
those calls were most of what dropout cost: a Transformer step's dropout sites draw millions of
them. Two changes make it cheap:

* 16 bits decide ``rate = 0.1`` as well as 32 do, so each hash output serves several elements;
* within one site the bits come from a counter hash keyed by the site's key: each element pair's
  32 bits are ``mix(i)`` of its index ``i``, three xorshift-multiply rounds (the constants of
  Wellons' "lowbias32" integer hash) with the key's two words added in, several times cheaper
  than Threefry even once per four elements. The keys themselves still come from JAX's
  Threefry generator (``fold_in`` per site), and every round is a bijection, so a site never
  repeats a value before 2^32 pairs. Tests check the kept fraction, the independence of
  neighbouring elements, of distant ones, of the two halves of one output and of two sites, and
  the balance of every bit.

The price of 16 bits is resolution: the drop probability is ``rate`` rounded to a multiple of
2^-16 (``0.1`` becomes ``6554 / 65536 = 0.1000061``). The survivors are scaled by the
reciprocal of the probability actually used, so the expected output equals the input exactly.
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


def mix(counters: Array, key_words: Array) -> Array:
    """32 random bits per uint32 counter, keyed by two uint32 words: a bijection of the counter.

    A Weyl step spreads consecutive counters and adds the first key word; three xorshift-multiply
    rounds (Wellons' "lowbias32" constants) mix every input bit into every output bit, with the
    second key word folded in after the first.
    """
    h = counters * jnp.uint32(0x9E3779B9) + key_words[0]
    h = (h ^ (h >> 16)) * jnp.uint32(0x21F0AAAD)
    h = (h ^ key_words[1] ^ (h >> 15)) * jnp.uint32(0x735A2D97)
    return h ^ (h >> 15)


def keep_mask(key: Array, rate: float, shape: tuple[int, ...]) -> tuple[Array, float]:
    """A boolean mask of ``shape``, True with probability 1 - ``rate`` (to 2^-16), and that
    probability; half of one ``mix`` output (16 bits) per element."""
    threshold = drop_threshold(rate)
    size = math.prod(shape)
    key_words = jax.random.key_data(key).reshape(-1, 2)  # [1, 2] for Threefry keys
    key_words = jax.lax.reduce(key_words, jnp.uint32(0), jax.lax.bitwise_xor, (0,))
    bits = mix(jax.lax.iota(jnp.uint32, -(-size // 2)), key_words)  # [W] uint32
    # [W] uint32 -> [W, 2] uint16 -> [2W]: in row-major order these reshapes move no data.
    draws = jax.lax.bitcast_convert_type(bits, jnp.uint16).reshape(-1)
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
