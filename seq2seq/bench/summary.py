"""Model size and cost from a config, without training or allocating anything.

    python -m seq2seq.bench.summary --config configs/wmt14_ende_transformer_base.py \\
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

if __name__ == "__main__":  # first, before JAX loads (see seq2seq/cli.py)
    from seq2seq import cli

    cli.start()

import json

import ml_collections
from absl import flags
from ml_collections import config_flags

from seq2seq import cli
from seq2seq.config import validate
from seq2seq.models import build_model, count_params, train_flops


def parameter_counts(config: ml_collections.ConfigDict) -> tuple[int, dict[str, int]]:
    """Total trainable parameters and their split by top-level module (shared ones once)."""
    from flax import nnx  # here, not on import: a refused command line never waits for JAX

    vocab = config.data.vocab_size
    abstract = nnx.eval_shape(lambda: build_model(config, vocab, vocab, seed=0))
    params = nnx.state(abstract, nnx.Param)
    by_module = {str(name): count_params(module) for name, module in params.items()}
    return sum(by_module.values()), dict(sorted(by_module.items()))


def train_flops_per_target_token(config: ml_collections.ConfigDict, s: int, length: int) -> float:
    """Training FLOPs of one sentence pair of these lengths, per target token."""
    return float(train_flops(config, config.data.vocab_size, s, length)) / length


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


def run() -> None:
    """``python -m seq2seq.bench.summary``: flags are defined here, never on import."""
    config_flag = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
    source_length = flags.DEFINE_integer(
        "source_length", 30, "Source tokens assumed per pair.", lower_bound=1
    )
    target_length = flags.DEFINE_integer(
        "target_length", 30, "Target tokens assumed per pair.", lower_bound=1
    )
    flags.mark_flags_as_required(["config"])

    def main(argv: list[str]) -> None:
        del argv
        config = validate(config_flag.value)
        print(json.dumps(summarize(config, source_length.value, target_length.value)))

    cli.run(main)


if __name__ == "__main__":
    run()
