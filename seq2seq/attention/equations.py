"""The equations of attention on plain arrays: scores four ways, weights, the context.

``seq2seq.attention.layers`` builds its layers on these functions and ``seq2seq.attention.cpu``
its CPU path; both import this module and it imports neither, so the dependency points one way:
``layers -> cpu -> equations``. Shapes use the package's letters (B batch,
T queries, S keys, H heads, K key width, E value width, A alignment width).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Array = jax.Array

# A large negative score for masked keys; finite, so a fully masked row gives no NaN.
_MASKED_SCORE = -1e9


def dot_product_scores(queries: Array, keys: Array, *, heads_first: bool = False) -> Array:
    """Luong et al. 2015 "dot" score, per head: ``e_ts = q_t . k_s``.

    Args:
      queries: [B, T, H, K].
      keys: [B, S, H, K], or [B, H, S, K] with ``heads_first`` (a decoding cache's layout).

    Returns:
      [B, H, T, S] scores.
    """
    return jnp.einsum(f"bthk,{_key_axes(heads_first)}k->bhts", queries, keys)


def _key_axes(heads_first: bool) -> str:
    """Einsum axes of keys or values before their last axis: [B, S, H] or [B, H, S].

    A decoder that adds one query per step reads its whole cache at every step. Stored head-major,
    the per-head products read the cache as it lies; stored [B, S, H, K], XLA on CPU transposes
    the whole cache first, at every step (figures: docs/benchmarks.md, "Beam search").
    """
    return "bhs" if heads_first else "bsh"


def scaled_dot_product_scores(queries: Array, keys: Array, *, heads_first: bool = False) -> Array:
    """Vaswani et al. 2017, Eq. 1 scores: ``QK^T / sqrt(d_k)``.

    Without the ``1/sqrt(d_k)`` factor the dot products grow with ``d_k`` and push the softmax
    into regions of tiny gradients (Section 3.2.1; Britz et al. 2017 measure the damage).

    Args:
      queries: [B, T, H, K].
      keys: [B, S, H, K], or [B, H, S, K] with ``heads_first``.

    Returns:
      [B, H, T, S] scores.
    """
    d_k = queries.shape[-1]
    return dot_product_scores(queries, keys, heads_first=heads_first) / math.sqrt(d_k)


def additive_scores(projected_queries: Array, projected_keys: Array, v: Array) -> Array:
    """Bahdanau et al. 2015, Eq. 6 / Appendix A.1.2: ``e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)``.

    The projections ``W_a s`` and ``U_a h`` are taken by the caller, so ``U_a h_j`` can be
    computed once per sentence rather than once per decoder step (Appendix A.1.2 notes this).

    Args:
      projected_queries: [B, T, A], ``W_a s_{i-1}`` for each decoder step.
      projected_keys: [B, S, A], ``U_a h_j`` for each source position.
      v: [A], the vector ``v_a``; or the product by it, [B, T, S, A] -> [B, T, S], as a
        recurrent loop hands it to its step (``seq2seq.models.recurrence``).

    Returns:
      [B, 1, T, S] scores (one "head", so the masks and softmax below serve all scorings).
    """
    hidden = jnp.tanh(projected_queries[:, :, None, :] + projected_keys[:, None, :, :])  # [B,T,S,A]
    scores = v(hidden) if callable(v) else times_v(hidden, v)
    return scores[:, None]


def times_v(hidden: Array, v: Array) -> Array:
    """[..., A] alignment hidden layer . ``v_a`` [A] -> [...] scores: in the hidden layer's
    dtype, accumulated in float32."""
    return jnp.einsum(
        "...a,a->...", hidden, v.astype(hidden.dtype), preferred_element_type=jnp.float32
    )


def masked_softmax(scores: Array, mask: Array | None) -> Array:
    """Attention weights: softmax over keys, exactly zero on masked keys.

    Bahdanau et al. 2015, Eq. 6: ``alpha_ij = exp(e_ij) / sum_k exp(e_ik)``. Computed in float32
    whatever the compute dtype. A query whose keys are all masked gets all-zero weights.

    Args:
      scores: [B, H, T, S].
      mask: bool, broadcastable to scores; True where attention is allowed. None for no mask.

    Returns:
      [B, H, T, S] float32 weights.
    """
    scores = scores.astype(jnp.float32)
    if mask is None:
        return jax.nn.softmax(scores, axis=-1)
    weights = jax.nn.softmax(jnp.where(mask, scores, _MASKED_SCORE), axis=-1)
    return jnp.where(mask, weights, 0.0)


def weighted_values(weights: Array, values: Array, *, heads_first: bool = False) -> Array:
    """The context: each query's weighted sum of the values, ``c_i = sum_j alpha_ij h_j``.

    Args:
      weights: [B, H, T, S].
      values: [B, S, H, E], or [B, H, S, E] with ``heads_first``.

    Returns:
      [B, T, H, E].
    """
    weights = weights.astype(values.dtype)
    if heads_first:
        # Head-major out, then one small transpose: asked for [B, T, H, E] directly, XLA on CPU
        # runs the product as [E, S] x [S, T] per (sentence, head), which is far slower for a
        # beam step's cross-attention (figures: docs/benchmarks.md, "fewer passes").
        return jnp.swapaxes(jnp.einsum("bhts,bhse->bhte", weights, values), 1, 2)
    return jnp.einsum("bhts,bshe->bthe", weights, values)
