"""Attention: queries, keys and values, scored four ways.

Every attention layer in this package answers one question: for each *query* position, how much
should it read from each *key* position, and what does it read (the *values*)? The two papers
differ only in how they score a query against a key:

* additive (Bahdanau et al. 2015, Eq. 6 and Appendix A.1.2): ``e = v^T tanh(W q + U k)``, a small
  feed-forward network per (query, key) pair;
* dot-product (Luong et al. 2015, "dot"): ``e = q . k``;
* general (Luong et al. 2015, "general"): ``e = q^T W k``;
* scaled dot-product (Vaswani et al. 2017, Eq. 1): ``e = q . k / sqrt(d_k)``.

The scores become weights with a masked softmax (``alpha`` in Bahdanau et al.) and the output is
the weighted sum of the values (the context vector ``c_i``). Self-attention and cross-attention
are *the same module* called with different inputs: self-attention takes queries, keys and values
from one sequence; cross-attention takes queries from the decoder and keys and values from the
encoder.

Masks are boolean, ``True`` where a query may attend to a key, broadcastable to [B, H, T, S].
A ``Mask`` (built by ``sequence_mask``) carries one in two forms: that dense array, and, where
the mask is only each row's length and causality, the lengths a fused GPU kernel reads instead.

In beam search several hypotheses of one sentence read the same encoder keys and values: a
decoder step then has ``B * N`` query rows (N per sentence, consecutive) against ``B`` key rows,
and ``group_rows`` lays those queries out as N positions of one sentence, so the keys are neither
copied per hypothesis nor reordered as the beams change.

The equations themselves are functions on arrays in ``seq2seq.attention.equations`` (named here
too, ``attention.masked_softmax``); this module holds the masks, the choice of how Eq. 1 is
computed (``choose_implementation``: the explicit equations, the CPU path of
``seq2seq.attention.cpu``, cuDNN's kernel by ``seq2seq.attention.cudnn``, or XLA's), and the layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.attention.cpu import grouped_attention
from seq2seq.attention.cudnn import (
    attention_by_lengths,
    attention_by_segments,
    cudnn_takes,
    packed_rows_supported,
)
from seq2seq.attention.equations import (
    additive_scores,
    masked_softmax,
    scaled_dot_product_scores,
    times_v,
    weighted_values,
)
from seq2seq.attention.equations import dot_product_scores as dot_product_scores  # re-exported
from seq2seq.dropout import dropout
from seq2seq.linear import Linear, project
from seq2seq.logical_axes import constrain, gathered, param

Array = jax.Array
Scoring = Literal["additive", "dot", "general"]  # AlignmentAttention's (Luong et al.'s three)
Implementation = Literal["explicit", "cpu", "cudnn", "xla"]

# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------


def padding_mask(query_valid: Array, key_valid: Array) -> Array:
    """Lets real query positions attend to real key positions only.

    Args:
      query_valid: [B, T] bool, True at real (non-padding) query positions.
      key_valid: [B, S] bool, True at real key positions.

    Returns:
      [B, 1, T, S] bool mask.
    """
    return query_valid[:, None, :, None] & key_valid[:, None, None, :]


def causal_mask(length: int) -> Array:
    """Position i may attend to positions <= i (Vaswani et al. 2017, Section 3.2.3).

    Returns:
      [1, 1, T, T] bool mask.
    """
    return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def segment_mask(query_segments: Array, key_segments: Array) -> Array:
    """Keeps attention inside one packed example: equal, non-zero segment ids only.

    Args:
      query_segments: [B, T] int, segment id of each query position (0 is padding).
      key_segments: [B, S] int, segment id of each key position (0 is padding).

    Returns:
      [B, 1, T, S] bool mask.
    """
    same = query_segments[:, None, :, None] == key_segments[:, None, None, :]
    return same & (key_segments[:, None, None, :] > 0)


def combine_masks(*masks: Array | None) -> Array | None:
    """Logical AND of the masks that are not None (None when all are)."""
    present = [mask for mask in masks if mask is not None]
    if not present:
        return None
    combined = present[0]
    for mask in present[1:]:
        combined = combined & mask
    return combined


@dataclasses.dataclass(frozen=True)
class Mask:
    """One attention mask in the forms the implementations of Eq. 1 read (``sequence_mask``).

    ``dense`` is read by the explicit equations, the CPU path and XLA. Where the mask is only
    each row's real length (one example, then padding) and, in a decoder, causality, the lengths
    and ``causal`` say the same without a [B, T, S] array: the form cuDNN's kernel reads. Packed
    rows keep their segment ids instead, which cuDNN's packed layout reads.
    """

    dense: Array  # [B, 1, T, S] bool, True where a query may read a key
    query_lengths: Array | None  # [B] int32 real queries per row; None when rows are packed
    key_lengths: Array | None  # [B] int32 real keys per row; None when rows are packed
    causal: bool  # query t reads keys s <= t only (in the lengths form; ``dense`` has it too)
    query_segments: Array | None = None  # [B, T] int32, when rows are packed
    key_segments: Array | None = None  # [B, S] int32, when rows are packed


def sequence_mask(
    query_segments: Array, key_segments: Array, *, causal: bool = False, packed: bool = True
) -> Mask:
    """``segment_mask`` (and ``causal_mask`` if ``causal``), as a ``Mask``.

    Args:
      query_segments: [B, T] int, segment id of each query position (0 is padding).
      key_segments: [B, S] int, segment id of each key position (0 is padding).
      causal: a decoder's self-attention (T = S).
      packed: query rows may hold several examples. If False each query row is one example
        (segment 1) then padding, and it reads segment 1 of its key row, which packing puts
        first: the mask is then a query and a key length per row, and ``Mask`` carries them.

    Returns:
      The mask, ``dense`` [B, 1, T, S].
    """
    if query_segments.ndim != 2 or key_segments.shape[:1] != query_segments.shape[:1]:
        raise ValueError(
            f"segments must be [B, T] and [B, S] for one batch B, got {query_segments.shape} "
            f"and {key_segments.shape}"
        )
    length = query_segments.shape[1]
    if causal and key_segments.shape[1] != length:
        raise ValueError(f"a causal mask needs as many keys as queries, got {key_segments.shape}")
    dense = segment_mask(query_segments, key_segments)
    if causal:
        dense = dense & causal_mask(length)
    if packed:
        return Mask(dense, None, None, causal, query_segments, key_segments)
    key_lengths = jnp.sum(key_segments == 1, axis=1, dtype=jnp.int32)
    query_lengths = jnp.sum(query_segments == 1, axis=1, dtype=jnp.int32)
    # A query with no key to read reads nothing (a zero output), as the dense mask gives it.
    query_lengths = jnp.where(key_lengths > 0, query_lengths, 0)
    return Mask(dense, query_lengths, key_lengths, causal)


def group_rows(queries: Array, sentences: int) -> Array:
    """[B * N, ...] query rows -> [B, N, ...]: the N hypotheses of each of ``sentences`` = B."""
    if queries.shape[0] % sentences:
        raise ValueError(f"{queries.shape[0]} query rows do not divide among {sentences} sentences")
    return queries.reshape(sentences, queries.shape[0] // sentences, *queries.shape[1:])


# ---------------------------------------------------------------------------------------------
# Eq. 1, and the choice of how to compute it
# ---------------------------------------------------------------------------------------------


def attention_platform() -> str:
    """The platform programs traced now run on: ``jax.default_backend()``'s name, with a GPU
    named "cuda" or "rocm" (cuDNN is CUDA's).

    Asked at trace time, of the default backend only: a process without a CPU backend
    (``JAX_PLATFORMS=cuda``) never asks for one. A program exported for another platform
    keeps the choice made for this one.
    """
    platform = jax.default_backend()
    if platform == "gpu":
        version = jax.devices()[0].client.platform_version.lower()
        return "cuda" if "cuda" in version else "rocm"
    return platform


def choose_implementation(
    queries: Array,
    keys: Array,
    values: Array,
    mask: Array | Mask | None,
    *,
    platform: str,
    fused: bool = True,
    weights_or_dropout: bool = False,
    heads_first: bool = False,
) -> Implementation:
    """The one place that decides how Eq. 1 is computed; all four compute the same at every
    query that reads a key (a padding query that reads none gets zeros from the first three,
    the mean of the values from "xla"; nothing reads it).

    * "explicit" (scores, masked softmax, weighted values; the reference): the only one that
      returns the weights or drops some out, the one a decoding cache's head-major keys are
      read by, and the one for d_v != d_k (``jax.nn.dot_product_attention`` needs them equal);
      also wherever ``fused`` is False.
    * "cpu": on a CPU, ``seq2seq.attention.cpu`` (a written-out backward, sentences grouped
      over the cores).
    * "cudnn": on an NVIDIA GPU, cuDNN's flash attention (``seq2seq.attention.cudnn``), for
      inputs it takes (bfloat16 or float16, ``cudnn_takes``) and a mask it can read as lengths
      (a ``Mask`` of unpacked rows, or none), or as examples' lengths and offsets (a ``Mask``
      of packed rows, where ``packed_rows_supported``).
    * "xla": ``jax.nn.dot_product_attention`` with the dense mask: other GPUs, float32, packed
      rows elsewhere, TPUs.

    Args:
      queries, keys, values: as ``scaled_dot_product_attention`` takes them.
      mask: as ``scaled_dot_product_attention`` takes it.
      platform: from ``attention_platform``.
      fused: allow the fused implementations.
      weights_or_dropout: the weights are returned or dropped out.
      heads_first: keys and values are head-major (a decoding cache).
    """
    equal_widths = values.shape[-1] == queries.shape[-1]
    if not fused or weights_or_dropout or heads_first or not equal_widths:
        return "explicit"
    if platform == "cpu":
        return "cpu"
    if platform != "cuda" or not cudnn_takes(queries, keys, values):
        return "xla"
    if mask is None or (isinstance(mask, Mask) and mask.key_lengths is not None):
        return "cudnn"
    if isinstance(mask, Mask) and mask.key_segments is not None and packed_rows_supported():
        return "cudnn"
    return "xla"


def scaled_dot_product_attention(
    queries: Array,
    keys: Array,
    values: Array,
    mask: Array | Mask | None = None,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: Array | None = None,
    return_weights: bool = False,
    fused: bool = True,
    heads_first: bool = False,
) -> tuple[Array, Array | None]:
    """Vaswani et al. 2017, Eq. 1: ``Attention(Q, K, V) = softmax(QK^T / sqrt(d_k)) V``.

    One equation, computed as ``choose_implementation`` decides for the platform this is traced
    on: the explicit equations (the reference, the one that can return the weights or drop some
    out), or a fused implementation (on a CPU ``seq2seq.attention.cpu``, on an NVIDIA GPU
    cuDNN's kernel, elsewhere ``jax.nn.dot_product_attention``). Results never depend on which
    ran beyond rounding.

    Args:
      queries: [B, T, H, K].
      keys: [B, S, H, K].
      values: [B, S, H, E].
      mask: bool, broadcastable to [B, H, T, S], True where attention is allowed; or a ``Mask``
        (which a GPU may read as lengths); None for no mask.
      dropout_rate: dropout on the attention weights (Vaswani et al. 2017 apply none; the
        Tensor2Tensor code does).
      dropout_rng: PRNG key for that dropout; None means no dropout.
      return_weights: also return the [B, H, T, S] weights.
      fused: allow the fused implementations.
      heads_first: keys and values are [B, H, S, K] and [B, H, S, E] (a decoding cache's layout;
        always the explicit implementation).

    Returns:
      ([B, T, H, E] outputs, [B, H, T, S] weights or None).
    """
    use_dropout = dropout_rate > 0.0 and dropout_rng is not None
    implementation = choose_implementation(
        queries,
        keys,
        values,
        mask,
        platform=attention_platform(),
        fused=fused,
        weights_or_dropout=return_weights or use_dropout,
        heads_first=heads_first,
    )
    if implementation == "cudnn":
        if mask is None:
            return attention_by_lengths(queries, keys, values, None, None, causal=False), None
        if mask.key_lengths is None:  # packed rows
            outputs = attention_by_segments(
                queries, keys, values, mask.query_segments, mask.key_segments, causal=mask.causal
            )
            return outputs, None
        outputs = attention_by_lengths(
            queries, keys, values, mask.query_lengths, mask.key_lengths, causal=mask.causal
        )
        return outputs, None
    dense = mask.dense if isinstance(mask, Mask) else mask
    if implementation == "explicit":
        weights = masked_softmax(
            scaled_dot_product_scores(queries, keys, heads_first=heads_first), dense
        )
        if use_dropout:
            weights = dropout(weights, dropout_rate, dropout_rng)
        outputs = weighted_values(weights, values, heads_first=heads_first)
        return outputs, (weights if return_weights else None)
    if dense is not None:
        dense = jnp.broadcast_to(dense, dense.shape[:2] + (queries.shape[1], keys.shape[1]))
    if implementation == "cpu":
        return grouped_attention(queries, keys, values, dense), None
    outputs = jax.nn.dot_product_attention(queries, keys, values, mask=dense, implementation="xla")
    return outputs, None


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------


class MultiHeadAttention(nnx.Module):
    """Vaswani et al. 2017, Section 3.2.2: ``MultiHead(Q,K,V) = Concat(head_1..head_h) W^O``.

    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``, with ``W_i^Q, W_i^K`` of shape
    [d_model, d_k] and ``W_i^V`` of shape [d_model, d_v]. The per-head matrices are stored
    stacked, ``w_query`` as [D, H, K], so ``w_query[:, i]`` *is* ``W_i^Q``.

    Self-attention: ``mha(x, x)``. Cross-attention: ``mha(decoder_states, encoder_outputs)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_k: int,
        d_v: int,
        *,
        dropout_rate: float = 0.0,
        fused: bool = True,
        dtype: jnp.dtype | None = None,
        rngs: nnx.Rngs,
    ):
        init = nnx.initializers.xavier_uniform(in_axis=0, out_axis=(1, 2))

        def per_head(width: int) -> nnx.Param:
            return param(init(rngs.params(), (d_model, num_heads, width)), "embed", "heads", "kv")

        self.w_query = per_head(d_k)  # [D, H, K]
        self.w_key = per_head(d_k)  # [D, H, K]
        self.w_value = per_head(d_v)  # [D, H, E]
        out_init = nnx.initializers.xavier_uniform(in_axis=(0, 1), out_axis=2)
        self.w_output = param(
            out_init(rngs.params(), (num_heads, d_v, d_model)), "heads", "kv", "embed"
        )  # [H, E, D]
        self.dropout_rate = dropout_rate
        self.fused = fused
        self.dtype = dtype

    def project_query(self, x: Array) -> Array:
        """[B, T, D] -> [B, T, H, K]: ``Q W_i^Q`` for every head i."""
        return _per_head(project(x, self._cast(self.w_query)))

    def project_keys_values(self, x: Array, *, heads_first: bool = False) -> tuple[Array, Array]:
        """[B, S, D] -> ([B, S, H, K], [B, S, H, E]): ``K W_i^K`` and ``V W_i^V``.

        Exposed so that a decoder can project the encoder output once per sentence and cache it;
        ``heads_first`` gives [B, H, S, K] and [B, H, S, E], the layout a cache is read fastest in.
        """
        keys = _per_head(project(x, self._cast(self.w_key)))  # [B, S, H, K]
        values = _per_head(project(x, self._cast(self.w_value)))  # [B, S, H, E]
        if heads_first:
            return jnp.swapaxes(keys, 1, 2), jnp.swapaxes(values, 1, 2)
        return keys, values

    def attend(
        self,
        queries: Array,
        keys: Array,
        values: Array,
        mask: Array | Mask | None,
        *,
        dropout_rng: Array | None = None,
        return_weights: bool = False,
        heads_first: bool = False,
    ) -> tuple[Array, Array | None]:
        """Attention over projected inputs, then ``W^O``. Returns ([B, T, D], weights).

        ``heads_first``: ``keys`` and ``values`` are head-major, as ``project_keys_values`` gives
        them with the same flag.
        """
        heads, weights = scaled_dot_product_attention(
            queries,
            keys,
            values,
            mask,
            dropout_rate=self.dropout_rate,
            dropout_rng=dropout_rng,
            return_weights=return_weights,
            fused=self.fused,
            heads_first=heads_first,
        )  # [B, T, H, E]
        outputs = project(heads, self._cast(self.w_output), in_axes=2)  # [B, T, D]
        return outputs, weights

    def __call__(
        self,
        query_inputs: Array,
        key_value_inputs: Array,
        mask: Array | Mask | None = None,
        *,
        dropout_rng: Array | None = None,
        return_weights: bool = False,
    ) -> tuple[Array, Array | None]:
        """Attends from ``query_inputs`` [B, T, D] to ``key_value_inputs`` [B, S, D].

        Returns:
          ([B, T, D] outputs, [B, H, T, S] weights when asked for, else None).
        """
        keys, values = self.project_keys_values(key_value_inputs)
        return self.attend(
            self.project_query(query_inputs),
            keys,
            values,
            mask,
            dropout_rng=dropout_rng,
            return_weights=return_weights,
        )

    def _cast(self, weight: nnx.Param) -> Array:
        return weight[...] if self.dtype is None else weight[...].astype(self.dtype)


def _per_head(x: Array) -> Array:
    """[B, T, H, K] activations, laid out by heads (split over ``tensor`` by default)."""
    return constrain(x, "batch", "length", "heads", "kv")


class AlignmentAttention(nnx.Module):
    """Single-query attention for a recurrent decoder: the alignment model ``a(s_{i-1}, h_j)``.

    Bahdanau et al. 2015 score with ``scoring="additive"``; Luong et al. 2015's alternatives are
    ``"dot"`` (needs equal query and key widths) and ``"general"``. The keys are also the values:
    the context is ``c_i = sum_j alpha_ij h_j`` (Eq. 5).
    """

    def __init__(
        self,
        query_size: int,
        key_size: int,
        *,
        scoring: Scoring = "additive",
        hidden_size: int | None = None,
        kernel_init: nnx.Initializer | None = None,
        vector_init: nnx.Initializer = nnx.initializers.zeros,
        dtype: jnp.dtype | None = None,
        rngs: nnx.Rngs,
    ):
        """``kernel_init`` draws W_a and U_a (additive) or W (general); by default Appendix B.1's
        N(0, 0.001^2) for additive and LeCun normal for general. ``vector_init`` draws v_a
        (Appendix B.1: zero)."""
        self.scoring = scoring
        if scoring == "additive":
            hidden_size = hidden_size or query_size
            normal = kernel_init or nnx.initializers.normal(0.001)

            def projection(in_size: int) -> Linear:  # W_a (from s_{i-1}) and U_a (from h_j)
                return Linear(
                    in_size,
                    hidden_size,
                    names=("hidden", "alignment"),
                    use_bias=False,
                    kernel_init=normal,
                    dtype=dtype,
                    rngs=rngs,
                )

            self.w_a = projection(query_size)
            self.u_a = projection(key_size)
            self.v_a = param(vector_init(rngs.params(), (hidden_size,), jnp.float32), "alignment")
        elif scoring == "general":
            general_init = kernel_init or nnx.initializers.lecun_normal()
            self.w_general = Linear(
                key_size,
                query_size,
                names=("hidden", "hidden"),
                use_bias=False,
                kernel_init=general_init,
                dtype=dtype,
                rngs=rngs,
            )
        elif scoring == "dot":
            if query_size != key_size:
                raise ValueError(
                    f"dot scoring needs equal query and key widths, got {query_size} and "
                    f"{key_size}; use scoring='general' or 'additive'"
                )
        else:
            raise ValueError(f"unknown scoring {scoring!r}; use additive, dot or general")

    def precompute_keys(self, keys: Array) -> Array:
        """The query-independent part of the score, computed once per sentence.

        [B, S, Dk] -> [B, S, A]: ``U_a h_j`` (additive), ``W h_j`` (general), ``h_j`` (dot).
        """
        if self.scoring == "additive":
            return self.u_a(keys)
        if self.scoring == "general":
            return self.w_general(keys)
        return keys

    # How ``recurrent_scan`` multiplies by ``v_a`` (a vector, not a matrix), and that its
    # gradient is taken per row inside the loop (see ``loop_weights``).
    LOOP_MULTIPLY = {"v_a": times_v}
    LOOP_PER_ROW = frozenset({"v_a"})

    def loop_weights(self, dtype) -> dict[str, Array]:
        """What a decoder step multiplies by, for ``seq2seq.models.recurrence.recurrent_scan``:
        additive scoring's ``W_a`` (in ``dtype``) and ``v_a``; nothing for dot and general
        scoring, whose one product is of the keys, once per sentence.

        ``W_a``'s gradient is taken after the loop. ``v_a``'s is taken in the loop, for each
        sentence apart (``LOOP_PER_ROW``): after the loop it would need the loop's
        [B, S, A] hidden layer kept a second time (measured: +28% of the step's temporary
        memory, 4% slower on a CPU), and summed over the batch in the loop it was all-reduced
        at every step when the batch is split over devices.
        """
        if self.scoring != "additive":
            return {}
        return {
            "w_a": gathered(self.w_a.kernel, dtype),
            "v_a": gathered(self.v_a),  # float32: times_v casts it
        }

    def __call__(
        self,
        query: Array,
        precomputed_keys: Array,
        values: Array,
        key_valid: Array,
        *,
        products: Mapping[str, Callable[[Array], Array]] | None = None,
    ) -> tuple[Array, Array]:
        """One decoder step.

        Args:
          query: [B * N, Dq], the previous decoder state ``s_{i-1}`` of each of N hypotheses
            per sentence (N = 1 outside beam search; see ``group_rows``).
          precomputed_keys: [B, S, A] from ``precompute_keys``.
          values: [B, S, Dk], the annotations ``h_j``.
          key_valid: [B, S] bool, True at real source positions.
          products: ``w_a`` and ``v_a`` (additive; see ``loop_weights``) as a recurrent loop
            gives them to its step, in place of ``self.w_a`` and ``self.v_a``.

        Returns:
          (context [B * N, Dk], weights [B * N, S]).
        """
        queries = group_rows(query, values.shape[0])  # [B, N, Dq]: N queries per sentence
        if self.scoring == "additive":
            products = products or {}
            project_query = products.get("w_a", self.w_a)
            v = products.get("v_a", self.v_a[...])
            scores = additive_scores(project_query(queries), precomputed_keys, v)
        else:  # dot and general are both q . (key-side projection)
            scores = jnp.einsum("btq,bsq->bts", queries, precomputed_keys)[:, None]
        weights = masked_softmax(scores, key_valid[:, None, None, :])[:, 0]  # [B, N, S]
        context = jnp.einsum("bts,bsd->btd", weights.astype(values.dtype), values)
        return context.reshape(query.shape[0], -1), weights.reshape(query.shape[0], -1)
