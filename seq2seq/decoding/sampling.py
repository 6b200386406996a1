"""Sampling translations, for back-translation: top-k or nucleus (top-p), with a temperature.

Beam search returns the most probable output; back-translation gains from varied outputs drawn
from the model (Edunov et al. 2018, "Understanding Back-Translation at Scale", Section 3: sampling
and restricted sampling beat beam outputs as synthetic sources). At each step the next token is
drawn from ``p(y_t | y_<t, x)^(1/T)``, renormalised over

* top-k (Fan et al. 2018): the k most probable tokens only;
* top-p, nucleus sampling (Holtzman et al. 2020, Section 3.1): the smallest set of most probable
  tokens whose probability reaches p.

Each sentence draws from a key of its own (given by the caller, e.g. from its line number), folded
with the step, so a sentence's sample depends on the seed and the sentence only, never on the
batch it was decoded in. The model is read through the same cached ``decode`` as beam search.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from seq2seq.decoding.sampling_method import SamplingMethod
from seq2seq.decoding.search_parts import next_token_log_probs
from seq2seq.models.base import Seq2SeqModel
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID

Array = jax.Array


def restricted_log_probs(log_probs: Array, method: SamplingMethod, temperature: float):
    """The tokens a step may draw from, and their tempered log-probabilities.

    Args:
      log_probs: [B, V] the model's ``log p(y_t | y_<t, x)``.
      method: top-k or top-p.
      temperature: T > 0; ``log p / T`` (T < 1 sharpens, T > 1 flattens).

    Returns:
      (candidates [B, C] token ids, most probable first; logits [B, C], -inf where a candidate
      is outside the allowed set). C is k for top-k and V for top-p.
    """
    tempered = log_probs / temperature
    if method.kind == "topk":
        logits, candidates = jax.lax.top_k(tempered, min(int(method.value), log_probs.shape[-1]))
        return candidates, logits
    logits, candidates = jax.lax.top_k(tempered, log_probs.shape[-1])  # all, sorted
    probs = jax.nn.softmax(logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs  # [B, V] of the more probable tokens
    # The nucleus: the most probable token always, then each token while the mass before it is
    # short of p.
    inside = (mass_before < method.value) | (jnp.arange(probs.shape[-1]) == 0)
    return candidates, jnp.where(inside, logits, -jnp.inf)


class SampleState(NamedTuple):
    """The while-loop carry."""

    step: Array  # [] int32
    tokens: Array  # [B, T] drawn so far, PAD after the newest
    log_probs: Array  # [B] log P(prefix | x) under the model (untempered)
    live: Array  # [B] bool, not yet ended
    cache: Any


def sample(
    model: Seq2SeqModel,
    source: Array,
    max_length: int,
    *,
    keys: Array,
    method: SamplingMethod,
    temperature: float = 1.0,
    limits: Array | None = None,
) -> tuple[Array, Array]:
    """One sampled output per sentence; trace it inside ``jax.jit``.

    Args:
      model: any ``Seq2SeqModel``.
      source: [B, S] token ids, 0-padded.
      max_length: most output tokens, EOS included.
      keys: [B] a PRNG key per sentence (``jax.random.key``); step t draws with
        ``fold_in(key, t)``.
      method: top-k or top-p.
      temperature: T > 0.
      limits: [B] most output tokens per sentence (default ``max_length``).

    Returns:
      (tokens [B, max_length], EOS then padding; log P(Y | x) [B] under the untempered model).
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    batch = jax.tree.leaves(source)[0].shape[0]  # an ensemble may read a source per model
    limits = jnp.minimum(
        jnp.full((batch,), max_length, jnp.int32) if limits is None else limits, max_length
    )
    encoded, cache = model.start_decoding(model.encode(source), max_length)
    state = SampleState(
        step=jnp.zeros((), jnp.int32),
        tokens=jnp.full((batch, max_length), PAD_ID, jnp.int32),
        log_probs=jnp.zeros((batch,), jnp.float32),
        live=jnp.ones((batch,), bool),
        cache=cache,
    )

    def step_once(state: SampleState) -> SampleState:
        newest = jnp.take(state.tokens, jnp.maximum(state.step - 1, 0), axis=1)  # [B]
        previous = jnp.where(state.step == 0, BOS_ID, newest)
        logits, _, cache = model.decode(encoded, previous[:, None], cache=state.cache)
        log_probs = next_token_log_probs(logits[:, 0])  # [B, V]
        candidates, restricted = restricted_log_probs(log_probs, method, temperature)
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, state.step)
        choice = jax.vmap(jax.random.categorical)(step_keys, restricted)  # [B]
        token = jnp.take_along_axis(candidates, choice[:, None], axis=1)[:, 0].astype(jnp.int32)
        token = jnp.where(state.live, token, PAD_ID)
        picked = jnp.take_along_axis(log_probs, token[:, None], axis=1)[:, 0]
        return SampleState(
            step=state.step + 1,
            tokens=state.tokens.at[:, state.step].set(token),
            log_probs=state.log_probs + jnp.where(state.live, picked, 0.0),
            live=state.live & (token != EOS_ID) & (state.step + 1 < limits),
            cache=cache,
        )

    def sampling(state: SampleState) -> Array:
        return (state.step < max_length) & jnp.any(state.live)

    state = jax.lax.while_loop(sampling, step_once, state)
    return state.tokens, state.log_probs
