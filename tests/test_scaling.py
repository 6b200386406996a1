"""Gradient accumulation equals one big batch. (That 8 devices equal 1 is tested by
tests/test_mesh.py, the step on every mesh, and tests/test_same_run_on_any_mesh.py, the trainer
on a (2, 2, 2) mesh.)"""

import jax
import numpy as np
import pytest

from seq2seq.training.step import make_train_step
from seq2seq.training.trainer import create_state
from tests.conftest import tiny_config


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_gradient_accumulation_equals_one_large_batch(model_name):
    config = tiny_config(model_name)
    config.model.transformer.dropout_rate = 0.0
    config.train.schedule = "constant"
    config.train.learning_rate = 1e-2
    rng = np.random.default_rng(0)
    source = rng.integers(4, 30, (8, 12)).astype(np.int32)
    target = rng.integers(4, 30, (8, 10)).astype(np.int32)
    # Unequal real lengths, so per-micro-batch means would weight tokens unequally.
    source[::3, 5:] = 0
    target[1::2, 4:] = 0
    batch = {"source": source, "target": target}
    results = []
    for accumulate in (1, 4):
        state, schedule = create_state(config, 30, 30)
        step = make_train_step(label_smoothing=0.1, schedule=schedule, grad_accum_steps=accumulate)
        new_state, metrics = step(state, batch)
        results.append((new_state, metrics))
    (big, big_metrics), (accumulated, accumulated_metrics) = results
    np.testing.assert_allclose(accumulated_metrics["loss"], big_metrics["loss"], rtol=1e-5)
    np.testing.assert_allclose(
        accumulated_metrics["grad_norm"], big_metrics["grad_norm"], rtol=1e-4
    )
    for a, b in zip(jax.tree.leaves(accumulated.params), jax.tree.leaves(big.params), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
