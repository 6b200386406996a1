"""Eq. 1 on CPUs: a hand-written backward, and sentences grouped so that every core works.

``seq2seq.attention.layers.scaled_dot_product_attention`` runs this on a CPU where it would run a
fused kernel elsewhere (``layers.choose_implementation`` picks, at trace time, so nothing here
runs on another platform). Two things differ from the automatic path, each for a reason of XLA
on CPUs:

* ``attention``: the explicit equation with its backward written out (``_backward``);
* ``grouped_attention``: ``attention`` on groups of sentences (``sentence_groups``) that XLA runs
  on the cores side by side.

Both compute what the reference equation computes (values and gradients; tests check them).
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp

from seq2seq.attention.equations import masked_softmax, scaled_dot_product_scores, weighted_values

Array = jax.Array


@jax.custom_vjp
def attention(queries: Array, keys: Array, values: Array, mask: Array | None) -> Array:
    """Eq. 1 as the explicit equation, with its backward written out (``_backward``).

    Differentiating softmax the automatic way needs ``rowsum(dP * P)`` over every [T, S] score,
    and XLA on a CPU fuses that reduction into the ``dO V^T`` product, which then runs far below
    the product's own speed (docs/benchmarks.md, "backward written out"). The same sum is
    ``rowsum(dO * O)`` over the outputs (FlashAttention's identity), [T, E] per head, which XLA
    keeps out of the product.
    """
    return _forward(queries, keys, values, mask)[0]


def _forward(queries, keys, values, mask):
    weights = masked_softmax(scaled_dot_product_scores(queries, keys), mask)  # [B, H, T, S]
    outputs = weighted_values(weights, values)  # [B, T, H, E]
    return outputs, (queries, keys, values, weights, outputs)  # weights are 0 where masked


def _backward(residuals, d_outputs):
    queries, keys, values, weights, outputs = residuals
    dtype = values.dtype
    d_outputs = d_outputs.astype(dtype)
    d_values = jnp.einsum("bhts,bthe->bshe", weights.astype(dtype), d_outputs)
    d_weights = jnp.einsum("bthe,bshe->bhts", d_outputs, values, preferred_element_type=jnp.float32)
    correction = jnp.einsum(
        "bthe,bthe->bht", d_outputs, outputs, preferred_element_type=jnp.float32
    )  # rowsum(dP * P) = rowsum(dO * O)
    d_scores = weights * (d_weights - correction[..., None]) / math.sqrt(queries.shape[-1])
    d_scores = d_scores.astype(dtype)  # [B, H, T, S]
    d_queries = jnp.einsum("bhts,bshk->bthk", d_scores, keys)
    d_keys = jnp.einsum("bhts,bthk->bshk", d_scores, queries)
    return d_queries, d_keys, d_values, None


attention.defvjp(_forward, _backward)

# Most sentence groups ``grouped_attention`` makes, whatever the core count: each group adds
# its operations to the program, and compile time grows with them.
_MAX_GROUPS = 8


def sentence_groups(batch: int, cores: int | None = None, devices: int | None = None) -> int:
    """How many groups of sentences the CPU attention runs side by side.

    Two per core, at most ``_MAX_GROUPS``, and a divisor of ``batch`` so the groups are equal.
    One where the process has several CPU devices (``--xla_force_host_platform_device_count``):
    their programs already run side by side on the cores, one per shard of the batch, and slicing
    a batch split over devices moves rows between them, which costs more than the groups gain.

    Args:
      batch: sentences (query rows) in the batch.
      cores: the CPU cores this process may use; None: ask the operating system.
      devices: the process's CPU devices; None: ask JAX.
    """
    if devices is None:
        devices = len(jax.devices("cpu"))
    if devices > 1:
        return 1
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    target = max(1, min(batch, 2 * (cores or 1), _MAX_GROUPS))
    return max(g for g in range(1, target + 1) if batch % g == 0)


def grouped_attention(
    queries: Array, keys: Array, values: Array, mask: Array | None, groups: int | None = None
) -> Array:
    """``attention`` on groups of sentences that XLA runs on the cores side by side.

    XLA on a CPU hands each batched per-head product ([B, H] products of T x S) to YNNPACK, which
    runs it on one core, leaving the other cores idle through all of them. The groups' products
    are independent operations, and XLA's runtime runs independent operations at once (the group
    counts measured: docs/benchmarks.md).

    ``groups`` (a divisor of B) overrides ``sentence_groups``.
    """
    groups = groups or sentence_groups(queries.shape[0])
    if groups == 1:
        return attention(queries, keys, values, mask)

    def split(x: Array | None) -> list:
        if x is None or x.shape[0] == 1:  # shared by every sentence (a mask broadcast over B)
            return [x] * groups
        return jnp.split(x, groups)

    parts = zip(split(queries), split(keys), split(values), split(mask), strict=True)
    return jnp.concatenate([attention(*part) for part in parts], axis=0)
