"""Scaling out changes nothing but speed: 8 devices equal 1, accumulation equals one big batch."""

import json
import subprocess

import jax
import numpy as np
import pytest

from seq2seq.training.step import make_train_step
from seq2seq.training.trainer import create_state
from tests.conftest import REPO, subprocess_env, tiny_config, train_command


def _train_losses(workdir, devices: int, *overrides: str) -> list[float]:
    # 768 tokens: buckets of 16/32/48 tokens hold 48/24/16 sentences, all multiples of 8, so
    # one and eight devices see the very same global batches.
    command = train_command(
        workdir,
        "transformer",
        "--config.train.steps=8",
        "--config.train.log_every_steps=1",
        "--config.data.tokens_per_batch=768",
        "--config.data.bucket_width=16",
        "--config.model.transformer.dropout_rate=0.1",
        *overrides,
    )
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300,
        env=subprocess_env(devices),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{devices} devices" in result.stderr, "the run did not use the simulated devices"
    if "--config.mesh.fsdp=2" in overrides:
        assert " 0 arrays split" not in result.stderr, "fsdp split no parameter"
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"]


@pytest.mark.slow
def test_eight_devices_give_the_one_device_loss_curve(tmp_path):
    """A 4 x 2 mesh: the batch split 8 ways, and parameters split 2 ways (FSDP) on top."""
    one = _train_losses(tmp_path / "one", devices=1)
    eight = _train_losses(
        tmp_path / "eight", 8, "--config.mesh.fsdp=2", "--config.mesh.rules.fsdp_min_size=512"
    )
    assert len(one) == len(eight) == 8
    np.testing.assert_allclose(eight, one, rtol=2e-5)


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
