"""RNNsearch: the encoder–decoder with additive attention of Bahdanau, Cho & Bengio (2015).

Appendix A of the paper, piece by piece:

* encoder (A.2.1): a bidirectional GRU over the source embeddings; the annotation of word j is
  ``h_j = [forward h_j ; backward h_j]``;
* decoder initial state: ``s_0 = tanh(W_s backward h_1)``;
* alignment model (A.1.2): ``e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)``, ``alpha = softmax(e)``,
  context ``c_i = sum_j alpha_ij h_j`` (see ``seq2seq.attention``);
* decoder state (A.2.2): ``s_i = GRU(s_{i-1}, [E y_{i-1} ; c_i])``;
* deep output with maxout: ``t~_i = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i``,
  ``t_i = max(t~_{i,2j-1}, t~_{i,2j})``, ``p(y_i) = softmax(W_o t_i)``.

The recurrences run under ``jax.lax.scan``, so they compile once whatever the sentence length.
Everything that does not depend on the previous state (input projections, the deep output and
the vocabulary projection) is computed for all positions at once, outside the scan.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.attention import AlignmentAttention
from seq2seq.models.base import (
    PAD_ID,
    Array,
    Cache,
    Dropout,
    Encoded,
    EncoderDecoder,
    apply_dropout,
    check_shared_vocabulary,
)


@dataclasses.dataclass(frozen=True)
class RNNSearchConfig:
    """Sizes; the defaults are RNNsearch as trained by Bahdanau et al. (Appendix B)."""

    source_vocab_size: int
    target_vocab_size: int
    embedding_size: int = 620  # m
    encoder_hidden_size: int = 1000  # n, per direction
    decoder_hidden_size: int = 1000  # n
    alignment_size: int = 1000  # n', the width of the additive scorer's hidden layer
    maxout_size: int = 500  # l
    scoring: str = "additive"  # or Luong et al.'s "dot" / "general"
    dropout_rate: float = 0.0  # the paper uses none; applied to embeddings and to t_i
    share_embeddings: bool = False  # one embedding table for both languages (shared vocabulary)
    dtype: str = "float32"


def maxout(t_tilde: Array) -> Array:
    """Bahdanau et al. 2015, Appendix A.2.2: ``t_i = [max{t~_{i,2j-1}, t~_{i,2j}}]_{j=1..l}``.

    Each output unit is the larger of one adjacent pair of inputs (a maxout unit of two pieces).

    Args:
      t_tilde: [..., 2l].

    Returns:
      [..., l].
    """
    return jnp.max(t_tilde.reshape(*t_tilde.shape[:-1], -1, 2), axis=-1)  # [..., l, 2] -> [..., l]


class GRU(nnx.Module):
    """Gated recurrent unit as in Bahdanau et al. 2015, Appendix A.1.1 (after Cho et al. 2014).

    ``z = sigmoid(W_z x + U_z s)``, ``r = sigmoid(W_r x + U_r s)``,
    ``s~ = tanh(W x + U (r * s))``, ``s_new = (1 - z) * s + z * s~``.
    The input projections ``W_z x, W_r x, W x`` are taken outside the recurrence.
    """

    def __init__(self, input_size: int, hidden_size: int, dtype, *, rngs: nnx.Rngs):
        normal = nnx.initializers.normal(0.01)  # Appendix B.1: non-recurrent weights N(0, 0.01^2)
        self.input_projection = nnx.Linear(
            input_size, 3 * hidden_size, kernel_init=normal, dtype=dtype, rngs=rngs
        )
        orthogonal = nnx.initializers.orthogonal()  # Appendix B.1: recurrent weights orthogonal
        self.u_gates = nnx.Linear(
            hidden_size,
            2 * hidden_size,
            use_bias=False,
            kernel_init=orthogonal,
            dtype=dtype,
            rngs=rngs,
        )  # [U_z U_r]
        self.u_candidate = nnx.Linear(
            hidden_size, hidden_size, use_bias=False, kernel_init=orthogonal, dtype=dtype, rngs=rngs
        )  # U

    def step(self, state: Array, projected_input: Array) -> Array:
        """[B, n] previous state, [B, 3n] projected input -> [B, n] new state."""
        x_z, x_r, x_candidate = jnp.split(projected_input, 3, axis=-1)
        h_z, h_r = jnp.split(self.u_gates(state), 2, axis=-1)
        z = jax.nn.sigmoid(x_z + h_z)
        r = jax.nn.sigmoid(x_r + h_r)
        candidate = jnp.tanh(x_candidate + self.u_candidate(r * state))
        return (1.0 - z) * state + z * candidate

    def run(self, projected_inputs: Array, valid: Array, *, reverse: bool = False) -> Array:
        """Runs over [B, T, 3n] inputs from a zero state; padding steps keep the state.

        Keeping the state over padding makes the backward direction start at each sentence's
        own last word, not at the end of the padded batch.

        Returns:
          [B, T, n] states.
        """
        batch = projected_inputs.shape[0]
        hidden_size = projected_inputs.shape[-1] // 3

        def body(state, inputs):
            projected, is_valid = inputs
            new_state = self.step(state, projected)
            new_state = jnp.where(is_valid[:, None], new_state, state)
            return new_state, new_state

        initial = jnp.zeros((batch, hidden_size), projected_inputs.dtype)
        time_major = (jnp.swapaxes(projected_inputs, 0, 1), jnp.swapaxes(valid, 0, 1))
        _, states = jax.lax.scan(body, initial, time_major, reverse=reverse)
        return jnp.swapaxes(states, 0, 1)


class RNNSearch(EncoderDecoder):
    """RNNsearch behind the ``Seq2SeqModel`` contract."""

    def __init__(self, config: RNNSearchConfig, *, rngs: nnx.Rngs):
        check_shared_vocabulary(config)
        self.config = config
        dtype = jnp.dtype(config.dtype)
        self.dtype = dtype
        m, n, n_dec = config.embedding_size, config.encoder_hidden_size, config.decoder_hidden_size
        normal = nnx.initializers.normal(0.01)  # Appendix B.1: N(0, 0.01^2) for most weights

        def linear(d_in, d_out, use_bias=True):
            return nnx.Linear(
                d_in, d_out, use_bias=use_bias, kernel_init=normal, dtype=dtype, rngs=rngs
            )

        self.target_embedding = nnx.Embed(
            config.target_vocab_size, m, embedding_init=normal, rngs=rngs
        )
        self.source_embedding = (
            self.target_embedding
            if config.share_embeddings
            else nnx.Embed(config.source_vocab_size, m, embedding_init=normal, rngs=rngs)
        )
        self.forward_encoder = GRU(m, n, dtype, rngs=rngs)
        self.backward_encoder = GRU(m, n, dtype, rngs=rngs)
        self.initial_state = linear(n, n_dec)  # W_s
        self.attention = AlignmentAttention(
            n_dec,
            2 * n,
            scoring=config.scoring,
            hidden_size=config.alignment_size,
            dtype=dtype,
            rngs=rngs,
        )
        self.decoder = GRU(m, n_dec, dtype, rngs=rngs)  # its input projection takes E y_{i-1}
        self.context_to_gates = linear(2 * n, 3 * n_dec, use_bias=False)  # C, C_z, C_r
        self.u_o = linear(n_dec, 2 * config.maxout_size)
        self.v_o = linear(m, 2 * config.maxout_size, use_bias=False)
        self.c_o = linear(2 * n, 2 * config.maxout_size, use_bias=False)
        self.w_o = linear(config.maxout_size, config.target_vocab_size)

    # -- the contract ----------------------------------------------------------------------

    def encode(
        self, source: Array, *, source_segments: Array | None = None, dropout: Dropout | None = None
    ) -> Encoded:
        """Annotations ``h_j`` [B, S, 2n], their projections for the scorer, and ``s_0``."""
        if source_segments is not None:
            raise ValueError("RNNsearch does not support packed examples; set data.pack=False")
        valid = source != PAD_ID  # [B, S]
        x = apply_dropout(
            self.source_embedding(source).astype(self.dtype), self.config.dropout_rate, dropout
        )
        forward = self.forward_encoder.run(self.forward_encoder.input_projection(x), valid)
        backward = self.backward_encoder.run(
            self.backward_encoder.input_projection(x), valid, reverse=True
        )
        annotations = jnp.concatenate([forward, backward], axis=-1)  # [B, S, 2n]
        return {
            "annotations": annotations,
            "keys": self.attention.precompute_keys(annotations),  # U_a h_j, once per sentence
            "valid": valid,
            "initial_state": jnp.tanh(self.initial_state(backward[:, 0])),  # s_0
        }

    def init_cache(self, encoded: Encoded, max_length: int) -> Cache:
        """The recurrent state is the whole cache; ``max_length`` is not needed."""
        del max_length
        return {"state": encoded["initial_state"]}

    def decode(
        self,
        encoded: Encoded,
        target_inputs: Array,
        *,
        cache: Cache | None = None,
        target_segments: Array | None = None,
        dropout: Dropout | None = None,
        return_attention: bool = False,
    ) -> tuple[Array, dict[str, Array], Cache | None]:
        """Logits [B, T, V] for inputs ``y_0 .. y_{T-1}``, starting from ``s_0`` or the cache."""
        if target_segments is not None:
            raise ValueError("RNNsearch does not support packed examples; set data.pack=False")
        state = encoded["initial_state"] if cache is None else cache["state"]
        embedded = apply_dropout(
            self.target_embedding(target_inputs).astype(self.dtype),
            self.config.dropout_rate,
            dropout,
        )  # E y_{i-1}: [B, T, m]
        projected = self.decoder.input_projection(embedded)  # [B, T, 3n]

        def body(previous_state, projected_input):
            context, weights = self.attention(
                previous_state, encoded["keys"], encoded["annotations"], encoded["valid"]
            )
            gates_input = projected_input + self.context_to_gates(context)
            new_state = self.decoder.step(previous_state, gates_input)
            return new_state, (previous_state, context, weights)

        final_state, (previous_states, contexts, weights) = jax.lax.scan(
            body, state, jnp.swapaxes(projected, 0, 1)
        )
        previous_states = jnp.swapaxes(previous_states, 0, 1)  # s_{i-1}: [B, T, n]
        contexts = jnp.swapaxes(contexts, 0, 1)  # c_i: [B, T, 2n]
        logits = self._deep_output(previous_states, embedded, contexts, dropout)
        aux = {}
        if return_attention:  # [T, B, S] -> [B, 1 layer, 1 head, T, S], as the Transformer's
            aux["cross_attention"] = jnp.transpose(weights, (1, 0, 2))[:, None, None]
        new_cache = None if cache is None else {"state": final_state}
        return logits, aux, new_cache

    def _deep_output(self, previous_states, embedded, contexts, dropout) -> Array:
        """Appendix A.2.2: ``t~ = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i``, maxout, ``W_o t``."""
        t_tilde = self.u_o(previous_states) + self.v_o(embedded) + self.c_o(contexts)
        t = maxout(t_tilde)  # [B, T, l]
        t = apply_dropout(t, self.config.dropout_rate, dropout)
        return self.w_o(t).astype(jnp.float32)
