"""Training-step throughput of a config: step time, tokens/s and achieved GFLOP/s.

    python benchmarks/train_step.py --config configs/quickstart_transformer.py [--steps 20]

Times the compiled ``train_step`` alone on synthetic batches of one bucket shape, so the figure
is the model's, not the input pipeline's. FLOPs come from ``seq2seq.summary`` (the analytic
estimate the README explains); compare with the machine's matmul peak (about 175 GFLOP/s float32
on the 2-core development CPU).
"""

import json
import time

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from seq2seq import cli
from seq2seq.config import validate
from seq2seq.summary import train_flops_per_target_token
from seq2seq.training.step import make_train_step
from seq2seq.training.trainer import create_state

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_STEPS = flags.DEFINE_integer("steps", 20, "Timed steps (after one compiling step).")
_LENGTH = flags.DEFINE_integer("length", 16, "Padded sentence length of the benchmark batches.")
flags.mark_flags_as_required(["config"])


@cli.exit_on_error
def main(argv):
    del argv
    config = validate(_CONFIG.value)
    vocab, length = min(config.data.vocab_size, 1000), _LENGTH.value
    batch_size = config.data.tokens_per_batch // length
    rng = np.random.default_rng(0)
    batch = {
        "source": rng.integers(4, vocab, (batch_size, length)).astype(np.int32),
        "target": rng.integers(4, vocab, (batch_size, length)).astype(np.int32),
    }
    state, schedule = create_state(config, vocab, vocab)
    step = make_train_step(label_smoothing=config.train.label_smoothing, schedule=schedule)
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(_STEPS.value):
        state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    seconds = (time.perf_counter() - start) / _STEPS.value
    tokens = batch_size * length
    config.data.vocab_size = vocab
    flops = train_flops_per_target_token(config, length, length) * tokens
    print(json.dumps({
        "model": config.model.name,
        "batch": [batch_size, length],
        "step_seconds": seconds,
        "target_tokens_per_second": tokens / seconds,
        "gflops_per_second": flops / seconds / 1e9,
        "device": str(jax.devices()[0].device_kind),
    }))  # fmt: skip


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
