"""Both models keep the contract: padding and the future are invisible, caching changes nothing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.models import RNNSearch, RNNSearchConfig, Transformer, TransformerConfig
from seq2seq.models.base import (
    EOS_ID,
    PAD_ID,
    Dropout,
    OutputLayer,
    shift_right,
)
from seq2seq.models.rnnsearch import GRU, maxout, paper_initializers
from seq2seq.models.transformer import positions_from_segments, sinusoidal_positions
from tests.conftest import dot_operand_dtypes

VOCAB = 40


def _transformer(norm="post", **overrides):
    config = TransformerConfig(
        VOCAB,
        VOCAB,
        d_model=32,
        d_ff=64,
        num_heads=4,
        d_k=8,
        d_v=8,
        encoder_layers=2,
        decoder_layers=2,
        norm=norm,
        **overrides,
    )
    return Transformer(config, rngs=nnx.Rngs(0))


def _rnnsearch(attention="additive", **overrides):
    config = RNNSearchConfig(
        VOCAB,
        VOCAB,
        embedding_size=16,
        encoder_hidden_size=12,
        decoder_hidden_size=24,
        alignment_size=10,
        maxout_size=8,
        attention=attention,
        **overrides,
    )
    model = RNNSearch(config, rngs=nnx.Rngs(0))
    if attention == "additive":  # v_a starts at zero, which would make attention uniform
        model.attention.v_a[...] = jax.random.normal(jax.random.key(5), model.attention.v_a.shape)
    return model


MODELS = {
    "transformer": _transformer,
    "transformer_pre_ln": lambda: _transformer("pre"),
    "rnnsearch": _rnnsearch,
    "rnnsearch_dot": lambda: _rnnsearch("dot"),
    "rnnsearch_general": lambda: _rnnsearch("general"),
    "rnnencdec": lambda: _rnnsearch("none"),
}


@pytest.fixture(params=list(MODELS), scope="module")
def model(request):
    return MODELS[request.param]()


def assert_close(actual, expected):
    """Equal up to float32 rounding, relative to the logits' scale (RNNsearch starts tiny)."""
    scale = float(jnp.abs(expected).max())
    np.testing.assert_allclose(actual, expected, atol=1e-5 * scale, rtol=1e-4)


def _tokens(key, batch, length):
    return jax.random.randint(jax.random.key(key), (batch, length), 4, VOCAB)


def test_padding_does_not_change_outputs(model):
    source = _tokens(0, 2, 6).at[:, -1].set(EOS_ID)
    target = _tokens(1, 2, 5).at[:, -1].set(EOS_ID)
    logits, _ = model(source, shift_right(target))
    padded_source = jnp.pad(source, ((0, 0), (0, 4)), constant_values=PAD_ID)
    padded_target = jnp.pad(target, ((0, 0), (0, 3)), constant_values=PAD_ID)
    padded_logits, _ = model(padded_source, shift_right(padded_target))
    assert_close(padded_logits[:, :5], logits)


def test_future_target_tokens_are_invisible(model):
    source = _tokens(0, 2, 6)
    target = _tokens(1, 2, 7)
    changed = target.at[:, 4:].set(_tokens(2, 2, 3))
    logits, _ = model(source, shift_right(target))
    changed_logits, _ = model(source, shift_right(changed))
    # Decoder input t is target t-1: positions 0..4 see only targets 0..3, which are unchanged.
    assert_close(changed_logits[:, :5], logits[:, :5])
    change = float(jnp.abs(changed_logits[:, 5:] - logits[:, 5:]).max())
    assert change > 1e-2 * float(jnp.abs(logits).max())


def test_cached_incremental_decoding_equals_full_pass(model):
    source = _tokens(0, 3, 6).at[2, 3:].set(PAD_ID)
    target_inputs = shift_right(_tokens(1, 3, 7))
    full_logits, _ = model(source, target_inputs)
    encoded, cache = model.start_decoding(model.encode(source), 7)
    steps = []
    for t in range(7):
        logits, _, cache = model.decode(encoded, target_inputs[:, t : t + 1], cache=cache)
        steps.append(logits)
    assert_close(jnp.concatenate(steps, axis=1), full_logits)


def test_cross_attention_weights_are_a_distribution_over_real_source(model):
    source = _tokens(0, 2, 6).at[1, 3:].set(PAD_ID)
    _, aux = model(source, shift_right(_tokens(1, 2, 4)), return_attention=True)
    if getattr(model, "attention", True) is None:  # RNNencdec: no weights, rather than fake ones
        assert "cross_attention" not in aux
        return
    weights = aux["cross_attention"]  # [B, L, H, T, S]
    assert weights.shape[0] == 2 and weights.shape[-2:] == (4, 6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    assert float(weights[1, ..., 3:].max()) == 0.0


def test_shift_right_restarts_each_packed_example():
    targets = jnp.array([[5, 6, EOS_ID, 7, EOS_ID, 0]])
    segments = jnp.array([[1, 1, 1, 2, 2, 0]])
    np.testing.assert_array_equal(shift_right(targets, segments), [[2, 5, 6, 2, 7, 0]])
    np.testing.assert_array_equal(positions_from_segments(segments), [[0, 1, 2, 0, 1, 0]])


def test_transformer_shares_one_embedding_three_ways():
    model = _transformer()
    assert model.source_embedding is model.target_embedding
    assert not hasattr(model, "output_projection")


# -- equations against numbers worked out by hand ------------------------------------------------


def _set_recurrent_weights(gru: GRU, u_z, u_r, u) -> None:
    """Sets the paper's U_z, U_r, U ([n, n], acting on column vectors: ``U_z s``)."""
    # nnx.Linear computes ``s @ kernel``: the kernel of ``U s`` is U^T.
    gru.u_gates.kernel[...] = jnp.asarray(np.concatenate([u_z.T, u_r.T], axis=1), jnp.float32)
    gru.u_candidate.kernel[...] = jnp.asarray(u.T, jnp.float32)


def test_gru_step_with_one_unit_by_hand():
    # s = 1, inputs W x = 0, U_z = U_r = 0, U = 2:
    #   z = sigmoid(0) = 0.5, r = sigmoid(0) = 0.5, s~ = tanh(2 * (0.5 * 1)) = tanh(1)
    #   s_new = (1 - z) s + z s~ = 0.5 + 0.5 tanh(1) = 0.8807970779778824
    gru = GRU(3, 1, jnp.float32, initializers=paper_initializers(), rngs=nnx.Rngs(0))
    _set_recurrent_weights(gru, np.zeros((1, 1)), np.zeros((1, 1)), np.full((1, 1), 2.0))
    new_state = gru.step(jnp.ones((1, 1)), jnp.zeros((1, 3)))
    np.testing.assert_allclose(new_state, [[0.8807970779778824]], rtol=1e-6)


def test_gru_step_follows_appendix_a_gate_by_gate():
    """Bahdanau et al. 2015, Appendix A.1.1, with U matrices a transpose would change."""
    s = np.array([0.5, -1.0])
    x_z, x_r, x_candidate = np.array([0.2, -0.1]), np.array([0.0, 0.3]), np.array([0.4, -0.2])
    u_z = np.array([[1.0, 2.0], [0.0, -1.0]])
    u_r = np.array([[0.0, -0.5], [1.5, 0.0]])
    u = np.array([[0.5, 1.0], [-2.0, 0.0]])
    # U_z s = [0.5 - 2, 1] = [-1.5, 1];  U_r s = [0.5, 0.75]
    z = 1 / (1 + np.exp(-(x_z + np.array([-1.5, 1.0]))))
    r = 1 / (1 + np.exp(-(x_r + np.array([0.5, 0.75]))))
    candidate = np.tanh(x_candidate + u @ (r * s))
    expected = (1 - z) * s + z * candidate  # the update gate z weighs the new candidate
    gru = GRU(4, 2, jnp.float32, initializers=paper_initializers(), rngs=nnx.Rngs(0))
    _set_recurrent_weights(gru, u_z, u_r, u)
    projected = np.concatenate([x_z, x_r, x_candidate])[None]  # [W_z x, W_r x, W x]
    new_state = gru.step(jnp.asarray(s[None], jnp.float32), jnp.asarray(projected, jnp.float32))
    np.testing.assert_allclose(new_state[0], expected, rtol=1e-5)
    # A GRU that swapped the roles of z and 1 - z would move s toward s~ by the other weight:
    assert np.abs((z * s + (1 - z) * candidate) - expected).max() > 0.05


def test_maxout_takes_the_larger_of_each_adjacent_pair():
    t_tilde = jnp.array([[1.0, 5.0, -2.0, -3.0, 0.5, 0.25]])
    # pairs (1, 5), (-2, -3), (0.5, 0.25); pairing the halves instead would give [1, 5, 0.5]
    np.testing.assert_array_equal(maxout(t_tilde), [[5.0, -2.0, 0.5]])


def test_rnnsearch_deep_output_is_a_maxout_of_its_three_terms():
    # With U_o, V_o, C_o zero, t~ = U_o's bias b for every position; with W_o reading t out
    # unchanged into the first l logits, those logits are maxout(b). For b = 0, -1, 2, -3, ...
    # each pair's larger piece is the even one: t = 0, 2, 4, ...
    model = _rnnsearch()
    l = model.config.maxout_size
    for layer in (model.u_o, model.v_o, model.c_o):
        layer.kernel[...] = jnp.zeros_like(layer.kernel[...])
    model.u_o.bias[...] = jnp.arange(2 * l, dtype=jnp.float32) * jnp.tile(jnp.array([1.0, -1.0]), l)
    model.w_o.kernel[...] = jnp.eye(l, VOCAB)
    model.w_o.bias[...] = jnp.zeros(VOCAB)
    logits, _ = model(_tokens(0, 2, 5), shift_right(_tokens(1, 2, 3)))
    expected = np.broadcast_to(np.arange(0.0, 2 * l, 2), (2, 3, l))
    np.testing.assert_allclose(logits[..., :l], expected, atol=1e-6)


def test_sinusoidal_encodings_are_section_3_5_by_hand():
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). At d = 4
    # the second pair has 10000^(2/4) = 100: PE(pos, 2) = sin(pos / 100), PE(pos, 3) = cos(...).
    encodings = np.asarray(sinusoidal_positions(jnp.array([[0, 1, 2]]), 4))[0]
    expected = [
        [0.0, 1.0, 0.0, 1.0],  # pos 0
        [0.8414709848078965, 0.5403023058681398, 0.009999833334166664, 0.9999500004166653],
        [0.9092974268256817, -0.4161468365471424, 0.01999866669333308, 0.9998000066665778],
    ]
    np.testing.assert_allclose(encodings, expected, rtol=1e-6, atol=1e-7)
    wide = np.asarray(sinusoidal_positions(jnp.array([[1]]), 512))[0, 0]
    assert wide[0] == pytest.approx(np.sin(1.0)) and wide[1] == pytest.approx(np.cos(1.0))
    # the last pair (2i = 510) has wavelength 2 pi 10000^(510/512): almost constant in pos
    assert wide[510] == pytest.approx(np.sin(1 / 10000 ** (510 / 512)), rel=1e-5)


# -- scan over layers -----------------------------------------------------------------------


def _stacked_transformer(scan: bool, layers: int = 3):
    config = TransformerConfig(
        VOCAB, VOCAB, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8, norm="pre",
        encoder_layers=layers, decoder_layers=layers, scan_layers=scan,
    )  # fmt: skip
    return Transformer(config, rngs=nnx.Rngs(0))


def _loss_and_grads(model, source, target, dropout_key=None):
    def loss(model):
        dropout = None if dropout_key is None else Dropout(dropout_key)
        logits, aux = model(source, shift_right(target), dropout=dropout, return_attention=True)
        log_probs = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(log_probs, target[..., None], -1).mean(), aux

    (value, aux), grads = nnx.value_and_grad(loss, has_aux=True)(model)
    return value, aux["cross_attention"], nnx.state(grads, nnx.Param)


def test_scanned_layers_compute_what_unrolled_layers_compute():
    unrolled, scanned = _stacked_transformer(scan=False), _stacked_transformer(scan=True)
    params = nnx.state(unrolled, nnx.Param)
    # The same parameter tree, so one checkpoint restores into either.
    assert jax.tree.structure(nnx.state(scanned, nnx.Param)) == jax.tree.structure(params)
    source, target = _tokens(0, 2, 6).at[1, 4:].set(PAD_ID), _tokens(1, 2, 5)
    loss, weights, grads = _loss_and_grads(unrolled, source, target)
    scanned_loss, scanned_weights, scanned_grads = _loss_and_grads(scanned, source, target)
    np.testing.assert_allclose(scanned_loss, loss, rtol=1e-6)
    assert scanned_weights.shape == weights.shape == (2, 3, 4, 5, 6)  # [B, L, H, T, S]
    np.testing.assert_allclose(scanned_weights, weights, atol=1e-6)
    scanned_by_path = dict(jax.tree.leaves_with_path(scanned_grads))
    for path, grad in jax.tree.leaves_with_path(grads):
        name = jax.tree_util.keystr(path)
        np.testing.assert_allclose(scanned_by_path[path], grad, atol=1e-6, err_msg=name)
    # With dropout every layer draws its own mask: the loss moves, the gradient stays finite.
    dropout_loss, _, dropout_grads = _loss_and_grads(
        scanned, source, target, dropout_key=jax.random.key(3)
    )
    assert abs(float(dropout_loss) - float(loss)) > 1e-4
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(dropout_grads))


def test_scanned_program_does_not_grow_with_depth():
    source, target = _tokens(0, 2, 6), _tokens(1, 2, 5)

    def equations(scan, layers):
        model = _stacked_transformer(scan, layers)
        graphdef, params = nnx.split(model)

        def loss(params):
            logits, _ = nnx.merge(graphdef, params)(source, shift_right(target))
            return logits.sum()

        return len(jax.make_jaxpr(jax.grad(loss))(params).jaxpr.eqns)

    assert equations(scan=False, layers=4) > equations(scan=False, layers=2)
    # Scanned, one program whatever the depth (the parameters are stacked by one op each).
    assert equations(scan=True, layers=4) == equations(scan=True, layers=2)


@pytest.mark.parametrize(
    "build",
    [
        lambda: _transformer("pre", dtype="bfloat16"),
        lambda: _transformer(dtype="bfloat16", share_embeddings=False, tie_output=False),
        lambda: _rnnsearch(dtype="bfloat16"),
    ],
    ids=["transformer_tied", "transformer_untied", "rnnsearch"],
)
def test_bfloat16_models_multiply_in_bfloat16_everywhere_and_give_float32_logits(build):
    model = build()
    source = jnp.array([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID]])
    target = jnp.array([[10, 11, EOS_ID], [12, EOS_ID, PAD_ID]])

    def logits(source, target):
        return model(source, shift_right(target))[0]

    # Every matrix product, the pre-softmax projection included, has bfloat16 operands (each
    # accumulates in float32); a float32 parameter left uncast would show as a mixed pair.
    assert dot_operand_dtypes(logits, source, target) == {("bfloat16", "bfloat16")}
    assert logits(source, target).dtype == jnp.float32
    assert model.output_layer().dtype == jnp.bfloat16


@pytest.mark.parametrize("vocab_first", [True, False])
def test_output_layer_with_the_bias_in_the_product_gives_the_same_logits(vocab_first):
    rng = np.random.default_rng(3)
    features = rng.normal(size=(2, 3, 5)).astype(np.float32)
    kernel = rng.normal(size=(5, 7)).astype(np.float32)  # [D, V]
    bias = rng.normal(size=(7,)).astype(np.float32)
    weights = kernel.T if vocab_first else kernel
    expected = features @ kernel + bias  # numpy, float32
    for in_product in (False, True):
        output = OutputLayer(jnp.asarray(weights), jnp.asarray(bias), vocab_first)
        logits = output._replace(bias_in_product=in_product)(jnp.asarray(features))
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
