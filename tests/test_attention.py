"""Attention equations against hand computation, and the properties masks must have."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.attention import cpu, layers


def _random(key, *shape):
    return jax.random.normal(jax.random.key(key), shape)


def test_scaled_dot_product_matches_equation_1():
    q, k, v = _random(0, 2, 5, 3, 8), _random(1, 2, 7, 3, 8), _random(2, 2, 7, 3, 4)
    outputs, weights = layers.scaled_dot_product_attention(q, k, v, return_weights=True)
    q_np, k_np, v_np = (np.asarray(x, np.float64) for x in (q, k, v))
    for b in range(2):
        for h in range(3):
            scores = q_np[b, :, h] @ k_np[b, :, h].T / np.sqrt(8)
            expected_w = np.exp(scores - scores.max(-1, keepdims=True))
            expected_w /= expected_w.sum(-1, keepdims=True)
            np.testing.assert_allclose(weights[b, h], expected_w, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(outputs[b, :, h], expected_w @ v_np[b, :, h], atol=1e-5)


def test_attention_of_one_query_over_two_keys_by_hand():
    # d_k = 4, so scores are q . k / 2: q . k_1 = 2 -> 1, q . k_2 = 0 -> 0.
    # weights = [e / (1 + e), 1 / (1 + e)] = [0.7310586, 0.2689414]; without the 1/sqrt(d_k)
    # they would be [0.8807971, 0.1192029].
    q = jnp.array([1.0, 1.0, 0.0, 0.0]).reshape(1, 1, 1, 4)  # [B, T, H, K]
    k = jnp.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]]).reshape(1, 2, 1, 4)
    v = jnp.array([[1.0, 0.0, 0.0], [0.0, 10.0, 1.0]]).reshape(1, 2, 1, 3)  # E = 3
    for fused in (True, False):
        outputs, _ = layers.scaled_dot_product_attention(q, k, v, fused=fused)
        np.testing.assert_allclose(outputs[0, 0, 0], [0.7310586, 2.689414, 0.2689414], rtol=1e-5)
    _, weights = layers.scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(weights[0, 0, 0], [0.7310586, 0.2689414], rtol=1e-5)
    only_second = jnp.array([False, True]).reshape(1, 1, 1, 2)
    for fused in (True, False):
        outputs, _ = layers.scaled_dot_product_attention(q, k, v, only_second, fused=fused)
        np.testing.assert_allclose(outputs[0, 0, 0], [0.0, 10.0, 1.0], atol=1e-6)


def test_fused_and_reference_paths_agree():
    q, k, v = _random(0, 2, 5, 4, 8), _random(1, 2, 9, 4, 8), _random(2, 2, 9, 4, 8)
    valid = jnp.arange(9)[None, :] < jnp.array([[9], [4]])
    mask = layers.padding_mask(jnp.ones((2, 5), bool), valid)
    fused, _ = layers.scaled_dot_product_attention(q, k, v, mask, fused=True)
    reference, _ = layers.scaled_dot_product_attention(q, k, v, mask, fused=False)
    np.testing.assert_allclose(fused, reference, atol=1e-5)


def test_fused_gradients_equal_the_reference_paths():
    """On a CPU the fused path is the equation with a hand-written backward (rowsum(dO * O) for
    the softmax's correction): its gradients must be autodiff's of the reference path, with a
    padded batch, a query whose keys are all masked, and no mask at all."""
    q, k, v = _random(0, 2, 5, 4, 8), _random(1, 2, 9, 4, 8), _random(2, 2, 9, 4, 8)
    cotangent = _random(3, 2, 5, 4, 8)
    valid = jnp.arange(9)[None, :] < jnp.array([[9], [4]])
    mask = layers.padding_mask(jnp.ones((2, 5), bool), valid)
    mask = mask.at[1, :, 2].set(False)  # the second sentence's third query sees no key
    for m in (mask, None):

        def loss(q, k, v, fused, m=m):
            outputs, _ = layers.scaled_dot_product_attention(q, k, v, m, fused=fused)
            return jnp.sum(outputs * cotangent)

        fused = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, True)
        reference = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, False)
        for a, b in zip(fused, reference, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
            assert not bool(jnp.isnan(a).any())


@pytest.mark.parametrize(
    "batch, cores, devices, groups",
    [
        (32, 2, 1, 4),
        (6, 2, 1, 3),
        (7, 2, 1, 1),
        (1, 2, 1, 1),
        (2, 2, 1, 2),
        (64, 16, 1, 8),
        (12, 1, 1, 2),
        (32, 2, 2, 1),  # several devices already share the cores
    ],
)
def test_cpu_attention_groups_are_two_per_core_dividing_the_batch(batch, cores, devices, groups):
    assert cpu.sentence_groups(batch, cores, devices) == groups


def test_grouped_cpu_attention_equals_one_group_values_and_gradients():
    """Split into groups of sentences, the CPU attention computes what it computes in one: a
    per-sentence mask is split with the sentences, a mask shared by all of them is not."""
    q, k, v = _random(0, 6, 5, 4, 8), _random(1, 6, 9, 4, 8), _random(2, 6, 9, 4, 8)
    cotangent = _random(3, 6, 5, 4, 8)
    valid = jnp.arange(9)[None, :] < jnp.array([[9], [4], [1], [9], [7], [2]])
    per_sentence = layers.padding_mask(jnp.ones((6, 5), bool), valid)  # [6, 1, 5, 9]
    shared = jnp.arange(9)[None, None, None, :] <= jnp.arange(5)[None, None, :, None]
    for mask in (per_sentence, shared, None):

        def loss(q, k, v, groups, mask=mask):
            outputs = cpu.grouped_attention(q, k, v, mask, groups)
            return jnp.sum(outputs * cotangent)

        one = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, 1)
        three = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, 3)
        for a, b in zip(jax.tree.leaves(three), jax.tree.leaves(one), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_a_float32_gpu_program_keeps_jax_nn_dot_product_attention(monkeypatch):
    """Traced for an NVIDIA GPU in float32 (which cuDNN's kernel does not take) and lowered for
    CUDA (no GPU needed), the fused path is ``jax.nn.dot_product_attention``'s own program,
    gradient included; the hand-written backward is the CPU's alone."""
    q = _random(0, 2, 5, 4, 8)
    mask = jnp.ones((2, 1, 5, 5), bool)

    def products(attend, platform):
        monkeypatch.setattr(layers, "attention_platform", lambda: platform)
        gradient = jax.jit(jax.grad(lambda q: jnp.sum(attend(q))))
        module = jax.export.export(gradient, platforms=[platform])(q).mlir_module()
        return module.count("stablehlo.dot_general")

    ours = lambda q: layers.scaled_dot_product_attention(q, q, q, mask)[0]  # noqa: E731
    stock = lambda q: jax.nn.dot_product_attention(q, q, q, mask=mask)  # noqa: E731
    assert products(ours, "cuda") == products(stock, "cuda")
    assert products(ours, "cpu") != products(stock, "cpu")


def test_weights_sum_to_one_and_vanish_on_masked_keys():
    scores = _random(0, 2, 3, 4, 6)
    key_valid = jnp.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
    mask = layers.padding_mask(jnp.ones((2, 4), bool), key_valid)
    weights = layers.masked_softmax(scores, mask)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert float(jnp.abs(jnp.where(mask, 0.0, weights)).max()) == 0.0


def test_fully_masked_query_gets_zero_weights_not_nan():
    weights = layers.masked_softmax(_random(0, 1, 1, 2, 3), jnp.zeros((1, 1, 2, 3), bool))
    assert not bool(jnp.isnan(weights).any())
    assert float(jnp.abs(weights).max()) == 0.0


def test_causal_mask_allows_only_the_past():
    mask = np.asarray(layers.causal_mask(4))[0, 0]
    for i in range(4):
        for j in range(4):
            assert mask[i, j] == (j <= i)


def test_segment_mask_keeps_packed_examples_apart():
    segments = jnp.array([[1, 1, 2, 2, 2, 0]])
    mask = np.asarray(layers.segment_mask(segments, segments))[0, 0]
    assert mask[0, 1] and mask[3, 2] and not mask[1, 2] and not mask[2, 0]
    assert not mask[:, 5].any()


def test_additive_score_equals_hand_computation():
    model = layers.AlignmentAttention(6, 10, hidden_size=5, rngs=nnx.Rngs(0))
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
    model = layers.AlignmentAttention(8, 8, scoring=scoring, rngs=nnx.Rngs(0))
    h = _random(1, 2, 5, 8)
    valid = jnp.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)
    _, weights = model(_random(0, 2, 8), model.precompute_keys(h), h, valid)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert float(weights[1, 2:].max()) == 0.0


def test_luong_general_score_by_hand():
    # Luong et al. 2015: score(h_t, h_s) = h_t^T W_a h_s, W_a of shape [query 3, key 2].
    w_a = np.array([[1.0, 0.0], [0.5, 0.0], [0.0, 2.0]])
    q = np.array([1.0, 2.0, 3.0])
    h = np.array([[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]])  # the third key is padding
    # W_a h_1 = [2, 1, 0] -> e_1 = 2 + 2 = 4;  W_a h_2 = [0, 0, 2] -> e_2 = 6
    # alpha = [1, e^2] / (1 + e^2) = [0.1192029, 0.8807971];  c = alpha_1 h_1 + alpha_2 h_2
    model = layers.AlignmentAttention(3, 2, scoring="general", rngs=nnx.Rngs(0))
    model.w_general.kernel[...] = jnp.asarray(w_a.T, jnp.float32)  # Linear: h @ kernel = W_a h
    keys = jnp.asarray(h[None], jnp.float32)
    valid = jnp.array([[True, True, False]])
    context, weights = model(
        jnp.asarray(q[None], jnp.float32), model.precompute_keys(keys), keys, valid
    )
    np.testing.assert_allclose(weights[0], [0.1192029, 0.8807971, 0.0], rtol=1e-5)
    np.testing.assert_allclose(context[0], [0.2384058, 0.8807971], rtol=1e-5)


def test_luong_dot_score_by_hand():
    # score = h_t . h_s: q = [1, 2] against keys [1, 0] and [0, 1] -> e = [1, 2],
    # alpha = [1, e] / (1 + e) = [0.2689414, 0.7310586].
    model = layers.AlignmentAttention(2, 2, scoring="dot", rngs=nnx.Rngs(0))
    keys = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])
    _, weights = model(
        jnp.array([[1.0, 2.0]]), model.precompute_keys(keys), keys, jnp.ones((1, 2), bool)
    )
    np.testing.assert_allclose(weights[0], [0.2689414, 0.7310586], rtol=1e-5)


def test_heads_are_independent():
    mha = layers.MultiHeadAttention(16, 4, 4, 4, rngs=nnx.Rngs(0))
    x = _random(0, 1, 5, 16)
    before = mha.attend(mha.project_query(x), *mha.project_keys_values(x), None)[0]
    heads_before, _ = layers.scaled_dot_product_attention(
        mha.project_query(x), *mha.project_keys_values(x)
    )
    mha.w_query[...] = mha.w_query[...].at[:, 2].multiply(3.0)  # change W_2^Q only
    heads_after, _ = layers.scaled_dot_product_attention(
        mha.project_query(x), *mha.project_keys_values(x)
    )
    changed = np.abs(np.asarray(heads_after - heads_before)).max(axis=(0, 1, 3))
    assert changed[2] > 1e-4
    np.testing.assert_allclose(np.delete(changed, 2), 0.0, atol=1e-6)
    after = mha.attend(mha.project_query(x), *mha.project_keys_values(x), None)[0]
    assert float(jnp.abs(after - before).max()) > 1e-4


def test_folding_a_linear_map_into_w_query_changes_nothing():
    """A linear layer before attention adds nothing: ``(x A) W^Q`` is ``x (A W^Q)``."""
    mha = layers.MultiHeadAttention(8, 2, 4, 4, rngs=nnx.Rngs(0))
    x, memory = _random(0, 1, 3, 8), _random(1, 1, 5, 8)
    a = _random(2, 8, 8)
    with_pre_projection, _ = mha(x @ a, memory)
    mha.w_query[...] = jnp.einsum("de,ehk->dhk", a, mha.w_query[...])
    folded, _ = mha(x, memory)
    np.testing.assert_allclose(folded, with_pre_projection, atol=1e-5)


def test_cross_attention_takes_queries_from_the_decoder_and_keys_from_the_memory():
    mha = layers.MultiHeadAttention(8, 2, 4, 4, rngs=nnx.Rngs(0))
    x, memory = _random(0, 1, 3, 8), _random(1, 1, 5, 8)
    outputs, weights = mha(x, memory, return_weights=True)
    assert weights.shape == (1, 2, 3, 5)  # [B, H, T from the decoder, S from the memory]
    # A query position changes its own output row only ...
    changed_query, _ = mha(x.at[0, 1].set(_random(2, 8)), memory)
    row_change = np.abs(np.asarray(changed_query - outputs)).max(axis=(0, 2))
    assert row_change[1] > 1e-3 and row_change[0] == row_change[2] == 0.0
    # ... while every row reads every memory position.
    changed_memory, _ = mha(x, memory.at[0, 4].set(_random(3, 8)))
    assert np.abs(np.asarray(changed_memory - outputs)).max(axis=(0, 2)).min() > 1e-4
    # Self-attention is the same module given one sequence twice.
    self_outputs, _ = mha(x, x)
    keys, values = mha.project_keys_values(x)
    expected, _ = layers.scaled_dot_product_attention(mha.project_query(x), keys, values)
    np.testing.assert_allclose(
        self_outputs, jnp.einsum("bthe,hed->btd", expected, mha.w_output[...]), atol=1e-5
    )


def test_scaling_keeps_attention_from_saturating_as_width_grows():
    from seq2seq.report.attention_demos import softmax_entropy_by_width

    widths = [4, 64, 1024]
    unscaled = softmax_entropy_by_width(widths, scaled=False)
    scaled = softmax_entropy_by_width(widths, scaled=True)
    assert unscaled[0] > unscaled[1] > unscaled[2]  # collapses onto single keys
    assert unscaled[2] < 0.5
    assert max(scaled) - min(scaled) < 0.2  # the same spread whatever d_k
