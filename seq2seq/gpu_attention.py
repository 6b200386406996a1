"""Eq. 1 on NVIDIA GPUs: cuDNN's fused flash-attention kernel, with the mask as lengths.

``seq2seq.attention.scaled_dot_product_attention`` runs this where ``choose_implementation``
picks "cudnn". The kernel never holds the [B, H, T, S] scores, so it cannot take the mask as a
dense array without reading it in full (``jax.nn.dot_product_attention`` would add it as a bias);
it takes each row's real query and key lengths and a causal flag instead, and computes the mask
tile by tile. Shapes use the package's letters (B batch, T queries, S keys, H heads, K key width).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

Array = jax.Array

# The input dtypes cuDNN's flash attention takes (float32 runs through XLA).
CUDNN_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
# Widest head it takes on every GPU that has it: 128 (Hopper and later take 256, which would
# need the device asked; the papers' models use 64).
CUDNN_MAX_HEAD_WIDTH = 128


def cudnn_takes(queries: Array, keys: Array, values: Array) -> bool:
    """Whether cuDNN's flash attention takes these inputs.

    One dtype for all three, bfloat16 or float16; equal key and value widths (d_k = d_v), a
    multiple of 8 and at most ``CUDNN_MAX_HEAD_WIDTH``; an even number of queries and of keys
    (JAX refuses the kernel's backward pass with lengths for odd ones: "Unsupported sequence
    length", seen on an H100 with jax 0.11.2).

    Args:
      queries: [B, T, H, K].
      keys: [B, S, H, K].
      values: [B, S, H, E].
    """
    width = queries.shape[-1]
    return (
        queries.dtype == keys.dtype == values.dtype
        and queries.dtype in CUDNN_DTYPES
        and keys.shape[-1] == values.shape[-1] == width
        and width % 8 == 0
        and width <= CUDNN_MAX_HEAD_WIDTH
        and queries.shape[1] % 2 == 0
        and keys.shape[1] % 2 == 0
    )


def attention_by_lengths(
    queries: Array,
    keys: Array,
    values: Array,
    query_lengths: Array | None,
    key_lengths: Array | None,
    *,
    causal: bool,
    implementation: Literal["cudnn", "xla"] = "cudnn",
) -> Array:
    """Vaswani et al. 2017, Eq. 1, masked by lengths: query t of row b reads key s when
    ``t < query_lengths[b]``, ``s < key_lengths[b]`` and, if ``causal``, ``s <= t``.

    A query that reads no key (past its row's length, or in a row without keys) gets a zero
    output.

    Args:
      queries: [B, T, H, K].
      keys: [B, S, H, K].
      values: [B, S, H, K].
      query_lengths: [B] int32, or None for no query padding.
      key_lengths: [B] int32, or None for no key padding.
      causal: Section 3.2.3's mask as well (T = S).
      implementation: "cudnn", the GPU's kernel; "xla" computes the same from the same
        arguments on any platform (the tests' stand-in for cuDNN).

    Returns:
      [B, T, H, K].
    """
    if query_lengths is None and key_lengths is None:
        return jax.nn.dot_product_attention(
            queries, keys, values, is_causal=causal, implementation=implementation
        )
    batch, length = queries.shape[:2]
    query_lengths = jnp.full((batch,), length) if query_lengths is None else query_lengths
    key_lengths = jnp.full((batch,), keys.shape[1]) if key_lengths is None else key_lengths
    # A row with no query or no key (a row that fills a shard, an empty source) is given one of
    # each, so the kernel never normalises over nothing (cuDNN's 0/0, then NaN gradients), and
    # its outputs are zeroed below with every other query that reads no key.
    outputs = jax.nn.dot_product_attention(
        queries,
        keys,
        values,
        is_causal=causal,
        query_seq_lengths=jnp.maximum(query_lengths, 1),
        key_value_seq_lengths=jnp.maximum(key_lengths, 1),
        implementation=implementation,
    )
    reads = (jnp.arange(length)[None, :] < query_lengths[:, None]) & (key_lengths[:, None] > 0)
    return jnp.where(reads[:, :, None, None], outputs, jnp.zeros((), outputs.dtype))
