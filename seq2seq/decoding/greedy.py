"""Greedy search: at each step take the single most probable next token."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seq2seq.decoding.common import next_token_log_probs
from seq2seq.models.base import Seq2SeqModel
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID


def greedy_search(
    model: Seq2SeqModel, source: jax.Array, max_length: int, *, limits: jax.Array | None = None
) -> jax.Array:
    """Decodes a batch with the model's cache, one ``jax.lax.while_loop``, no host round-trips.

    Args:
      model: any ``Seq2SeqModel``.
      source: [B, S] token ids, 0-padded.
      max_length: most output tokens, EOS included (the size of the output buffer).
      limits: [B] most output tokens per sentence (at most ``max_length``); default
        ``max_length`` for every sentence.

    Returns:
      [B, max_length] token ids: each row ends with EOS, then padding (unless it ran out).
    """
    batch = source.shape[0]
    if limits is None:
        limits = jnp.full((batch,), max_length, jnp.int32)
    encoded = model.encode(source)
    cache = model.init_cache(encoded, max_length)
    outputs = jnp.full((batch, max_length), PAD_ID, jnp.int32)  # [B, T]
    previous = jnp.full((batch,), BOS_ID, jnp.int32)  # [B]
    finished = jnp.zeros((batch,), bool)  # [B]

    def not_done(carry):
        step, _, _, finished, _ = carry
        return (step < max_length) & ~jnp.all(finished)

    def step_once(carry):
        step, previous, cache, finished, outputs = carry
        logits, _, cache = model.decode(encoded, previous[:, None], cache=cache)  # [B, 1, V]
        token = jnp.argmax(next_token_log_probs(logits[:, 0]), axis=-1).astype(jnp.int32)
        token = jnp.where(finished, PAD_ID, token)
        outputs = outputs.at[:, step].set(token)
        finished = finished | (token == EOS_ID) | (step + 1 >= limits)
        return step + 1, token, cache, finished, outputs

    carry = (jnp.zeros((), jnp.int32), previous, cache, finished, outputs)
    *_, outputs = jax.lax.while_loop(not_done, step_once, carry)
    return outputs
