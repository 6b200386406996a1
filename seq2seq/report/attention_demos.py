"""Small computations that make the attention equations tangible, for the notebooks."""

from __future__ import annotations

import timeit
from collections.abc import Callable, Sequence

import jax
import numpy as np

from seq2seq.attention import layers


def softmax_entropy_by_width(
    widths: Sequence[int], *, scaled: bool, keys: int = 32, samples: int = 256, seed: int = 0
) -> list[float]:
    """Mean entropy (nats) of attention weights for random unit-variance queries and keys.

    Unscaled dot products have variance ``d_k``, so as ``d_k`` grows the softmax collapses onto
    one key (entropy near 0) and its gradients vanish; dividing by ``sqrt(d_k)`` (Vaswani et al.
    2017, Section 3.2.1) keeps the entropy where it was. The maximum is ``log(keys)``.
    """
    entropies = []
    for width in widths:
        key_q, key_k = jax.random.split(jax.random.key(seed + width))
        queries = jax.random.normal(key_q, (samples, 1, 1, width))  # [B, T=1, H=1, K]
        keys_ = jax.random.normal(key_k, (samples, keys, 1, width))  # [B, S, H=1, K]
        score = layers.scaled_dot_product_scores if scaled else layers.dot_product_scores
        weights = np.asarray(layers.masked_softmax(score(queries, keys_), None))
        entropy = -(weights * np.log(np.maximum(weights, 1e-30))).sum(-1)
        entropies.append(float(entropy.mean()))
    return entropies


def best_seconds(function: Callable[..., jax.Array], *args: jax.Array, repeats: int = 20) -> float:
    """The fastest of ``repeats`` calls of ``function(*args)``, in seconds, after a first call.

    The first call compiles a jitted function and is not timed; each timed call waits for its
    result (JAX dispatches asynchronously).
    """
    jax.block_until_ready(function(*args))
    timer = timeit.Timer(lambda: jax.block_until_ready(function(*args)))
    return min(timer.repeat(repeat=repeats, number=1))
