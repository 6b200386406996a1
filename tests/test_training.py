"""The training step learns, and the schedule is the paper's formula."""

import functools

import jax
import numpy as np
import pytest

from seq2seq.training.schedules import transformer_schedule
from seq2seq.training.step import train_step
from seq2seq.training.trainer import create_state
from tests.conftest import tiny_config


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_training_lowers_the_loss(model_name):
    config = tiny_config(model_name)
    config.train.schedule = "constant"
    config.train.learning_rate = 3e-3
    state, schedule = create_state(config, 30, 30)
    step = jax.jit(functools.partial(train_step, label_smoothing=0.1, schedule=schedule))
    rng = np.random.default_rng(0)
    batch = {
        "source": rng.integers(4, 30, (8, 10)).astype(np.int32),
        "target": rng.integers(4, 30, (8, 10)).astype(np.int32),
    }
    losses = []
    for _ in range(30):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.7 * losses[0], losses
    assert int(state.step) == 30


@pytest.mark.parametrize("step", [1, 100, 4000, 4001, 100_000])
def test_transformer_schedule_is_equation_3(step):
    d_model, warmup = 512, 4000
    expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    # optax counts updates from 0; the paper's step_num counts from 1.
    np.testing.assert_allclose(transformer_schedule(d_model, warmup)(step - 1), expected, rtol=1e-6)
