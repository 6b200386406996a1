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


def best_next_tokens(logits: Array, k: int, group: int = 64) -> tuple[Array, Array]:
    """``top_k(next_token_log_probs(logits), k)``, the same values, reading the logits twice.

    A log-probability is the logit less the row's log-normaliser, so a row's k best tokens are
    its k largest allowed logits; only those k are normalised (as ``jax.nn.log_softmax`` does
    it: ``(x - max) - log(sum(exp(x - max)))``). A beam step's logits are large (1,280
    hypotheses x 8,000 tokens, 41 MB, more than the cache holds), so each pass over them
    counts: one takes the maximum of every group of ``group`` consecutive logits (``top_k``'s
    first pass; the row's maximum is the largest of them), one sums the exponentials. The
    never-output ids are masked only where they lie: in their groups' maxima and among the
    entries of the k groups chosen, never in a masked copy of the whole array.

    Args:
      logits: [..., V] next-token logits.
      k: tokens to keep per row.
      group: logits per group (as ``top_k``'s).

    Returns:
      (log-probabilities [..., k], token ids [..., k]), most probable first.
    """
    logits = logits.astype(jnp.float32)
    vocab = logits.shape[-1]
    if _too_small_for_groups(vocab, k, group):
        token = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
        largest = jnp.max(logits, axis=-1, keepdims=True)
        values, ids = jax.lax.top_k(jnp.where(_never_output(token), -jnp.inf, logits), k)
    else:
        groups = _groups(logits, group)  # [..., G, group]
        maxima = jnp.max(groups, axis=-1)  # [..., G], over every id
        largest = jnp.max(maxima, axis=-1, keepdims=True)  # the row's maximum, exactly
        for g in sorted({i // group for i in NEVER_OUTPUT}):  # their maxima over allowed ids
            token = g * group + jnp.arange(group)
            allowed = jnp.where(_never_output(token), -jnp.inf, groups[..., g, :])
            maxima = maxima.at[..., g].set(jnp.max(allowed, axis=-1))
        values, ids = _top_k_of_chosen_groups(groups, maxima, k, mask_never_output=True)
    log_normaliser = jnp.log(jnp.sum(jnp.exp(logits - largest), axis=-1, keepdims=True))
    return (values - largest) - log_normaliser, ids


def _never_output(token: Array) -> Array:
    """Whether each id of ``token`` is one a translation never contains."""
    return jnp.isin(token, jnp.asarray(NEVER_OUTPUT, token.dtype))


def top_k(x: Array, k: int, group: int = 64) -> tuple[Array, Array]:
    """``jax.lax.top_k`` over the last axis, the same values and indices, in two passes.

    On CPUs XLA's top-k sorts each row of a [rows, vocabulary] array in one call; a beam step
    spent a twentieth of its time there. The k largest of a row lie in the k groups of
    ``group`` consecutive entries with the largest maxima (an entry among the k largest has at
    most k - 1 larger ones, so at most k - 1 groups have a larger maximum than its own). So
    a max over groups, a top-k over the group maxima and one over the k chosen groups' entries
    find them; the chosen groups are taken in index order, so ties go to the lower index as
    in ``jax.lax.top_k``.

    Args:
      x: [..., V] values, V at least 16 groups (shorter rows go to ``jax.lax.top_k``).
      k: how many to keep, at most ``V // group`` (more go to ``jax.lax.top_k``).
      group: entries per group; the last group is filled with -inf.

    Returns:
      (values [..., k], indices [..., k]), largest first.
    """
    if _too_small_for_groups(x.shape[-1], k, group):
        return jax.lax.top_k(x, k)
    groups = _groups(x, group)
    return _top_k_of_chosen_groups(groups, jnp.max(groups, axis=-1), k)


def _too_small_for_groups(vocab: int, k: int, group: int) -> bool:
    return vocab < 16 * group or k > vocab // group


def _groups(x: Array, group: int) -> Array:
    """[..., V] -> [..., G, group]: consecutive entries, the last group filled with -inf
    (after every real entry, so that ties still go to a real one)."""
    vocab = x.shape[-1]
    filled = -(-vocab // group) * group
    if filled > vocab:
        pad = [(0, 0)] * (x.ndim - 1) + [(0, filled - vocab)]
        x = jnp.pad(x, pad, constant_values=-jnp.inf)
    return x.reshape(*x.shape[:-1], filled // group, group)


def _top_k_of_chosen_groups(
    groups: Array, maxima: Array, k: int, mask_never_output: bool = False
) -> tuple[Array, Array]:
    """The k largest entries of the k groups with the largest ``maxima`` (``top_k``'s second
    pass); with ``mask_never_output`` the never-output ids among them count as -inf."""
    group = groups.shape[-1]
    _, chosen = jax.lax.top_k(maxima, k)  # [..., k] groups
    chosen = jnp.sort(chosen, axis=-1)
    entries = jnp.take_along_axis(groups, chosen[..., None], axis=-2)  # [..., k, group]
    if mask_never_output:
        token = chosen[..., None] * group + jnp.arange(group)  # [..., k, group]
        entries = jnp.where(_never_output(token), -jnp.inf, entries)
    shape = entries.shape[:-2]
    values, where = jax.lax.top_k(entries.reshape(*shape, k * group), k)
    indices = jnp.take_along_axis(chosen, where // group, axis=-1) * group + where % group
    return values, indices


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


def take_rows(tree, rows: Array):
    """Every array of ``tree`` with its leading axis indexed by ``rows`` (in bounds)."""
    # jnp.take's default ("fill") would add a select over every array.
    return jax.tree.map(lambda x: x.at[rows].get(mode="promise_in_bounds"), tree)


def cache_reorder(model):
    """How a beam search moves ``model``'s cache rows: ``reorder(cache, rows)``.

    The model's own ``reorder_cache`` where it has one (a Transformer moves only the positions
    written so far), else ``take_rows`` (every array, every position).
    """
    return getattr(model, "reorder_cache", take_rows)


def select_beams(tree, origin: Array, reorder=take_rows):
    """Row ``n`` of sentence ``b`` becomes row ``origin[b, n]`` of the same sentence.

    Args:
      tree: arrays with a leading [B * N] axis (encoder outputs or a decoding cache).
      origin: [B, N] int beam indices.
      reorder: ``reorder(tree, rows)`` with rows [B * N]; a model's ``reorder_cache`` moves
        only what its cache holds so far.

    Returns:
      The same structure, rows reordered.
    """
    batch, beam_size = origin.shape
    rows = (jnp.arange(batch)[:, None] * beam_size + origin).reshape(-1)  # [B * N]
    return reorder(tree, rows)
