"""The training step learns, and the schedule is the paper's formula."""

import jax
import numpy as np
import pytest

from seq2seq.training.schedules import transformer_schedule
from seq2seq.training.step import make_train_step
from seq2seq.training.trainer import create_state
from tests.conftest import tiny_config


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_training_lowers_the_loss(model_name):
    config = tiny_config(model_name)
    config.train.schedule = "constant"
    config.train.learning_rate = 1e-2
    state, schedule = create_state(config, 30, 30)
    step = make_train_step(label_smoothing=0.1, schedule=schedule)
    rng = np.random.default_rng(0)
    batch = {
        "source": rng.integers(4, 30, (8, 10)).astype(np.int32),
        "target": rng.integers(4, 30, (8, 10)).astype(np.int32),
    }
    losses = []
    for _ in range(60):  # RNNsearch starts slowly from the paper's N(0, 0.01^2) weights
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.7 * losses[0], losses
    assert int(state.step) == 60


@pytest.mark.parametrize("step", [1, 100, 4000, 4001, 100_000])
def test_transformer_schedule_is_equation_3(step):
    d_model, warmup = 512, 4000
    expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    # optax counts updates from 0; the paper's step_num counts from 1.
    np.testing.assert_allclose(transformer_schedule(d_model, warmup)(step - 1), expected, rtol=1e-6)


@pytest.mark.parametrize("model_name", ["transformer", "rnnsearch"])
def test_bfloat16_computes_in_bfloat16_but_keeps_float32_parameters_and_loss(model_name):
    config = tiny_config(model_name)
    config.train.dtype = "bfloat16"
    config.train.schedule = "constant"
    config.train.learning_rate = 1e-2
    state, schedule = create_state(config, 30, 30)
    rng = np.random.default_rng(0)
    batch = {
        "source": rng.integers(4, 30, (8, 10)).astype(np.int32),
        "target": rng.integers(4, 30, (8, 10)).astype(np.int32),
    }
    lowered = make_train_step(label_smoothing=0.1, schedule=schedule).lower(state, batch)
    assert "bf16" in lowered.as_text(), "no bfloat16 arithmetic in the compiled step"
    step = lowered.compile()
    losses = []
    for _ in range(60):
        state, metrics = step(state, batch)
        losses.append(metrics["loss"])
    assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(state.params))
    assert losses[-1].dtype == np.float32
    assert float(losses[-1]) < 0.8 * float(losses[0])
