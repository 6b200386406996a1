"""The Transformer of Vaswani et al. 2017 ("Attention Is All You Need").

An encoder of N layers (self-attention, feed-forward) and a decoder of N layers (masked
self-attention, cross-attention to the encoder, feed-forward), each sub-layer wrapped as
``LayerNorm(x + Dropout(Sublayer(x)))`` (post-LN, Section 5.4) or, optionally, as
``x + Dropout(Sublayer(LayerNorm(x)))`` (pre-LN, which trains without warm-up trouble at depth).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.attention.layers import Mask, MultiHeadAttention, group_rows, sequence_mask
from seq2seq.linear import Linear
from seq2seq.logical_axes import constrain, lookup, metadata
from seq2seq.models.base import (
    PAD_ID,
    Array,
    Cache,
    Dropout,
    Encoded,
    EncoderDecoder,
    OutputLayer,
    apply_dropout,
)
from seq2seq.models.transformer_config import TransformerConfig


def positions_from_segments(segments: Array) -> Array:
    """Position of each token inside its own packed example: [B, T] -> [B, T], 0-based."""
    index = jnp.arange(segments.shape[1])[None, :]
    starts = segments != jnp.pad(segments, ((0, 0), (1, 0)))[:, :-1]
    start_index = jax.lax.cummax(jnp.where(starts, index, 0), axis=1)
    return index - start_index


def sinusoidal_positions(positions: Array, width: int) -> Array:
    """Vaswani et al. 2017, Section 3.5.

    ``PE(pos, 2i) = sin(pos / 10000^(2i/d_model))`` and ``PE(pos, 2i+1) = cos(...)``, the sines
    and cosines interleaved exactly as in the equation.

    Args:
      positions: [B, T] integer positions.
      width: d_model (even).

    Returns:
      [B, T, D] float32 encodings.
    """
    two_i = jnp.arange(0, width, 2, dtype=jnp.float32)  # 2i for i = 0 .. D/2-1
    angles = positions[..., None].astype(jnp.float32) / jnp.power(10000.0, two_i / width)
    encodings = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [B, T, D/2, 2]
    return encodings.reshape(*positions.shape, width)  # [B, T, D]


def embedding_init(width: int) -> nnx.Initializer:
    """N(0, 1/width): after scaling by sqrt(d_model) (Section 3.4) embeddings have unit scale."""
    return nnx.initializers.normal(stddev=1.0 / math.sqrt(width))


# Cache positions per block: the cache's length is a whole number of them, and a beam search
# step moves only the blocks written so far (``Transformer.reorder_cache``).
CACHE_BLOCK = 8


def feed_forward(x: Array, w_1: Linear, w_2: Linear, relu_dropout) -> Array:
    """Vaswani et al. 2017, Eq. 2: ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``."""
    inner = constrain(jax.nn.relu(w_1(x)), "batch", "length", "mlp")  # [B, T, d_ff]
    return w_2(relu_dropout(inner))


def residual_stream(x: Array) -> Array:
    """[B, T, D] activations between layers, laid out by the rules' names for them."""
    return constrain(x, "batch", "length", "activation_embed")


def layer_norm(config: TransformerConfig, dtype, rngs: nnx.Rngs) -> nnx.LayerNorm:
    """Layer norm over d_model (statistics in float32 whatever ``dtype``)."""
    return nnx.LayerNorm(
        config.d_model,
        epsilon=1e-6,
        dtype=dtype,
        scale_metadata=metadata("embed"),
        bias_metadata=metadata("embed"),
        rngs=rngs,
    )


class SubLayer(nnx.Module):
    """A residual sub-layer with layer norm, in post-LN or pre-LN order."""

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
        self.norm = layer_norm(config, jnp.dtype(config.dtype), rngs)
        self.pre_norm = config.norm == "pre"
        self.dropout_rate = config.dropout_rate

    def __call__(self, x: Array, sublayer, dropout: Dropout | None) -> tuple[Array, object]:
        """Returns the new residual stream and whatever extra output ``sublayer`` gave."""
        inputs = self.norm(x) if self.pre_norm else x
        outputs, extra = sublayer(inputs)
        x = x + apply_dropout(outputs, self.dropout_rate, dropout)
        return (x if self.pre_norm else self.norm(x)), extra


class FeedForward(nnx.Module):
    """The position-wise feed-forward block (Section 3.3)."""

    def __init__(self, config: TransformerConfig, dtype, *, rngs: nnx.Rngs):
        init = nnx.initializers.xavier_uniform()
        self.w_1 = Linear(
            config.d_model,
            config.d_ff,
            names=("embed", "mlp"),  # column-parallel under Megatron rules
            kernel_init=init,
            dtype=dtype,
            rngs=rngs,
        )
        self.w_2 = Linear(
            config.d_ff,
            config.d_model,
            names=("mlp", "embed"),  # row-parallel: one all-reduce per block
            kernel_init=init,
            dtype=dtype,
            rngs=rngs,
        )
        self.relu_dropout_rate = config.relu_dropout_rate

    def __call__(self, x: Array, dropout: Dropout | None) -> tuple[Array, None]:
        def relu_dropout(h):
            return apply_dropout(h, self.relu_dropout_rate, dropout)

        return feed_forward(x, self.w_1, self.w_2, relu_dropout), None


def _attention(config: TransformerConfig, dtype, rngs: nnx.Rngs) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model,
        config.num_heads,
        config.d_k,
        config.d_v,
        dropout_rate=config.attention_dropout_rate,
        dtype=dtype,
        rngs=rngs,
    )


def _key(dropout: Dropout | None) -> Array | None:
    return None if dropout is None else dropout.next_key()


class EncoderLayer(nnx.Module):
    """Self-attention (Q, K, V all from the previous layer), then the feed-forward block."""

    def __init__(self, config: TransformerConfig, dtype, *, rngs: nnx.Rngs):
        self.self_attention = _attention(config, dtype, rngs)
        self.feed_forward = FeedForward(config, dtype, rngs=rngs)
        self.attention_sublayer = SubLayer(config, rngs=rngs)
        self.feed_forward_sublayer = SubLayer(config, rngs=rngs)

    def __call__(self, x: Array, mask: Mask, dropout: Dropout | None) -> Array:
        x, _ = self.attention_sublayer(
            x, lambda h: self.self_attention(h, h, mask, dropout_rng=_key(dropout)), dropout
        )
        x, _ = self.feed_forward_sublayer(x, lambda h: self.feed_forward(h, dropout), dropout)
        return residual_stream(x)


class DecoderLayer(nnx.Module):
    """Masked self-attention, cross-attention (Q: decoder; K, V: encoder), feed-forward."""

    def __init__(self, config: TransformerConfig, dtype, *, rngs: nnx.Rngs):
        self.self_attention = _attention(config, dtype, rngs)
        self.cross_attention = _attention(config, dtype, rngs)
        self.feed_forward = FeedForward(config, dtype, rngs=rngs)
        self.self_sublayer = SubLayer(config, rngs=rngs)
        self.cross_sublayer = SubLayer(config, rngs=rngs)
        self.feed_forward_sublayer = SubLayer(config, rngs=rngs)

    def __call__(
        self,
        x: Array,
        self_keys_values: tuple[Array, Array] | None,
        self_mask: Array | Mask,
        cross_keys_values: tuple[Array, Array],
        cross_mask: Array | Mask,
        dropout: Dropout | None,
        return_attention: bool,
    ) -> tuple[Array, Array | None]:
        """One layer. ``self_keys_values`` overrides the self-attention keys and values: a
        decoding cache, whose keys and values (self and cross) are then head-major.

        Returns:
          (x [B, T, D], cross-attention weights [B, H, T, S] or None).
        """
        cached = self_keys_values is not None

        def self_attend(h):
            keys, values = self_keys_values or self.self_attention.project_keys_values(h)
            return self.self_attention.attend(
                self.self_attention.project_query(h),
                keys,
                values,
                self_mask,
                dropout_rng=_key(dropout),
                heads_first=cached,
            )

        def cross_attend(h):
            queries = self.cross_attention.project_query(h)  # [B * N, T, H, K]
            rows = queries.shape[0]
            if cached:  # one query per hypothesis; a sentence's N hypotheses as N positions
                queries = group_rows(queries[:, 0], cross_keys_values[0].shape[0])  # [B, N, H, K]
            outputs, weights = self.cross_attention.attend(
                queries,
                *cross_keys_values,
                cross_mask,
                dropout_rng=_key(dropout),
                return_weights=return_attention,
                heads_first=cached,
            )
            if cached:  # back to a row per hypothesis: [B * N, 1, D], weights [B * N, H, 1, S]
                outputs = outputs.reshape(rows, 1, -1)
                if weights is not None:
                    weights = jnp.swapaxes(weights, 1, 2).reshape(rows, -1, 1, weights.shape[-1])
            return outputs, weights

        x, _ = self.self_sublayer(x, self_attend, dropout)
        x, weights = self.cross_sublayer(x, cross_attend, dropout)
        x, _ = self.feed_forward_sublayer(x, lambda h: self.feed_forward(h, dropout), dropout)
        return residual_stream(x), weights


def run_layers(layers: nnx.List, x: Array, apply, dropout: Dropout | None, scan: bool):
    """``x`` through ``layers`` in order, ``apply(layer, x, dropout) -> (x, extra)`` each.

    Unrolled, the compiled program holds one copy of the layer per layer. With ``scan`` the
    layers' parameters are stacked inside the step and one ``jax.lax.scan`` runs a single copy
    L times, so compile time stops growing with depth. The parameters stay one module per layer
    either way (checkpoints are interchangeable); under ``scan`` each layer draws its dropout
    from a key of its own, so training noise differs from the unrolled run's.

    Returns:
      (x, the layers' extras stacked on a new leading axis, or None if they are None).
    """
    if not scan:
        extras = []
        for layer in layers:
            x, extra = apply(layer, x, dropout)
            extras.append(extra)
        return x, None if extras[0] is None else jnp.stack(extras)
    graphdef, _ = nnx.split(layers[0])
    states = [nnx.split(layer)[1] for layer in layers]
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)
    keys = None if dropout is None else jax.random.split(dropout.next_key(), len(layers))

    def body(x, per_layer):
        state, key = per_layer
        return apply(nnx.merge(graphdef, state), x, None if key is None else Dropout(key))

    return jax.lax.scan(body, x, (stacked, keys))


class Transformer(EncoderDecoder):
    """Encoder–decoder Transformer behind the ``Seq2SeqModel`` contract."""

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
        self.config = config
        dtype = jnp.dtype(config.dtype)
        self.dtype = dtype

        def embed(vocab_size):
            init = embedding_init(config.d_model)
            return nnx.Embed(
                vocab_size,
                config.d_model,
                embedding_init=init,
                embedding_metadata=metadata("vocab", "embed"),
                rngs=rngs,
            )

        self.target_embedding = embed(config.target_vocab_size)
        self.source_embedding = (
            self.target_embedding if config.share_embeddings else embed(config.source_vocab_size)
        )
        if not config.tie_output:
            self.output_projection = Linear(  # only its kernel is read: output_layer()
                config.d_model,
                config.target_vocab_size,
                names=("embed", "vocab"),
                use_bias=False,
                rngs=rngs,
            )
        if config.positions == "learned":
            self.position_embedding = nnx.Embed(
                config.max_positions,
                config.d_model,
                embedding_init=embedding_init(1),
                embedding_metadata=metadata("positions", "embed"),
                rngs=rngs,
            )
        self.encoder_layers = nnx.List(
            [EncoderLayer(config, dtype, rngs=rngs) for _ in range(config.encoder_layers)]
        )
        self.decoder_layers = nnx.List(
            [DecoderLayer(config, dtype, rngs=rngs) for _ in range(config.decoder_layers)]
        )
        if config.norm == "pre":  # pre-LN leaves the residual stream un-normalised: finish it
            self.encoder_norm = layer_norm(config, dtype, rngs)
            self.decoder_norm = layer_norm(config, dtype, rngs)

    # -- embeddings ------------------------------------------------------------------------

    def _embed(
        self, embedding: nnx.Embed, tokens: Array, positions: Array, dropout: Dropout | None
    ) -> Array:
        """Token embedding (times sqrt(d_model), Section 3.4) plus positions, then dropout."""
        x = lookup(embedding, tokens)
        if self.config.scale_embeddings:
            x = x * math.sqrt(self.config.d_model)
        if self.config.positions == "learned":
            x = x + self.position_embedding(positions)
        else:
            x = x + sinusoidal_positions(positions, self.config.d_model)
        x = apply_dropout(x.astype(self.dtype), self.config.dropout_rate, dropout)
        return residual_stream(x)

    def output_layer(self) -> OutputLayer:
        """Pre-softmax projection, tied to the target embedding by default (Section 3.4)."""
        if self.config.tie_output:
            return OutputLayer(
                self.target_embedding.embedding[...], vocab_first=True, dtype=self.dtype
            )
        return OutputLayer(self.output_projection.kernel[...], dtype=self.dtype)

    # -- the contract ----------------------------------------------------------------------

    def encode(
        self, source: Array, *, source_segments: Array | None = None, dropout: Dropout | None = None
    ) -> Encoded:
        """[B, S] -> {"memory": [B, S, D], "segments": [B, S]} (segments 0 at padding)."""
        segments = (
            (source != PAD_ID).astype(jnp.int32) if source_segments is None else source_segments
        )
        x = self._embed(self.source_embedding, source, positions_from_segments(segments), dropout)
        # [B, 1, S, S], and source lengths where the rows are not packed
        mask = sequence_mask(segments, segments, packed=source_segments is not None)
        x, _ = run_layers(
            self.encoder_layers,
            x,
            lambda layer, x, dropout: (layer(x, mask, dropout), None),
            dropout,
            self.config.scan_layers,
        )
        if self.config.norm == "pre":
            x = self.encoder_norm(x)
        return {"memory": x, "segments": segments}

    def start_decoding(self, encoded: Encoded, max_length: int) -> tuple[Encoded, Cache]:
        """Each layer's cross-attention keys and values, projected once per sentence (into
        ``encoded``), and empty self-attention keys and values per layer (the cache).

        All are head-major ([B, H, positions, K]), the layout a one-query step reads fastest.
        The cache has room for ``max_length`` positions rounded up to whole blocks of
        ``CACHE_BLOCK`` (``reorder_cache`` moves it a block at a time); the mask hides the rest.
        """
        memory = encoded["memory"]
        batch = memory.shape[0]
        config = self.config
        max_length = -(-max_length // CACHE_BLOCK) * CACHE_BLOCK
        per_sentence = {"segments": encoded["segments"]}  # the memory itself is read no more
        cache: Cache = {"index": jnp.zeros((batch,), jnp.int32)}
        for i, layer in enumerate(self.decoder_layers):
            cache[f"self_keys_{i}"] = jnp.zeros(
                (batch, config.num_heads, max_length, config.d_k), self.dtype
            )
            cache[f"self_values_{i}"] = jnp.zeros(
                (batch, config.num_heads, max_length, config.d_v), self.dtype
            )
            keys, values = layer.cross_attention.project_keys_values(memory, heads_first=True)
            per_sentence[f"cross_keys_{i}"], per_sentence[f"cross_values_{i}"] = keys, values
        return per_sentence, cache

    def decode(
        self,
        encoded: Encoded,
        target_inputs: Array,
        *,
        cache: Cache | None = None,
        target_segments: Array | None = None,
        dropout: Dropout | None = None,
        return_attention: bool = False,
        project: bool = True,
    ) -> tuple[Array, dict[str, Array], Cache | None]:
        """Logits [B, T, V] (features [B, T, D] if not ``project``); with a cache,
        ``target_inputs`` is the newest token [B, 1]."""
        if cache is None:
            x, aux = self._decode_parallel(
                encoded, target_inputs, target_segments, dropout, return_attention
            )
            cache_out = None
        else:
            x, aux, cache_out = self._decode_step(encoded, target_inputs, cache, return_attention)
        return (self.output_layer()(x) if project else x), aux, cache_out

    # -- decoding, parallel (teacher forcing) and incremental ------------------------------

    def _decode_parallel(self, encoded, target_inputs, target_segments, dropout, return_attention):
        segments = (
            (target_inputs != PAD_ID).astype(jnp.int32)
            if target_segments is None
            else target_segments
        )
        x = self._embed(
            self.target_embedding, target_inputs, positions_from_segments(segments), dropout
        )
        packed = target_segments is not None  # else target lengths, and source lengths too
        self_mask = sequence_mask(segments, segments, causal=True, packed=packed)  # [B, 1, T, T]
        cross_mask = sequence_mask(segments, encoded["segments"], packed=packed)  # [B, 1, T, S]

        def apply(layer, x, dropout):
            cross_kv = layer.cross_attention.project_keys_values(encoded["memory"])
            return layer(x, None, self_mask, cross_kv, cross_mask, dropout, return_attention)

        x, weights = run_layers(self.decoder_layers, x, apply, dropout, self.config.scan_layers)
        return self._finish(x, weights)

    def reorder_cache(self, cache: Cache, rows: Array) -> Cache:
        """Row ``r`` of the cache becomes row ``rows[r]`` (a beam search's step).

        Only the positions some row has written move: a block of ``CACHE_BLOCK`` positions at a
        time, in place, up to the block holding the last one written. Gathering every position
        cost a beam step a fifth of its time on a CPU, most of it on positions not yet written
        (a cache has room for the input's length + 50).

        Args:
          cache: from ``start_decoding`` or ``decode``, rows [R, ...].
          rows: [R] int, in bounds.

        Returns:
          The cache, rows reordered where written.
        """
        index = cache["index"]  # [R] positions written per row
        arrays = {name: x for name, x in cache.items() if name != "index"}  # [R, H, T, K]

        def move_block(block, arrays):
            def move(x):
                piece = jax.lax.dynamic_slice_in_dim(x, block * CACHE_BLOCK, CACHE_BLOCK, axis=2)
                piece = piece.at[rows].get(mode="promise_in_bounds")
                return jax.lax.dynamic_update_slice_in_dim(x, piece, block * CACHE_BLOCK, axis=2)

            return {name: move(x) for name, x in arrays.items()}

        written_blocks = (jnp.max(index) + CACHE_BLOCK - 1) // CACHE_BLOCK
        arrays = jax.lax.fori_loop(0, written_blocks, move_block, arrays)
        return {"index": index.at[rows].get(mode="promise_in_bounds"), **arrays}

    def _decode_step(self, encoded, tokens, cache, return_attention):
        index = cache["index"]  # [B], the position of ``tokens``
        max_length = cache["self_keys_0"].shape[2]
        x = self._embed(self.target_embedding, tokens, index[:, None], None)  # [B, 1, D]
        cache_positions = jnp.arange(max_length)[None, :]
        self_mask = (cache_positions <= index[:, None])[:, None, None, :]  # [B, 1, 1, T]
        cross_mask = (encoded["segments"] > 0)[:, None, None, :]  # [B, 1, 1, S]
        rows = jnp.arange(tokens.shape[0])
        new_cache = {"index": index + 1}
        weights = []
        for i, layer in enumerate(self.decoder_layers):
            h = layer.self_sublayer.norm(x) if self.config.norm == "pre" else x
            new_keys, new_values = layer.self_attention.project_keys_values(
                h, heads_first=True
            )  # [B, H, 1, K]
            # Each row writes its position only (a scatter, in place inside the search's loop;
            # a select would rewrite the whole cache on every step).
            keys = cache[f"self_keys_{i}"].at[rows, :, index].set(new_keys[:, :, 0])
            values = cache[f"self_values_{i}"].at[rows, :, index].set(new_values[:, :, 0])
            new_cache[f"self_keys_{i}"], new_cache[f"self_values_{i}"] = keys, values
            cross_kv = encoded[f"cross_keys_{i}"], encoded[f"cross_values_{i}"]
            x, w = layer(x, (keys, values), self_mask, cross_kv, cross_mask, None, return_attention)
            weights.append(w)
        return *self._finish(x, jnp.stack(weights) if return_attention else None), new_cache

    def _finish(self, x, weights):
        """Output features, and the cross-attention weights (stacked [L, B, H, T, S]) if any."""
        if self.config.norm == "pre":
            x = self.decoder_norm(x)
        aux = {} if weights is None else {"cross_attention": jnp.moveaxis(weights, 0, 1)}
        return x, aux  # aux["cross_attention"]: [B, L, H, T, S]
