"""Parameter counts match the formulas in docs/benchmarks.md; FLOPs scale as they must."""

import pytest

from seq2seq.bench.summary import parameter_counts, train_flops_per_target_token
from seq2seq.config import load_config_file
from tests.conftest import REPO


def _transformer_formula(vocab, d, f, layers):
    encoder_layer = 4 * d * d + (2 * d * f + f + d) + 2 * 2 * d
    decoder_layer = 8 * d * d + (2 * d * f + f + d) + 3 * 2 * d
    return vocab * d + layers * (encoder_layer + decoder_layer)


@pytest.mark.parametrize(
    ("config_name", "d_model", "d_ff", "paper_millions"),
    [
        ("wmt14_ende_transformer_base", 512, 2048, 65),
        ("wmt14_ende_transformer_big", 1024, 4096, 213),
    ],
)
def test_transformer_counts_follow_the_formula_and_the_paper(
    config_name, d_model, d_ff, paper_millions
):
    config = load_config_file(REPO / "configs" / f"{config_name}.py")
    assert config.data.vocab_size == 37000
    params, by_module = parameter_counts(config)
    assert params == _transformer_formula(37000, d_model, d_ff, 6)
    assert abs(params / (paper_millions * 1e6) - 1) < 0.05
    assert by_module["source_embedding"] == 37000 * d_model  # shared and tied: counted once


def test_rnnsearch_count_follows_appendix_a():
    config = load_config_file(REPO / "configs" / "wmt14_enfr_rnnsearch50.py")
    vocab, m, n, a, l = 30000, 620, 1000, 1000, 500
    gru = lambda d_in: d_in * 3 * n + 3 * n + n * 3 * n  # W (with bias) and U  # noqa: E731
    expected = (
        2 * vocab * m  # source and target embeddings
        + 2 * gru(m)  # bidirectional encoder
        + (n * n + n)  # W_s for s_0
        + (n * a + 2 * n * a + a)  # W_a, U_a, v_a
        + gru(m)
        + 2 * n * 3 * n  # decoder GRU and C (context to gates)
        + (n * 2 * l + 2 * l)
        + m * 2 * l
        + 2 * n * 2 * l  # U_o (bias), V_o, C_o
        + (l * vocab + vocab)  # W_o
    )
    assert parameter_counts(config)[0] == expected


def test_flops_grow_with_model_width_and_sentence_length():
    config = load_config_file(REPO / "configs" / "wmt14_ende_transformer_base.py")
    base = train_flops_per_target_token(config, 30, 30)
    # Roughly 6 x parameters (2 per multiply-add, 3 passes) plus attention.
    assert 6 * 63e6 < base < 6 * 63e6 * 1.2
    assert train_flops_per_target_token(config, 60, 60) > base  # attention is quadratic
