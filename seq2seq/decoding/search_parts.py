"""Beam search's building blocks: next-token scores, output length limits, beam plumbing."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seq2seq.vocabulary import BOS_ID, PAD_ID

Array = jax.Array

# Ids a translation never contains: padding marks "after the end", BOS only starts the decoder.
NEVER_OUTPUT = (PAD_ID, BOS_ID)


def next_token_log_probs(logits: Array) -> Array:
    """``log p(y_t | y_<t, x)`` in float32, with the never-output ids at -inf.

    The ids are removed after the softmax, so the scores of allowed tokens stay the model's own
    log-probabilities (the search never renormalises them).

    Args:
      logits: [..., V] next-token logits.

    Returns:
      [..., V] log-probabilities.
    """
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return log_probs.at[..., NEVER_OUTPUT].set(-jnp.inf)


def output_limits(source: Array, max_extra_length: int) -> Array:
    """Most output tokens per sentence: its input length plus ``max_extra_length``.

    Vaswani et al. 2017 (Section 6.1) set "the maximum output length during inference to input
    length + 50". Lengths count tokens, EOS included.

    Args:
      source: [B, S] token ids, 0-padded.
      max_extra_length: tokens an output may have beyond its input's length.

    Returns:
      [B] int32 limits.
    """
    return jnp.sum(source != PAD_ID, axis=1, dtype=jnp.int32) + max_extra_length


def expand_to_beams(tree, beam_size: int):
    """Repeats every batch-leading array ``beam_size`` times: [B, ...] -> [B * N, ...]."""
    return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), tree)


def select_beams(tree, origin: Array):
    """Row ``n`` of sentence ``b`` becomes row ``origin[b, n]`` of the same sentence.

    Args:
      tree: arrays with a leading [B * N] axis (encoder outputs or a decoding cache).
      origin: [B, N] int beam indices.

    Returns:
      The same structure, rows reordered.
    """
    batch, beam_size = origin.shape
    rows = (jnp.arange(batch)[:, None] * beam_size + origin).reshape(-1)  # [B * N]
    # In bounds by construction; jnp.take's default ("fill") would add a select over every array.
    return jax.tree.map(lambda x: x.at[rows].get(mode="promise_in_bounds"), tree)
