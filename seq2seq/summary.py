"""Model size and cost from a config, without training or allocating anything.

    python -m seq2seq.summary --config configs/wmt14_ende_transformer_base.py \
        --config.data.vocab_size=37000

prints one JSON line: ``params``, ``params_by_module`` and ``train_flops_per_target_token``.

The vocabulary size is taken from ``config.data.vocab_size`` (the tokenizer is not trained). The
FLOP estimate counts multiply-adds as two FLOPs in every matrix product the model runs, attention
scores and weighted sums included, for a sentence pair of ``--source_length`` and
``--target_length`` tokens; training costs three forward passes (forward, and a backward twice
as expensive). Element-wise work (softmax, layer norm, activations) is left out: it is small and
memory-bound.
"""

from __future__ import annotations

import json
from collections import defaultdict

import jax
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx
from ml_collections import config_flags

from seq2seq import cli
from seq2seq.config import validate
from seq2seq.models import build_model

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).")
_SOURCE_LENGTH = flags.DEFINE_integer("source_length", 30, "Source tokens assumed per sentence.")
_TARGET_LENGTH = flags.DEFINE_integer("target_length", 30, "Target tokens assumed per sentence.")
flags.mark_flags_as_required(["config"])

# Training = forward + backward, and the backward pass costs about twice the forward.
TRAIN_FORWARD_MULTIPLE = 3


def parameter_counts(config: ml_collections.ConfigDict) -> tuple[int, dict[str, int]]:
    """Total trainable parameters and their split by top-level module (shared ones once)."""
    vocab = config.data.vocab_size
    abstract = nnx.eval_shape(lambda: build_model(config, vocab, vocab, seed=0))
    by_module: dict[str, int] = defaultdict(int)
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(abstract, nnx.Param)):
        by_module[str(path[0].key)] += int(np.prod(leaf.shape))
    return sum(by_module.values()), dict(sorted(by_module.items()))


def transformer_forward_flops(t: ml_collections.ConfigDict, vocab: int, s: int, length: int) -> int:
    """Forward FLOPs of one sentence pair (``s`` source and ``length`` target tokens)."""
    d, h, k, e, f = t.d_model, t.num_heads, t.d_k, t.d_v, t.d_ff
    projections = 2 * d * h * (2 * k + e) + 2 * h * e * d  # W^Q, W^K, W^V and W^O, per token

    def attention(queries: int, keys: int) -> int:  # QK^T and the weighted sum of V
        return 2 * queries * keys * h * (k + e)

    ffn = 2 * 2 * d * f  # Eq. 2, per token
    encoder = t.encoder_layers * (s * (projections + ffn) + attention(s, s))
    cross = length * (2 * d * h * k + 2 * h * e * d) + s * 2 * d * h * (k + e)  # K, V: per source
    decoder = t.decoder_layers * (
        length * (projections + ffn) + attention(length, length) + cross + attention(length, s)
    )
    return encoder + decoder + length * 2 * d * vocab  # pre-softmax projection


def rnnsearch_forward_flops(r: ml_collections.ConfigDict, vocab: int, s: int, length: int) -> int:
    """Forward FLOPs of one sentence pair for RNNsearch (Appendix A)."""
    m, n, n_dec, a, l = (
        r.embedding_size,
        r.encoder_hidden_size,
        r.decoder_hidden_size,
        r.alignment_size,
        r.maxout_size,
    )
    encoder = 2 * s * (2 * m * 3 * n + 2 * n * 3 * n)  # two GRU directions
    if r.attention == "none":  # RNNencdec: c = tanh(V h_N), C c and C_o c once per sentence
        context = 2 * (2 * n) * (2 * n + 3 * n_dec + 2 * l)
        gru = length * 2 * 3 * n_dec * (m + n_dec)  # W E y, U s
        deep_output = length * (2 * (n_dec + m) * 2 * l + 2 * l * vocab)
        return encoder + context + gru + deep_output
    keys = s * 2 * (2 * n) * a  # U_a h_j, once per sentence
    attention = length * (2 * n_dec * a + s * 2 * a + s * 2 * (2 * n))  # W_a s, v_a^T tanh, c_i
    gru = length * 2 * 3 * n_dec * (m + 2 * n + n_dec)  # W E y, C c, U s
    deep_output = length * (2 * (n_dec + m + 2 * n) * 2 * l + 2 * l * vocab)
    return encoder + keys + attention + gru + deep_output


def train_flops_per_target_token(config: ml_collections.ConfigDict, s: int, length: int) -> float:
    vocab = config.data.vocab_size
    if config.model.name == "transformer":
        forward = transformer_forward_flops(config.model.transformer, vocab, s, length)
    else:
        forward = rnnsearch_forward_flops(config.model.rnnsearch, vocab, s, length)
    return TRAIN_FORWARD_MULTIPLE * forward / length


def summarize(config: ml_collections.ConfigDict, source_length: int, target_length: int) -> dict:
    params, by_module = parameter_counts(config)
    return {
        "model": config.model.name,
        "params": params,
        "params_by_module": by_module,
        "vocab_size": config.data.vocab_size,
        "train_flops_per_target_token": train_flops_per_target_token(
            config, source_length, target_length
        ),
        "assumed_source_length": source_length,
        "assumed_target_length": target_length,
    }


@cli.exit_on_error
def main(argv: list[str]) -> None:
    del argv
    config = validate(_CONFIG.value)
    print(json.dumps(summarize(config, _SOURCE_LENGTH.value, _TARGET_LENGTH.value)))


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
