"""Analytic FLOPs of one sentence pair, one formula per model family.

Every matrix product counts two FLOPs per multiply-add: projections, attention scores and the
weighted sums of values included, element-wise work (softmax, layer norm, activations) left out.
``source_length`` and ``target_length`` may be NumPy arrays (one entry per sentence pair): the
formulas are polynomials in them, so a whole batch is counted in one call. Training costs
``TRAIN_FORWARD_MULTIPLE`` forward passes (the backward pass costs about twice the forward).
"""

from __future__ import annotations

import ml_collections

TRAIN_FORWARD_MULTIPLE = 3


def transformer_forward_flops(
    t: ml_collections.ConfigDict, vocab: int, source_length, target_length
):
    """Forward FLOPs of the Transformer (Vaswani et al. 2017) on one sentence pair."""
    s, length = source_length, target_length
    d, h, k, e, f = t.d_model, t.num_heads, t.d_k, t.d_v, t.d_ff
    projections = 2 * d * h * (2 * k + e) + 2 * h * e * d  # W^Q, W^K, W^V and W^O, per token

    def attention(queries, keys):  # QK^T and the weighted sum of V
        return 2 * queries * keys * h * (k + e)

    ffn = 2 * 2 * d * f  # Eq. 2, per token
    encoder = t.encoder_layers * (s * (projections + ffn) + attention(s, s))
    cross = length * (2 * d * h * k + 2 * h * e * d) + s * 2 * d * h * (k + e)  # K, V: per source
    decoder = t.decoder_layers * (
        length * (projections + ffn) + attention(length, length) + cross + attention(length, s)
    )
    return encoder + decoder + length * 2 * d * vocab  # pre-softmax projection


def rnnsearch_forward_flops(r: ml_collections.ConfigDict, vocab: int, source_length, target_length):
    """Forward FLOPs of RNNsearch (Bahdanau et al. 2015, Appendix A) on one sentence pair."""
    s, length = source_length, target_length
    m, n, n_dec, a, l = (
        r.embedding_size,
        r.encoder_hidden_size,
        r.decoder_hidden_size,
        r.alignment_size,
        r.maxout_size,
    )
    encoder = 2 * s * (2 * m * 3 * n + 2 * n * 3 * n)  # two GRU directions
    if r.attention == "none":  # RNNencdec, once per sentence: c = tanh(V h_N), s_0 = tanh(V' c),
        context = 2 * (2 * n) * (2 * n + n_dec + 3 * n_dec + 2 * l)  # and C c, C_o c
        gru = length * 2 * 3 * n_dec * (m + n_dec)  # W E y, U s
        deep_output = length * (2 * (n_dec + m) * 2 * l + 2 * l * vocab)
        return encoder + context + gru + deep_output
    initial_state = 2 * n * n_dec  # s_0 = tanh(W_s backward h_1), once per sentence
    if r.attention == "additive":  # U_a h_j once per sentence; W_a s and v_a^T tanh per step
        keys, query, score = s * 2 * (2 * n) * a, 2 * n_dec * a, 2 * a
    elif r.attention == "general":  # W h_j once per sentence; s . (W h_j) per step
        keys, query, score = s * 2 * (2 * n) * n_dec, 0, 2 * n_dec
    elif r.attention == "dot":  # s . h_j
        keys, query, score = 0, 0, 2 * n_dec
    else:  # a scoring added without its count here would be counted as another's, silently
        raise ValueError(f"no FLOP count for RNNsearch attention {r.attention!r}; add it here")
    attention = length * (query + s * score + s * 2 * (2 * n))  # ... and c_i = sum alpha_ij h_j
    gru = length * 2 * 3 * n_dec * (m + 2 * n + n_dec)  # W E y, C c, U s
    deep_output = length * (2 * (n_dec + m + 2 * n) * 2 * l + 2 * l * vocab)
    return encoder + initial_state + keys + attention + gru + deep_output
