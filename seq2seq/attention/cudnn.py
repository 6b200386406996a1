"""Eq. 1 on NVIDIA GPUs: cuDNN's fused flash-attention kernel, with the mask as lengths.

``seq2seq.attention.layers.scaled_dot_product_attention`` runs this where ``choose_implementation``
picks "cudnn". The kernel never holds the [B, H, T, S] scores, so it cannot take the mask as a
dense array without reading it in full (``jax.nn.dot_product_attention`` would add it as a bias);
it takes each row's real query and key lengths and a causal flag instead, and computes the mask
tile by tile. Rows that pack several examples are described the same way, an example at a time:
each one's length and where it starts (``segment_layout``), the kernel's packed layout.
Shapes use the package's letters (B batch, T queries, S keys, H heads, K key width).
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
# Packed rows through cuDNN's packed layout (JAX's private API; Hopper or later), on since
# tests/test_fused_attention.py's cuDNN packed-row test passed on an H100 (jax 0.11.2). False
# sends packed rows through XLA's path on every GPU.
CUDNN_PACKED = True
PACKED_MIN_CAPABILITY = (9, 0)  # JAX refuses the packed layout before Hopper


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


def compute_capability() -> tuple[int, ...]:
    """The first device's CUDA compute capability, e.g. (9, 0) on Hopper; (0, 0) off a GPU."""
    capability = getattr(jax.devices()[0], "compute_capability", "0.0")
    return tuple(int(part) for part in capability.split("."))


def packed_rows_supported() -> bool:
    """Whether cuDNN's packed layout is on (``CUDNN_PACKED``) and the GPU takes it."""
    return CUDNN_PACKED and compute_capability() >= PACKED_MIN_CAPABILITY


def segment_layout(segments: Array, count: int) -> tuple[Array, Array]:
    """Each row's examples as cuDNN's packed layout reads them.

    Rows hold examples 1, 2, ... one after another from position 0, then padding (0): the
    layout of ``seq2seq.data.packing``. A row without examples is given one of length 1 at
    position 0, so the kernel never normalises over nothing; its outputs are zeroed after.

    Args:
      segments: [B, T] int32 segment ids.
      count: examples a row may hold, at most (a static bound: ``min(T, S)`` for attention
        between rows of T and S positions, as every example has a token on each side).

    Returns:
      ([B, count] int32 lengths of the examples, [B, count + 1] int32 offsets where each
      starts), both -1 past a row's last example.
    """
    lengths = jax.vmap(lambda row: jnp.bincount(row, length=count + 1))(segments)[:, 1:]
    lengths = lengths.astype(jnp.int32)
    starts = jnp.cumsum(lengths, axis=1) - lengths
    empty_row = lengths[:, :1] == 0
    first = jnp.arange(count)[None, :] == 0
    lengths = jnp.where(empty_row & first, 1, lengths)
    present = lengths > 0
    offsets = jnp.where(present, starts, -1)
    offsets = jnp.pad(offsets, ((0, 0), (0, 1)), constant_values=-1)
    return jnp.where(present, lengths, -1), offsets


def attention_by_segments(
    queries: Array,
    keys: Array,
    values: Array,
    query_segments: Array,
    key_segments: Array,
    *,
    causal: bool,
    implementation: Literal["cudnn", "xla"] = "cudnn",
) -> Array:
    """Vaswani et al. 2017, Eq. 1, on packed rows: a query of example m reads the keys of
    example m of its row (and, if ``causal``, none after its own position).

    Example m of the query row and of the key row are one sentence pair's two sides (or one
    side, in self-attention), so both rows hold the same examples in the same order. A query
    in padding gets a zero output.

    Args:
      queries: [B, T, H, K].
      keys: [B, S, H, K].
      values: [B, S, H, K].
      query_segments: [B, T] int32 segment ids of the queries (0 is padding).
      key_segments: [B, S] int32 segment ids of the keys.
      causal: a decoder's self-attention (the same segments on both sides).
      implementation: "cudnn", the GPU's kernel in its packed layout; "xla" computes the same
        from the same layout on any platform (the tests' stand-in for cuDNN).

    Returns:
      [B, T, H, K].
    """
    count = min(queries.shape[1], keys.shape[1])
    query_lengths, query_offsets = segment_layout(query_segments, count)
    key_lengths, key_offsets = segment_layout(key_segments, count)
    if implementation == "cudnn":
        from jax._src.cudnn import fused_attention_stablehlo as cudnn  # JAX's packed layout

        # The kernel writes only the positions its examples cover and leaves the others (padding,
        # a row without examples) as it found the memory: stale values, NaN at times (seen on an
        # H100). Outputs there are zeroed below; the inputs pass through a select on the
        # segments, so their gradients there are zero too.
        queries = _in_examples(queries, query_segments)
        keys, values = _in_examples(keys, key_segments), _in_examples(values, key_segments)
        outputs = cudnn.dot_product_attention(
            queries,
            keys,
            values,
            q_seqlen=query_lengths,
            kv_seqlen=key_lengths,
            q_offsets=query_offsets,
            kv_offsets=key_offsets,
            scale=queries.shape[-1] ** -0.5,
            mask_type=cudnn.MaskType.PADDING_CAUSAL if causal else cudnn.MaskType.PADDING,
            qkv_layout="BTNH",
        )
    else:
        query_ids = _example_ids(query_lengths, query_offsets, queries.shape[1])
        key_ids = _example_ids(key_lengths, key_offsets, keys.shape[1])
        mask = (query_ids[:, :, None] == key_ids[:, None, :]) & (query_ids[:, :, None] > 0)
        if causal:
            mask = mask & jnp.tri(queries.shape[1], keys.shape[1], dtype=bool)
        outputs = jax.nn.dot_product_attention(
            queries, keys, values, mask=mask[:, None], implementation="xla"
        )
    reads = query_segments > 0
    return jnp.where(reads[:, :, None, None], outputs, jnp.zeros((), outputs.dtype))


def _in_examples(inputs: Array, segments: Array) -> Array:
    """[B, L, H, K] ``inputs``, zero where ``segments`` ([B, L]) is padding."""
    return jnp.where(segments[:, :, None, None] > 0, inputs, jnp.zeros((), inputs.dtype))


def _example_ids(lengths: Array, offsets: Array, width: int) -> Array:
    """[B, width] the example (1, 2, ...) each position of a layout falls in, 0 in none."""
    position = jnp.arange(width)[None, :, None]
    starts = offsets[:, None, :-1]
    inside = (position >= starts) & (position < starts + lengths[:, None, :])
    inside = inside & (lengths[:, None, :] > 0)
    return jnp.sum(inside * jnp.arange(1, lengths.shape[1] + 1), axis=2)
