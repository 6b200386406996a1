"""Beam search with a length penalty, for any ``Seq2SeqModel``, as one ``jax.lax.while_loop``.

Each step extends every live hypothesis of a sentence by every token and keeps the ``N`` most
probable extensions: an approximate search for the most probable translation, as Bahdanau et
al. 2015 (Section 3.2) use at test time. An extension that ends (EOS, or the sentence's length
limit) leaves the beam and competes for the answer with the score

    s(Y, X) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^alpha      (Wu et al. 2016)

which Vaswani et al. 2017 (Section 6.1) use with beam size 4 and alpha 0.6. A sentence stops
early when none of its live hypotheses can beat its best finished one any more.

Because finished hypotheses leave the beam rather than being replaced, and each hypothesis
ranks its own next tokens by their log-probabilities before prefixes are compared, a beam of one
is exactly greedy search: the one decoder serves validation (beam 1) and evaluation alike.
(tensor2tensor, which produced Vaswani et al.'s numbers, refills the beam from
the 2N best extensions so that N hypotheses stay live; its beam of one is not greedy search.)
With a beam wide enough to keep every extension, the search is exact: it returns the
highest-scoring output under the rule above (``tests/test_decoding.py`` checks both).

The model is used only through its contract: ``encode``, ``start_decoding`` and ``decode``. What
the encoder gives stays one row per sentence, read by all its hypotheses; the cache, a row per
hypothesis, is repeated for the beams and reordered after each step, by one ``tree.map`` (a
recurrent state: RNNsearch) or by the model's ``reorder_cache`` (a Transformer moves only the
key/value positions written so far). On a CPU, sentences that have
finished leave the loop: when half of a batch's rows are done, the rest go on in a batch half
the size (``shrinking_sizes``), so a batch's longest output no longer keeps its short ones busy.
On an accelerator the whole batch stays in one loop, compiled once (``stage_sizes``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from seq2seq.decoding.search_parts import (
    best_next_tokens,
    cache_reorder,
    expand_to_beams,
    select_beams,
)
from seq2seq.models.base import Encoded, Seq2SeqModel
from seq2seq.vocabulary import BOS_ID, EOS_ID, PAD_ID

Array = jax.Array

# ``min_rows`` 0 on a CPU: the batch shrinks down to this many rows.
CPU_MIN_ROWS = 8


def length_penalty(length: Array, alpha: float) -> Array:
    """Wu et al. 2016, Section 7: ``lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha``.

    Args:
      length: |Y|, output tokens including EOS (any shape, int or float).
      alpha: strength; 0 gives lp = 1 (raw log-probabilities), larger favours longer outputs.

    Returns:
      lp(Y), float32, the shape of ``length``.
    """
    return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


class BeamState(NamedTuple):
    """The while-loop carry."""

    step: Array  # [] int32, tokens decoded so far
    live_tokens: Array  # [B, N, T] live hypotheses, PAD after their newest token
    live_log_probs: Array  # [B, N] log P(prefix | x); -inf marks an empty slot
    best_tokens: Array  # [B, K, T] the K best finished hypotheses, EOS then PAD (or cut)
    best_scores: Array  # [B, K] their scores log P / lp, best first; -inf marks an empty slot
    cache: Any  # the model's cache, rows [B * N, ...]; None when decoding without a cache


def beam_search(
    model: Seq2SeqModel,
    source: Array,
    max_length: int,
    *,
    beam_size: int,
    alpha: float,
    limits: Array | None = None,
    use_cache: bool = True,
    nbest: int | None = None,
    min_rows: int = 0,
) -> tuple[Array, Array]:
    """Decodes a batch of sentences together; trace it inside ``jax.jit``.

    Args:
      model: any ``Seq2SeqModel``.
      source: [B, S] token ids, 0-padded (a tuple of them for an ``Ensemble`` whose models
        tokenize the source differently).
      max_length: most output tokens, EOS included (the size of the output buffer).
      beam_size: N, hypotheses kept per sentence; 1 is greedy search.
      alpha: length-penalty exponent (``length_penalty``), >= 0.
      limits: [B] most output tokens per sentence (at most ``max_length``); default
        ``max_length`` for every sentence. An output that reaches its limit ends there; a
        sentence whose limit is 0 gets no output (score -inf).
      use_cache: False re-decodes the whole prefix at each step instead of using the cache
        (slow; it exists to test that the cache changes nothing).
      nbest: K, to return the K best finished outputs of each sentence (at most ``beam_size``)
        instead of the best one. The search is the same whatever K: the first of the K is the
        output without ``nbest``; a sentence only stops early once none of its live hypotheses
        can enter its K best.
      min_rows: the smallest batch that finished sentences leave for (``shrinking_sizes``);
        at least ``batch`` keeps every sentence in the one loop; 0 chooses by platform
        (``stage_sizes``).

    Returns:
      (tokens [B, max_length]: the best output per sentence, EOS then padding;
       scores [B]: its ``log P(Y | X) / lp(Y)``), or with ``nbest``
      (tokens [B, K, max_length], scores [B, K]) best first; a sentence with fewer than K
      finished outputs has -inf scores in its last slots.
    """
    kept = _check_search(beam_size, alpha, min_rows, nbest)
    batch = jax.tree.leaves(source)[0].shape[0]  # an ensemble may read a source per model
    if limits is None:
        limits = jnp.full((batch,), max_length, jnp.int32)
    limits = jnp.minimum(limits, max_length)  # [B]
    encoded = model.encode(source)
    if use_cache:
        encoded, cache = model.start_decoding(encoded, max_length)  # rows [B, ...] both
        cache = expand_to_beams(cache, beam_size)  # rows [B * N, ...]
    else:  # the teacher-forced pass reads a copy of the sentence per hypothesis
        encoded, cache = expand_to_beams(encoded, beam_size), None
    state = _first_state(limits, beam_size, kept, max_length, cache)
    reorder = cache_reorder(model)

    def step_once(state: BeamState, encoded: Encoded, limits: Array) -> BeamState:
        logits, cache = _next_logits(model, encoded, state)  # [B, N, V]
        return _advance(state, logits, cache, limits, alpha, reorder)

    sizes = stage_sizes(batch, min_rows, jax.default_backend())
    best_tokens, best_scores = _search_in_stages(state, encoded, limits, sizes, step_once)
    if nbest is None:
        return best_tokens[:, 0], best_scores[:, 0]
    return best_tokens, best_scores


def _check_search(beam_size: int, alpha: float, min_rows: int, nbest: int | None) -> int:
    """Raises ValueError for a setting no search can run with; returns K, outputs kept."""
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be at least 1")
    if isinstance(alpha, int | float) and alpha < 0:
        raise ValueError(f"alpha={alpha} must be >= 0 (a negative length penalty favours stopping)")
    if min_rows < 0:
        raise ValueError(f"min_rows={min_rows} must be >= 0 (0: by platform)")
    kept = 1 if nbest is None else nbest
    if not 1 <= kept <= beam_size:
        raise ValueError(f"nbest={nbest} must be between 1 and the beam size {beam_size}")
    return kept


def _first_state(limits: Array, beam_size: int, kept: int, max_length: int, cache) -> BeamState:
    """Every sentence starts from one empty hypothesis; one with no room (a batch's padding
    rows, limit 0) starts finished, with no output."""
    batch = limits.shape[0]
    first_slot = (jnp.arange(beam_size) == 0)[None, :] & (limits >= 1)[:, None]  # [B, N]
    return BeamState(
        step=jnp.zeros((), jnp.int32),
        live_tokens=jnp.full((batch, beam_size, max_length), PAD_ID, jnp.int32),
        live_log_probs=jnp.where(first_slot, 0.0, -jnp.inf),
        best_tokens=jnp.full((batch, kept, max_length), PAD_ID, jnp.int32),
        best_scores=jnp.full((batch, kept), -jnp.inf, jnp.float32),
        cache=cache,
    )


def _search_in_stages(
    state: BeamState, encoded: Encoded, limits: Array, sizes: list[int], step_once
) -> tuple[Array, Array]:
    """Runs the search to its end; returns every sentence's (best_tokens, best_scores).

    Finished sentences leave the loop: whenever no more than half of the rows still search,
    those rows move to a batch half the size and the search goes on there, so the last long
    sentences do not carry the whole batch's finished ones with them (a stage per size in
    ``sizes``, each compiled once).
    """
    batch, beam_size, max_length = state.live_tokens.shape
    rows = jnp.arange(batch)  # [B'] the sentence each row of the state holds
    best_tokens, best_scores = state.best_tokens, state.best_scores  # [B, ...], every sentence
    for stage, size in enumerate(sizes):
        if stage > 0:
            keep = _rows_still_searching(state, size)  # [size]
            state, encoded, limits = _take_sentences((state, encoded, limits), keep, beam_size)
            rows = rows[keep]
        next_size = sizes[stage + 1] if stage + 1 < len(sizes) else 0
        state = jax.lax.while_loop(
            lambda state, next_size=next_size: _searching(state, max_length, next_size),
            lambda state, encoded=encoded, limits=limits: step_once(state, encoded, limits),
            state,
        )
        best_tokens = best_tokens.at[rows].set(state.best_tokens)
        best_scores = best_scores.at[rows].set(state.best_scores)
    return best_tokens, best_scores


def stage_sizes(batch: int, min_rows: int, backend: str) -> list[int]:
    """The batch sizes the search runs at on a JAX backend, a compiled while-loop each.

    ``min_rows`` 0 chooses by platform. A CPU's step time grows with the rows it searches, so
    the batch shrinks as sentences finish, down to ``CPU_MIN_ROWS``. An accelerator runs a step
    of a few rows in about the time of a full one, and each stage would be one more program to
    compile, so the whole batch stays in one loop. Any other ``min_rows`` is kept everywhere.
    """
    if min_rows == 0:
        min_rows = CPU_MIN_ROWS if backend == "cpu" else batch
    return shrinking_sizes(batch, min_rows)


def shrinking_sizes(batch: int, min_rows: int) -> list[int]:
    """The batch sizes the search runs at: ``batch``, then halved while at least ``min_rows``."""
    sizes = [batch]
    while sizes[-1] // 2 >= max(min_rows, 1):
        sizes.append(sizes[-1] // 2)
    return sizes


def _still_searching(state: BeamState) -> Array:
    """[B] whether a sentence has a live hypothesis."""
    return jnp.any(state.live_log_probs > -jnp.inf, axis=1)


def _searching(state: BeamState, max_length: int, leave_at: int) -> Array:
    """Go on while output room is left and more than ``leave_at`` sentences search."""
    return (state.step < max_length) & (jnp.sum(_still_searching(state)) > leave_at)


def _rows_still_searching(state: BeamState, size: int) -> Array:
    """[size] rows: the sentences still searching (at most ``size``), then finished ones."""
    return jnp.argsort(~_still_searching(state), stable=True)[:size]


def _take_sentences(tree, rows: Array, beam_size: int):
    """Sentences ``rows`` of everything the loop reads: [B, ...] leaves by sentence, the
    cache's [B * N, ...] leaves by hypothesis."""
    state, encoded, limits = tree
    hypotheses = (rows[:, None] * beam_size + jnp.arange(beam_size)).reshape(-1)  # [size * N]
    by_hypothesis = state.cache is None  # without a cache, the encoder's rows are hypotheses
    encoded = jax.tree.map(lambda x: x[hypotheses if by_hypothesis else rows], encoded)
    cache = jax.tree.map(lambda x: x[hypotheses], state.cache)
    state = state._replace(
        live_tokens=state.live_tokens[rows],
        live_log_probs=state.live_log_probs[rows],
        best_tokens=state.best_tokens[rows],
        best_scores=state.best_scores[rows],
        cache=cache,
    )
    return state, encoded, limits[rows]


def _next_logits(model: Seq2SeqModel, encoded: Encoded, state: BeamState):
    """The next-token logits of every live hypothesis: ([B, N, V], the advanced cache)."""
    batch, beam_size, max_length = state.live_tokens.shape
    tokens = state.live_tokens.reshape(batch * beam_size, max_length)  # [B * N, T]
    if state.cache is not None:
        newest = jnp.take(tokens, jnp.maximum(state.step - 1, 0), axis=1)  # [B * N]
        previous = jnp.where(state.step == 0, BOS_ID, newest)
        logits, _, cache = model.decode(encoded, previous[:, None], cache=state.cache)
        logits = logits[:, 0]  # [B * N, V]
    else:  # the whole prefix again: decoder input t is y_{t-1}, and input 0 is BOS
        inputs = jnp.concatenate(
            [jnp.full((batch * beam_size, 1), BOS_ID, jnp.int32), tokens[:, :-1]], axis=1
        )  # [B * N, T]
        all_logits, _, cache = model.decode(encoded, inputs)  # [B * N, T, V]
        logits = jnp.take(all_logits, state.step, axis=1)  # [B * N, V]
    return logits.reshape(batch, beam_size, -1), cache


def _advance(
    state: BeamState, logits: Array, cache: Any, limits: Array, alpha: float, reorder
) -> BeamState:
    """Keeps the N most probable extensions; those that end compete for the best output."""
    batch, beam_size, vocab_size = logits.shape
    step = state.step
    # Each hypothesis's K best next tokens, ranked by log p(y_t) itself: adding the prefix's
    # log P first could round near-ties together, and a beam of one must take the argmax.
    per_hypothesis = min(beam_size, vocab_size)  # K: no more survive from one hypothesis
    token_log_probs, token_ids = best_next_tokens(logits, per_hypothesis)  # [B, N, K] twice
    candidates = state.live_log_probs[:, :, None] + token_log_probs  # [B, N, K]
    top_log_probs, top_index = jax.lax.top_k(
        candidates.reshape(batch, beam_size * per_hypothesis), beam_size
    )  # [B, N], [B, N]
    origin = top_index // per_hypothesis  # [B, N] the hypothesis each extension extends
    token = jnp.take_along_axis(
        token_ids.reshape(batch, beam_size * per_hypothesis), top_index, axis=1
    ).astype(jnp.int32)  # [B, N]
    if beam_size == 1:  # the one hypothesis extends itself: nothing to reorder
        tokens = state.live_tokens
    else:
        tokens = jnp.take_along_axis(state.live_tokens, origin[:, :, None], axis=1)  # [B, N, T]
        cache = None if cache is None else select_beams(cache, origin, reorder)
    tokens = tokens.at[:, :, step].set(token)

    ends = (token == EOS_ID) | (step + 1 >= limits)[:, None]  # [B, N]
    scores = jnp.where(ends, top_log_probs / length_penalty(step + 1, alpha), -jnp.inf)  # [B, N]
    best_tokens, best_scores = _keep_best(state.best_tokens, state.best_scores, tokens, scores)

    live_log_probs = jnp.where(ends, -jnp.inf, top_log_probs)  # [B, N]
    # Early termination: log P only falls as a hypothesis grows and lp only rises up to the
    # sentence's limit (alpha >= 0), so log P / lp(limit) bounds every score a live hypothesis
    # can still reach. A sentence none of whose hypotheses can beat the last of its K best
    # finished ones stops.
    bound = jnp.max(live_log_probs, axis=1) / length_penalty(limits, alpha)  # [B]
    live_log_probs = jnp.where((bound > best_scores[:, -1])[:, None], live_log_probs, -jnp.inf)
    return BeamState(
        step=step + 1,
        live_tokens=tokens,
        live_log_probs=live_log_probs,
        best_tokens=best_tokens,
        best_scores=best_scores,
        cache=cache,
    )


def _keep_best(
    best_tokens: Array, best_scores: Array, tokens: Array, scores: Array
) -> tuple[Array, Array]:
    """The K best of the kept outputs and this step's finished ones, best first.

    Args:
      best_tokens: [B, K, T] and best_scores [B, K]: the K best so far, best first.
      tokens: [B, N, T] and scores [B, N]: this step's hypotheses, -inf where not finished.

    Returns:
      ([B, K, T], [B, K]). On a tie the earlier-kept output stays ahead (``top_k`` keeps the
      lower index), so with K = 1 the best changes only when strictly beaten.
    """
    kept = best_scores.shape[1]
    if kept == 1:  # the one best: a select, no gather over the beam's tokens
        winner = jnp.argmax(scores, axis=1)  # [B]
        winner_score = jnp.take_along_axis(scores, winner[:, None], axis=1)  # [B, 1]
        improved = winner_score > best_scores  # [B, 1]
        winner_tokens = jnp.take_along_axis(tokens, winner[:, None, None], axis=1)  # [B, 1, T]
        return (
            jnp.where(improved[:, :, None], winner_tokens, best_tokens),
            jnp.where(improved, winner_score, best_scores),
        )
    all_scores = jnp.concatenate([best_scores, scores], axis=1)  # [B, K + N]
    top_scores, index = jax.lax.top_k(all_scores, kept)  # [B, K] twice
    all_tokens = jnp.concatenate([best_tokens, tokens], axis=1)  # [B, K + N, T]
    return jnp.take_along_axis(all_tokens, index[:, :, None], axis=1), top_scores
