"""RNNsearch (Bahdanau, Cho & Bengio 2015) and its baseline RNNencdec (Cho et al. 2014).

Appendix A of the paper, piece by piece:

* encoder (A.2.1): a bidirectional GRU over the source embeddings; the annotation of word j is
  ``h_j = [forward h_j ; backward h_j]``;
* decoder initial state: ``s_0 = tanh(W_s backward h_1)``;
* alignment model (A.1.2): ``e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)``, ``alpha = softmax(e)``,
  context ``c_i = sum_j alpha_ij h_j`` (see ``seq2seq.attention.layers``);
* decoder state (A.2.2): ``s_i = GRU(s_{i-1}, [E y_{i-1} ; c_i])``;
* deep output with maxout: ``t~_i = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i``,
  ``t_i = max(t~_{i,2j-1}, t~_{i,2j})``, ``p(y_i) = softmax(W_o t_i)``.

``attention="none"`` is the paper's baseline, RNNencdec (Cho et al. 2014, Appendix A.1): the
decoder sees the source only through one fixed vector ``c = tanh(V h_N)``, used at every step in
the same three places as ``c_i`` above (GRU input, deep output) and for the initial state
``s_0 = tanh(V' c)``. Here ``h_N`` is the encoder's summary ``[forward h_{T_x} ; backward h_1]``:
the encoder stays the bidirectional one of RNNsearch, so the two models differ in attention
alone (Cho et al. and the paper's RNNencdec read the source in one direction).

The recurrences run under ``jax.lax.scan``, so they compile once whatever the sentence length
(``scan_unroll`` steps per iteration of its loop: the same equations in fewer iterations).
Everything that does not depend on the previous state (input projections, the deep output and
the vocabulary projection) is computed for all positions at once, outside the scan.

Shapes: B batch, S source length, T target length, m embedding width, n encoder units per
direction, n_dec decoder units, A alignment width, l maxout units, V target vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.attention.layers import AlignmentAttention
from seq2seq.linear import Linear
from seq2seq.logical_axes import constrain, gathered, lookup, metadata
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
from seq2seq.models.recurrence import Product, recurrent_scan
from seq2seq.models.rnnsearch_config import RNNSearchConfig

# -- initialisation -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Initializers:
    """Where each kind of weight starts. Biases start at zero under both schemes."""

    weights: nnx.Initializer  # every non-recurrent matrix not named below
    embeddings: nnx.Initializer  # the word embedding tables E
    recurrent: nnx.Initializer  # each square recurrent matrix U, U_z, U_r
    alignment: nnx.Initializer  # W_a and U_a of the additive alignment model
    alignment_vector: nnx.Initializer  # v_a


def paper_initializers() -> Initializers:
    """Bahdanau et al. 2015, Appendix B.1.

    Recurrent matrices random orthogonal; W_a and U_a from N(0, 0.001^2); v_a and all biases
    zero; every other weight matrix (embeddings included) from N(0, 0.01^2). Under Adam these
    tiny weights make a small model learn slowly (see the Multi30k config).
    """
    return Initializers(
        weights=nnx.initializers.normal(0.01),
        embeddings=nnx.initializers.normal(0.01),
        recurrent=nnx.initializers.orthogonal(),
        alignment=nnx.initializers.normal(0.001),
        alignment_vector=nnx.initializers.zeros,
    )


def _fan_in_vector(key: Array, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
    """A vector read as a [A, 1] kernel (v_a^T x is one output unit): N(0, 1/A), LeCun normal."""
    return nnx.initializers.lecun_normal()(key, (shape[0], 1), dtype)[:, 0]


def modern_initializers() -> Initializers:
    """The usual fan-in scaling (LeCun et al. 1998; Flax's default for dense layers).

    Kernels from N(0, 1/fan_in) (truncated, rescaled to that variance), so each layer's outputs
    keep the scale of its inputs; embeddings from N(0, 1), the scale those kernels expect;
    recurrent matrices orthogonal (Saxe et al. 2014); v_a, like any kernel, N(0, 1/A), so the
    first alignments are not uniform; biases zero.
    """
    return Initializers(
        weights=nnx.initializers.lecun_normal(),
        embeddings=nnx.initializers.normal(1.0),
        recurrent=nnx.initializers.orthogonal(),
        alignment=nnx.initializers.lecun_normal(),
        alignment_vector=_fan_in_vector,
    )


INITIALIZERS = {"paper": paper_initializers, "modern": modern_initializers}


def stacked(square_init: nnx.Initializer, blocks: int) -> nnx.Initializer:
    """An [n, blocks * n] kernel made of ``blocks`` square [n, n] matrices, each drawn alone.

    ``[U_z U_r]`` is stored as one kernel so both gates take one matrix product; drawing it as
    one [n, 2n] orthogonal matrix would make neither U_z nor U_r orthogonal (Appendix B.1 asks
    for each to be).
    """

    def init(key: Array, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
        rows, columns = shape
        keys = jax.random.split(key, blocks)
        squares = [square_init(k, (rows, columns // blocks), dtype) for k in keys]
        return jnp.concatenate(squares, axis=1)

    return init


# -- equations (Appendix A) -----------------------------------------------------------------


def gru_gates(x_z: Array, x_r: Array, h_z: Array, h_r: Array) -> tuple[Array, Array]:
    """Appendix A.1.1: update ``z = sigma(W_z x + U_z s)``, reset ``r = sigma(W_r x + U_r s)``."""
    return jax.nn.sigmoid(x_z + h_z), jax.nn.sigmoid(x_r + h_r)


def gru_new_state(state: Array, update: Array, candidate: Array) -> Array:
    """Appendix A.1.1: ``s_i = (1 - z_i) * s_{i-1} + z_i * s~_i`` (element-wise)."""
    return (1.0 - update) * state + update * candidate


def gru_step(
    state: Array,
    projected_input: Array,
    recurrent_gates: Callable[[Array], Array],
    recurrent_candidate: Callable[[Array], Array],
) -> Array:
    """Appendix A.1.1, one step from ``state`` and the input's projections ``[W_z x, W_r x, W x]``
    (last axis), given ``[U_z U_r] s`` and ``U (r * s)`` as functions of their argument."""
    x_z, x_r, x_candidate = jnp.split(projected_input, 3, axis=-1)
    h_z, h_r = jnp.split(recurrent_gates(state), 2, axis=-1)
    update, reset = gru_gates(x_z, x_r, h_z, h_r)
    candidate = jnp.tanh(x_candidate + recurrent_candidate(reset * state))  # s~
    return gru_new_state(state, update, candidate)


def maxout(t_tilde: Array) -> Array:
    """Appendix A.2.2: ``t_{i,j} = max(t~_{i,2j-1}, t~_{i,2j})``. [..., 2l] -> [..., l].

    Written as the maximum of the odd and the even units rather than a max over a [..., l, 2]
    reshape, which computes the same thing: with the reshape, XLA on CPU fused the deep output's
    three products, the maxout and the 8,000-way projection into one YNNPACK fusion that ran at
    about half the speed of its parts.
    """
    return jnp.maximum(t_tilde[..., 0::2], t_tilde[..., 1::2])


def fixed_context(projected_summary: Array) -> Array:
    """Cho et al. 2014, Appendix A.1: the one context of RNNencdec, ``c = tanh(V h_N)``."""
    return jnp.tanh(projected_summary)


# -- modules --------------------------------------------------------------------------------


class GRU(nnx.Module):
    """Gated recurrent unit as in Bahdanau et al. 2015, Appendix A.1.1 (after Cho et al. 2014).

    ``z = sigmoid(W_z x + U_z s)``, ``r = sigmoid(W_r x + U_r s)``,
    ``s~ = tanh(W x + U (r * s))``, ``s_new = (1 - z) * s + z * s~``.
    The input projections ``W_z x, W_r x, W x`` are taken outside the recurrence.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        dtype,
        *,
        initializers: Initializers,
        rngs: nnx.Rngs,
        scan_unroll: int = 1,
        weight_gradients_after_loop: bool = True,
    ):
        self.dtype = dtype
        self.scan_unroll = scan_unroll  # recurrence steps per loop iteration (jax.lax.scan)
        self.weight_gradients_after_loop = weight_gradients_after_loop  # see recurrent_scan
        self.input_projection = Linear(
            input_size,
            3 * hidden_size,
            names=("embed", "gates"),
            kernel_init=initializers.weights,
            dtype=dtype,
            rngs=rngs,
        )  # [W_z W_r W] and their biases
        self.u_gates = Linear(
            hidden_size,
            2 * hidden_size,
            names=("hidden", "gates"),
            use_bias=False,
            kernel_init=stacked(initializers.recurrent, 2),
            dtype=dtype,
            rngs=rngs,
        )  # [U_z U_r]: [n, 2n], each half orthogonal
        self.u_candidate = Linear(
            hidden_size,
            hidden_size,
            names=("hidden", "gates"),
            use_bias=False,
            kernel_init=initializers.recurrent,
            dtype=dtype,
            rngs=rngs,
        )  # U: [n, n]

    def recurrent_weights(self) -> dict[str, Array]:
        """``[U_z U_r]`` and ``U`` in the compute dtype, as ``recurrent_scan`` takes them."""
        return {
            "u_gates": gathered(self.u_gates.kernel, self.dtype),
            "u_candidate": gathered(self.u_candidate.kernel, self.dtype),
        }

    def step(
        self, state: Array, projected_input: Array, products: Mapping[str, Product] | None = None
    ) -> Array:
        """[B, n] previous state, [B, 3n] projected input -> [B, n] new state.

        ``products``: ``u_gates`` and ``u_candidate`` as ``recurrent_scan`` gives them to a step;
        by default the layers themselves.
        """
        products = products or {"u_gates": self.u_gates, "u_candidate": self.u_candidate}
        return gru_step(state, projected_input, products["u_gates"], products["u_candidate"])

    def run(self, projected_inputs: Array, valid: Array, *, reverse: bool = False) -> Array:
        """Runs over [B, T, 3n] inputs from a zero state; padding steps keep the state.

        Keeping the state over padding makes the backward direction start at each sentence's
        own last word, not at the end of the padded batch, and leaves the forward direction's
        state at the last real word in the last position.

        Returns:
          [B, T, n] states.
        """
        batch = projected_inputs.shape[0]
        hidden_size = projected_inputs.shape[-1] // 3

        def body(products, state, inputs):
            projected, is_valid = inputs
            new_state = self.step(state, projected, products)
            new_state = jnp.where(is_valid[:, None], new_state, state)
            return new_state, new_state

        initial = jnp.zeros((batch, hidden_size), projected_inputs.dtype)
        time_major = (jnp.swapaxes(projected_inputs, 0, 1), jnp.swapaxes(valid, 0, 1))
        _, states = recurrent_scan(
            body,
            self.recurrent_weights(),
            initial,
            time_major,
            reverse=reverse,
            unroll=self.scan_unroll,
            weight_gradients_after_loop=self.weight_gradients_after_loop,
        )
        return jnp.swapaxes(states, 0, 1)


def run_both_directions(
    forward: GRU, backward: GRU, x: Array, valid: Array, *, unroll: int = 1
) -> tuple[Array, Array]:
    """Both encoder directions in one loop: ``forward.run`` and ``backward.run(reverse=True)``.

    The backward direction reads the source flipped, so that both take their step ``t`` in
    iteration ``t``. Each iteration computes the two recurrent products of both directions as
    two batched products, their weights stacked [2, n, ...] once outside the loop. The loop
    then runs S iterations instead of two loops of S each, and each iteration should launch
    about as many kernels as one direction's did: an accelerator pays for a recurrence by the
    iteration. On a CPU it is a few per cent slower than two loops (docs/benchmarks.md).

    Args:
      x: [B, S, m] source embeddings.
      valid: [B, S], False at padding (each direction keeps its state there).

    Returns:
      ([B, S, n], [B, S, n]): the forward and the backward states, in source order.
    """
    projected = jnp.stack(
        [forward.input_projection(x), jnp.flip(backward.input_projection(x), axis=1)]
    )  # [2, B, S, 3n]
    dtype = projected.dtype
    both_valid = jnp.stack([valid, jnp.flip(valid, axis=1)])  # [2, B, S]
    one, other = forward.recurrent_weights(), backward.recurrent_weights()
    weights = {name: jnp.stack([one[name], other[name]]) for name in one}  # [2, n, 2n], [2, n, n]

    def per_direction(states: Array, kernels: Array) -> Array:
        """[2, ..., n] states (a step's [2, B, n]), [2, n, k] kernels -> [2, ..., k]: one
        product of all rows per direction."""
        rows = states.reshape(2, -1, states.shape[-1])
        return jnp.einsum("drn,dnk->drk", rows, kernels).reshape(*states.shape[:-1], -1)

    def body(products, state, inputs):  # state: [2, B, n]
        step_input, is_valid = inputs  # [2, B, 3n], [2, B]
        new_state = gru_step(state, step_input, products["u_gates"], products["u_candidate"])
        new_state = jnp.where(is_valid[..., None], new_state, state)
        return new_state, new_state

    hidden_size = weights["u_candidate"].shape[-1]
    initial = jnp.zeros((2, x.shape[0], hidden_size), dtype)
    time_major = (jnp.moveaxis(projected, 2, 0), jnp.moveaxis(both_valid, 2, 0))
    _, states = recurrent_scan(
        body,
        weights,
        initial,
        time_major,
        multiply={name: per_direction for name in weights},
        unroll=unroll,
        weight_gradients_after_loop=forward.weight_gradients_after_loop,
    )  # [S, 2, B, n]
    states = jnp.moveaxis(states, 0, 2)  # [2, B, S, n]
    return states[0], jnp.flip(states[1], axis=1)


class RNNSearch(EncoderDecoder):
    """RNNsearch (or, with ``attention="none"``, RNNencdec) behind the ``Seq2SeqModel`` contract."""

    def __init__(self, config: RNNSearchConfig, *, rngs: nnx.Rngs):
        self.config = config
        dtype = jnp.dtype(config.dtype)
        self.dtype = dtype
        m, n, n_dec = config.embedding_size, config.encoder_hidden_size, config.decoder_hidden_size
        init = INITIALIZERS[config.init]()

        def linear(d_in, d_out, names, use_bias=True):
            return Linear(
                d_in,
                d_out,
                names=names,
                use_bias=use_bias,
                kernel_init=init.weights,
                dtype=dtype,
                rngs=rngs,
            )

        def embedding(vocab_size):
            return nnx.Embed(
                vocab_size,
                m,
                embedding_init=init.embeddings,
                embedding_metadata=metadata("vocab", "embed"),
                rngs=rngs,
            )

        states = ("hidden", "hidden")

        self.target_embedding = embedding(config.target_vocab_size)
        self.source_embedding = (
            self.target_embedding
            if config.share_embeddings
            else embedding(config.source_vocab_size)
        )
        loop = {
            "scan_unroll": config.scan_unroll,
            "weight_gradients_after_loop": config.weight_gradients_after_loop,
        }
        self.forward_encoder = GRU(m, n, dtype, initializers=init, rngs=rngs, **loop)
        self.backward_encoder = GRU(m, n, dtype, initializers=init, rngs=rngs, **loop)
        if config.attention == "none":
            self.summary = linear(2 * n, 2 * n, states, use_bias=False)  # V: h_N -> c
            self.initial_state = linear(2 * n, n_dec, states)  # V': c -> s_0
            self.attention = None
        else:
            self.initial_state = linear(n, n_dec, states)  # W_s: backward h_1 -> s_0
            additive = config.attention == "additive"
            self.attention = AlignmentAttention(
                n_dec,
                2 * n,
                scoring=config.attention,
                hidden_size=config.alignment_size,
                kernel_init=init.alignment if additive else init.weights,  # general: "any other"
                vector_init=init.alignment_vector,
                dtype=dtype,
                rngs=rngs,
            )
        self.decoder = GRU(m, n_dec, dtype, initializers=init, rngs=rngs, **loop)  # in: E y_{i-1}
        self.context_to_gates = linear(  # C, C_z, C_r
            2 * n, 3 * n_dec, ("hidden", "gates"), use_bias=False
        )
        self.u_o = linear(n_dec, 2 * config.maxout_size, ("hidden", "maxout"))
        self.v_o = linear(m, 2 * config.maxout_size, ("embed", "maxout"), use_bias=False)
        self.c_o = linear(2 * n, 2 * config.maxout_size, ("hidden", "maxout"), use_bias=False)
        self.w_o = linear(config.maxout_size, config.target_vocab_size, ("maxout", "vocab"))

    # -- the contract ----------------------------------------------------------------------

    def encode(
        self, source: Array, *, source_segments: Array | None = None, dropout: Dropout | None = None
    ) -> Encoded:
        """The source as the decoder reads it, and ``s_0``.

        RNNsearch: annotations ``h_j`` [B, S, 2n], their projections for the scorer, the mask.
        RNNencdec: only the fixed context ``c`` [B, 2n]; nothing else of the source remains.
        """
        if source_segments is not None:
            raise ValueError("RNNsearch does not support packed examples; set data.pack=False")
        valid = source != PAD_ID  # [B, S]
        x = apply_dropout(
            lookup(self.source_embedding, source).astype(self.dtype),
            self.config.dropout_rate,
            dropout,
        )
        x = constrain(x, "batch", "length", "activation_embed")  # [B, S, m]
        if self.config.joint_encoder_loop:
            forward, backward = run_both_directions(
                self.forward_encoder,
                self.backward_encoder,
                x,
                valid,
                unroll=self.config.scan_unroll,
            )
        else:
            forward = self.forward_encoder.run(self.forward_encoder.input_projection(x), valid)
            backward = self.backward_encoder.run(
                self.backward_encoder.input_projection(x), valid, reverse=True
            )  # [B, S, n] each
        # Laid out by sentence here, where the states leave their loops: so is the sum of their
        # gradients (from the annotations and from s_0) that the backward loops read.
        forward = constrain(forward, "batch", "length", None)
        backward = constrain(backward, "batch", "length", None)
        if self.attention is None:
            # h_N: the forward state after the last real word (kept over padding) and the
            # backward state after the first.
            last_states = jnp.concatenate([forward[:, -1], backward[:, 0]], axis=-1)  # [B, 2n]
            context = fixed_context(self.summary(last_states))  # c: [B, 2n]
            return {"context": context, "initial_state": jnp.tanh(self.initial_state(context))}
        annotations = jnp.concatenate([forward, backward], axis=-1)  # [B, S, 2n]
        annotations = constrain(annotations, "batch", "length", None)
        return {
            "annotations": annotations,
            "keys": self.attention.precompute_keys(annotations),  # U_a h_j, once per sentence
            "valid": valid,
            "initial_state": jnp.tanh(self.initial_state(backward[:, 0])),  # s_0
        }

    def start_decoding(self, encoded: Encoded, max_length: int) -> tuple[Encoded, Cache]:
        """The recurrent state is the whole cache; ``max_length`` is not needed.

        With attention, the decoder reads a context only through two linear maps, ``C c_i``
        (into the GRU's gates) and ``C_o c_i`` (into the deep output), and ``c_i`` is a
        weighted sum of the annotations, so ``C c_i = sum_j alpha_ij C h_j`` (and likewise for
        ``C_o``). ``encoded`` for decoding also holds those projected annotations, computed here
        once per sentence: a step then weights them directly instead of projecting every
        hypothesis's context (S rows once, rather than N rows at every step of a beam search).
        """
        del max_length
        cache = {"state": encoded["initial_state"]}
        if self.attention is None:
            return encoded, cache
        annotations = encoded["annotations"]  # [B, S, 2n]
        projected = jnp.concatenate(
            [self.context_to_gates(annotations), self.c_o(annotations)], axis=-1
        )  # [B, S, 3n_dec + 2l]: [C h_j, C_o h_j]
        return {**encoded, "projected_annotations": projected}, cache

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
        """Logits [B, T, V] for inputs ``y_0 .. y_{T-1}``, starting from ``s_0`` or the cache
        (with ``project=False``, the maxout outputs ``t_i`` [B, T, l] that ``W_o`` projects).

        ``aux["cross_attention"]`` ([B, 1 layer, 1 head, T, S], as the Transformer's) is given
        when asked for and the model attends; RNNencdec has no attention to give.
        """
        if target_segments is not None:
            raise ValueError("RNNsearch does not support packed examples; set data.pack=False")
        state = encoded["initial_state"] if cache is None else cache["state"]
        embedded = apply_dropout(
            lookup(self.target_embedding, target_inputs).astype(self.dtype),
            self.config.dropout_rate,
            dropout,
        )  # E y_{i-1}: [B, T, m]
        embedded = constrain(embedded, "batch", "length", "activation_embed")
        projected = self.decoder.input_projection(embedded)  # [B, T, 3n_dec]
        if self.attention is None:
            final_state, previous_states, output_contexts = self._run_with_fixed_context(
                encoded, state, projected
            )
            weights = None
        else:
            final_state, previous_states, output_contexts, weights = self._run_with_attention(
                encoded, state, projected
            )
        t = self._deep_output(previous_states, embedded, output_contexts, dropout)
        aux = {}
        if return_attention and weights is not None:
            aux["cross_attention"] = weights[:, None, None]  # [B, 1, 1, T, S]
        new_cache = None if cache is None else {"state": final_state}
        if not project:
            return t, aux, new_cache
        # A beam step (one token, from a cache) reads its logits at once: the bias goes into
        # the product rather than a pass of its own over them.
        output = self.output_layer()._replace(bias_in_product=cache is not None)
        return output(t), aux, new_cache

    def _run_with_attention(self, encoded: Encoded, state: Array, projected: Array):
        """The decoder GRU with a fresh ``c_i`` at every step (Appendix A.2.2).

        From ``encode`` the step weights the annotations ``h_j`` and projects ``c_i``; from
        ``start_decoding`` it weights their projections ``[C h_j, C_o h_j]`` (the same sums).

        Returns:
          (s_T [B, n_dec], s_{i-1} [B, T, n_dec], C_o c_i [B, T, 2l], alpha [B, T, S]).
        """
        projected_once = "projected_annotations" in encoded
        values = encoded["projected_annotations" if projected_once else "annotations"]
        to_gates = projected.shape[-1]  # 3n_dec: the first columns of a projected context

        loop_weights = {
            **self.decoder.recurrent_weights(),
            **self.attention.loop_weights(self.dtype),
        }
        if not projected_once:
            loop_weights["context_to_gates"] = gathered(self.context_to_gates.kernel, self.dtype)

        def body(products, previous_state, projected_input):
            context, weights = self.attention(
                previous_state,
                encoded["keys"],
                values,
                encoded["valid"],
                products=products,
            )  # c_i, or [C c_i, C_o c_i]
            if projected_once:
                gates_context, context = context[:, :to_gates], context[:, to_gates:]
            else:
                gates_context = products["context_to_gates"](context)
            new_state = self.decoder.step(previous_state, projected_input + gates_context, products)
            return new_state, (previous_state, context, weights)

        final_state, (previous_states, contexts, weights) = self._recurrence(
            body,
            loop_weights,
            state,
            projected,
            multiply=AlignmentAttention.LOOP_MULTIPLY,
            per_row=AlignmentAttention.LOOP_PER_ROW,
        )  # time-major: [T, B, ...]
        contexts = jnp.swapaxes(contexts, 0, 1)
        return (
            final_state,
            jnp.swapaxes(previous_states, 0, 1),
            contexts if projected_once else self.c_o(contexts),
            jnp.swapaxes(weights, 0, 1),
        )

    def _run_with_fixed_context(self, encoded: Encoded, state: Array, projected: Array):
        """The decoder GRU with the one context ``c`` at every step (Cho et al. 2014, A.1).

        Returns:
          (s_T [B, n_dec], s_{i-1} [B, T, n_dec], C_o c [B, 1, 2l] for every step).
        """
        context = encoded["context"]  # [B, 2n]
        hypotheses = state.shape[0] // context.shape[0]  # N per sentence in a beam search
        context = jnp.repeat(context, hypotheses, axis=0)  # [B * N, 2n]
        gates_inputs = projected + self.context_to_gates(context)[:, None]  # [B, T, 3n_dec]

        def body(products, previous_state, gates_input):
            return self.decoder.step(previous_state, gates_input, products), previous_state

        final_state, previous_states = self._recurrence(
            body, self.decoder.recurrent_weights(), state, gates_inputs
        )
        return final_state, jnp.swapaxes(previous_states, 0, 1), self.c_o(context)[:, None]

    def _recurrence(self, body, weights: dict[str, Array], state: Array, inputs: Array, **products):
        """The decoder's loop (``recurrent_scan``, with ``products``: its ``multiply`` and
        ``per_row``) over [B, T, ...] ``inputs``, time-major."""
        return recurrent_scan(
            body,
            weights,
            state,
            jnp.swapaxes(inputs, 0, 1),
            **products,
            unroll=self.config.scan_unroll,
            weight_gradients_after_loop=self.config.weight_gradients_after_loop,
        )

    def _deep_output(self, previous_states, embedded, output_contexts, dropout) -> Array:
        """Appendix A.2.2: ``t~ = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i``, then maxout: ``t``.

        ``output_contexts`` is ``C_o c_i`` [B, T, 2l], already projected.
        """
        t_tilde = self.u_o(previous_states) + self.v_o(embedded) + output_contexts
        t = apply_dropout(maxout(t_tilde), self.config.dropout_rate, dropout)  # [B, T, l]
        return constrain(t, "batch", "length", None)

    def output_layer(self) -> OutputLayer:
        """``W_o`` (Appendix A.2.2): logits ``W_o t_i + b_o`` from the maxout outputs."""
        return OutputLayer(self.w_o.kernel[...], self.w_o.bias[...], dtype=self.dtype)
