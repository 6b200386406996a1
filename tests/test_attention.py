"""Attention equations against hand computation, and the properties masks must have."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq import attention


def _random(key, *shape):
    return jax.random.normal(jax.random.key(key), shape)


def test_scaled_dot_product_matches_equation_1():
    q, k, v = _random(0, 2, 5, 3, 8), _random(1, 2, 7, 3, 8), _random(2, 2, 7, 3, 4)
    outputs, weights = attention.scaled_dot_product_attention(q, k, v, return_weights=True)
    q_np, k_np, v_np = (np.asarray(x, np.float64) for x in (q, k, v))
    for b in range(2):
        for h in range(3):
            scores = q_np[b, :, h] @ k_np[b, :, h].T / np.sqrt(8)
            expected_w = np.exp(scores - scores.max(-1, keepdims=True))
            expected_w /= expected_w.sum(-1, keepdims=True)
            np.testing.assert_allclose(weights[b, h], expected_w, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(outputs[b, :, h], expected_w @ v_np[b, :, h], atol=1e-5)


def test_scores_are_scaled_by_sqrt_dk():
    q, k = _random(0, 1, 4, 2, 16), _random(1, 1, 6, 2, 16)
    ratio = attention.dot_product_scores(q, k) / attention.scaled_dot_product_scores(q, k)
    np.testing.assert_allclose(ratio, 4.0, rtol=1e-5)


def test_fused_and_reference_paths_agree():
    q, k, v = _random(0, 2, 5, 4, 8), _random(1, 2, 9, 4, 8), _random(2, 2, 9, 4, 8)
    valid = jnp.arange(9)[None, :] < jnp.array([[9], [4]])
    mask = attention.padding_mask(jnp.ones((2, 5), bool), valid)
    fused, _ = attention.scaled_dot_product_attention(q, k, v, mask, fused=True)
    reference, _ = attention.scaled_dot_product_attention(q, k, v, mask, fused=False)
    np.testing.assert_allclose(fused, reference, atol=1e-5)


def test_weights_sum_to_one_and_vanish_on_masked_keys():
    scores = _random(0, 2, 3, 4, 6)
    key_valid = jnp.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
    mask = attention.padding_mask(jnp.ones((2, 4), bool), key_valid)
    weights = attention.masked_softmax(scores, mask)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert float(jnp.abs(jnp.where(mask, 0.0, weights)).max()) == 0.0


def test_fully_masked_query_gets_zero_weights_not_nan():
    weights = attention.masked_softmax(_random(0, 1, 1, 2, 3), jnp.zeros((1, 1, 2, 3), bool))
    assert not bool(jnp.isnan(weights).any())
    assert float(jnp.abs(weights).max()) == 0.0


def test_causal_mask_allows_only_the_past():
    mask = np.asarray(attention.causal_mask(4))[0, 0]
    for i in range(4):
        for j in range(4):
            assert mask[i, j] == (j <= i)


def test_segment_mask_keeps_packed_examples_apart():
    segments = jnp.array([[1, 1, 2, 2, 2, 0]])
    mask = np.asarray(attention.segment_mask(segments, segments))[0, 0]
    assert mask[0, 1] and mask[3, 2] and not mask[1, 2] and not mask[2, 0]
    assert not mask[:, 5].any()


def test_additive_score_equals_hand_computation():
    model = attention.AlignmentAttention(6, 10, hidden_size=5, rngs=nnx.Rngs(0))
    model.v_a[...] = _random(3, 5)  # v_a starts at zero (Appendix B.1); make it informative
    s = _random(0, 2, 6)
    h = _random(1, 2, 4, 10)
    valid = jnp.ones((2, 4), bool)
    context, weights = model(s, model.precompute_keys(h), h, valid)
    w_a, u_a, v_a = (
        np.asarray(x, np.float64)
        for x in (model.w_a.kernel[...], model.u_a.kernel[...], model.v_a[...])
    )
    for b in range(2):
        e = np.array([v_a @ np.tanh(s[b] @ w_a + h[b, j] @ u_a) for j in range(4)])
        alpha = np.exp(e) / np.exp(e).sum()
        np.testing.assert_allclose(weights[b], alpha, rtol=1e-5)
        np.testing.assert_allclose(context[b], alpha @ np.asarray(h[b]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("scoring", ["dot", "general"])
def test_luong_scorings_weight_real_keys_only(scoring):
    model = attention.AlignmentAttention(8, 8, scoring=scoring, rngs=nnx.Rngs(0))
    h = _random(1, 2, 5, 8)
    valid = jnp.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)
    _, weights = model(_random(0, 2, 8), model.precompute_keys(h), h, valid)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert float(weights[1, 2:].max()) == 0.0


def test_heads_are_independent():
    mha = attention.MultiHeadAttention(16, 4, 4, 4, rngs=nnx.Rngs(0))
    x = _random(0, 1, 5, 16)
    before = mha.attend(mha.project_query(x), *mha.project_keys_values(x), None)[0]
    heads_before, _ = attention.scaled_dot_product_attention(
        mha.project_query(x), *mha.project_keys_values(x)
    )
    mha.w_query[...] = mha.w_query[...].at[:, 2].multiply(3.0)  # change W_2^Q only
    heads_after, _ = attention.scaled_dot_product_attention(
        mha.project_query(x), *mha.project_keys_values(x)
    )
    changed = np.abs(np.asarray(heads_after - heads_before)).max(axis=(0, 1, 3))
    assert changed[2] > 1e-4
    np.testing.assert_allclose(np.delete(changed, 2), 0.0, atol=1e-6)
    after = mha.attend(mha.project_query(x), *mha.project_keys_values(x), None)[0]
    assert float(jnp.abs(after - before).max()) > 1e-4


def test_folding_a_linear_map_into_w_query_changes_nothing():
    """A linear layer before attention adds nothing: ``(x A) W^Q`` is ``x (A W^Q)``."""
    mha = attention.MultiHeadAttention(8, 2, 4, 4, rngs=nnx.Rngs(0))
    x, memory = _random(0, 1, 3, 8), _random(1, 1, 5, 8)
    a = _random(2, 8, 8)
    with_pre_projection, _ = mha(x @ a, memory)
    mha.w_query[...] = jnp.einsum("de,ehk->dhk", a, mha.w_query[...])
    folded, _ = mha(x, memory)
    np.testing.assert_allclose(folded, with_pre_projection, atol=1e-5)


def test_self_and_cross_attention_are_one_module():
    mha = attention.MultiHeadAttention(8, 2, 4, 4, rngs=nnx.Rngs(0))
    x, memory = _random(0, 1, 3, 8), _random(1, 1, 5, 8)
    _, self_weights = mha(x, x, return_weights=True)
    _, cross_weights = mha(x, memory, return_weights=True)
    assert self_weights.shape == (1, 2, 3, 3)
    assert cross_weights.shape == (1, 2, 3, 5)


def test_scaling_keeps_attention_from_saturating_as_width_grows():
    from seq2seq.report.attention_demos import softmax_entropy_by_width

    widths = [4, 64, 1024]
    unscaled = softmax_entropy_by_width(widths, scaled=False)
    scaled = softmax_entropy_by_width(widths, scaled=True)
    assert unscaled[0] > unscaled[1] > unscaled[2]  # collapses onto single keys
    assert unscaled[2] < 0.5
    assert max(scaled) - min(scaled) < 0.2  # the same spread whatever d_k
