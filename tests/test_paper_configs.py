"""The WMT configs hold the papers' settings (../shared/PAPERS.md), as the papers ran them."""

from __future__ import annotations

import pytest

from seq2seq.config import load_config_file
from tests.conftest import REPO


def _config(name: str):
    return load_config_file(REPO / "configs" / f"{name}.py")


@pytest.mark.parametrize(
    ("name", "d_model", "d_ff", "heads", "dropout", "steps", "averaged"),
    [
        ("wmt14_ende_transformer_base", 512, 2048, 8, 0.1, 100_000, 5),
        ("wmt14_ende_transformer_big", 1024, 4096, 16, 0.3, 300_000, 20),
    ],
)
def test_the_transformer_configs_are_table_3s_rows_trained_as_the_paper_did(
    name, d_model, d_ff, heads, dropout, steps, averaged
):
    config = _config(name)
    t = config.model.transformer
    assert (t.d_model, t.d_ff, t.num_heads, t.d_k, t.d_v) == (d_model, d_ff, heads, 64, 64)
    assert (t.encoder_layers, t.decoder_layers, t.dropout_rate) == (6, 6, dropout)
    train = config.train
    assert (train.steps, train.warmup_steps, train.label_smoothing) == (steps, 4000, 0.1)
    assert (train.adam_b1, train.adam_b2, train.adam_eps) == (0.9, 0.98, 1e-9)
    assert train.dtype == "auto"  # bfloat16 on an accelerator, float32 on a CPU
    # ~25k source and ~25k target tokens a batch, counted without padding
    assert config.data.tokens_per_batch == 25_000
    # "the last 5 checkpoints, which were written at 10-minute intervals"; big: the last 20
    ckpt = config.checkpoint
    assert (ckpt.every_minutes, ckpt.every_steps, ckpt.keep) == (10.0, 0, averaged)
    assert (config.decode.beam_size, config.decode.alpha, config.decode.max_extra_length) == (
        4,
        0.6,
        50,
    )


def test_rnnsearch_50_has_the_papers_sizes_and_batch():
    config = _config("wmt14_enfr_rnnsearch50")
    r = config.model.rnnsearch
    assert (r.encoder_hidden_size, r.decoder_hidden_size) == (1000, 1000)
    assert (r.embedding_size, r.maxout_size) == (620, 500)
    assert config.data.sentences_per_batch == 80
    assert config.data.max_length == 51  # at most 50 words, plus EOS
    assert config.train.dtype == "auto"
