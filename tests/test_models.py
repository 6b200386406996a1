"""Both models keep the contract: padding and the future are invisible, caching changes nothing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.models import RNNSearch, RNNSearchConfig, Transformer, TransformerConfig
from seq2seq.models.base import EOS_ID, PAD_ID, positions_from_segments, shift_right

VOCAB = 40


def _transformer(norm="post"):
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
    )
    return Transformer(config, rngs=nnx.Rngs(0))


def _rnnsearch(attention="additive"):
    config = RNNSearchConfig(
        VOCAB,
        VOCAB,
        embedding_size=16,
        encoder_hidden_size=12,
        decoder_hidden_size=24,
        alignment_size=10,
        maxout_size=8,
        attention=attention,
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
    encoded = model.encode(source)
    cache = model.init_cache(encoded, 7)
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
