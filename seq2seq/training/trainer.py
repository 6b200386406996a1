"""The training loop: a short sequence of named helpers around the pure ``train_step``."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import sys
import time
from pathlib import Path

import jax
import ml_collections
import numpy as np
from tqdm import tqdm

from seq2seq import config as config_lib
from seq2seq.data.pipeline import build_training_data, padding_share
from seq2seq.models import build_model
from seq2seq.training.checkpoints import Checkpoints
from seq2seq.training.schedules import build_optimizer, build_schedule
from seq2seq.training.step import TrainState, train_step

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says where and why."""


@dataclasses.dataclass
class RunSummary:
    step: int
    final_loss: float
    seconds: float
    params: int


def model_width(config: ml_collections.ConfigDict) -> int:
    """The width that scales the Transformer schedule (d_model, or the RNN decoder's state)."""
    if config.model.name == "transformer":
        return config.model.transformer.d_model
    return config.model.rnnsearch.decoder_hidden_size


def count_params(params) -> int:
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))


def create_state(config: ml_collections.ConfigDict, source_vocab: int, target_vocab: int):
    """A fresh train state and the schedule its optimizer follows."""
    model = build_model(config, source_vocab, target_vocab, seed=config.seed)
    schedule = build_schedule(config.train, model_width(config))
    return TrainState.create(model, build_optimizer(config.train, schedule), config.seed), schedule


def save_config(config: ml_collections.ConfigDict, workdir: Path) -> None:
    """Records the config; a restart must use the same one (shape-changing keys at least)."""
    path = workdir / CONFIG_FILE
    if path.exists():
        saved = config_lib.load_saved(path)
        for key in ("model", "data.vocab_size", "data.tokenizer", "data.shared_vocab"):
            old, new = _lookup(saved, key), _lookup(config, key)
            if old != new:
                raise TrainingError(
                    f"{workdir} holds a run with a different config.{key}; use a new --workdir "
                    "or the original config"
                )
    config_lib.save(config, path)


def _lookup(config: ml_collections.ConfigDict, key: str):
    node = config
    for part in key.split("."):
        node = node[part]
    return node.to_dict() if isinstance(node, ml_collections.ConfigDict) else node


class MetricsLog:
    """Appends one JSON object per logged step to metrics.jsonl (floats at full precision)."""

    def __init__(self, path: Path):
        self.file = path.open("a")

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def summarize(step_metrics: list[dict], seconds: float, padding: list[float]) -> dict:
    """Token-weighted means of one logging interval (host values), and its throughput."""
    metrics = step_metrics
    tokens = np.array([m["target_tokens"] for m in metrics])
    weights = tokens / max(tokens.sum(), 1.0)
    return {
        "loss": float(np.dot(weights, [m["loss"] for m in metrics])),
        "nll": float(np.dot(weights, [m["nll"] for m in metrics])),
        "learning_rate": float(metrics[-1]["learning_rate"]),
        "grad_norm": float(np.mean([m["grad_norm"] for m in metrics])),
        "target_tokens_per_second": float(tokens.sum() / max(seconds, 1e-9)),
        "steps_per_second": len(metrics) / max(seconds, 1e-9),
        "padding_share": float(np.mean(padding)),
    }


def train(config: ml_collections.ConfigDict, workdir: Path) -> RunSummary:
    """Trains (or resumes) the configured model in ``workdir`` and writes a final checkpoint."""
    workdir.mkdir(parents=True, exist_ok=True)
    save_config(config, workdir)
    data = build_training_data(config, workdir)
    state, schedule = create_state(
        config, data.tokenizer.source_vocab_size, data.tokenizer.target_vocab_size
    )
    checkpoints = Checkpoints(workdir, keep=config.checkpoint.keep)
    batches = iter(data.batches)
    if checkpoints.latest_step() is not None:
        state, data_state = checkpoints.restore(state)
        batches.set_state(data_state)
        logger.info("resumed from step %d", int(state.step))
    step_fn = jax.jit(
        functools.partial(
            train_step, label_smoothing=config.train.label_smoothing, schedule=schedule
        ),
        donate_argnums=0,
    )
    params = count_params(state.params)
    logger.info("%s: %d parameters", config.model.name, params)
    log = MetricsLog(workdir / METRICS_FILE)
    try:
        state, loss, seconds = _loop(config, state, batches, step_fn, checkpoints, log)
        checkpoints.save(int(state.step), state, batches.get_state())
        checkpoints.wait()
    finally:
        log.close()
        checkpoints.close()
    return RunSummary(int(state.step), loss, seconds, params)


def _loop(config, state, batches, step_fn, checkpoints, log):
    """Steps until ``train.steps`` or the time budget; logs and checkpoints along the way."""
    train = config.train
    start_step = int(state.step)
    budget = train.time_budget_minutes * 60 or math.inf
    start = interval_start = time.monotonic()
    step_metrics, padding, loss = [], [], math.nan
    progress = tqdm(
        total=train.steps, initial=start_step, disable=not sys.stderr.isatty(), unit="step"
    )
    for step in range(start_step + 1, train.steps + 1):
        batch = next(batches)
        padding.append(padding_share(batch))
        state, metrics = step_fn(state, batch)
        step_metrics.append(metrics)
        progress.update(1)
        out_of_time = time.monotonic() - start > budget
        if step % train.log_every_steps == 0 or step == train.steps or out_of_time:
            step_metrics = jax.device_get(step_metrics)  # waits for the steps to finish
            record = summarize(step_metrics, time.monotonic() - interval_start, padding)
            loss = record["loss"]
            if not math.isfinite(loss):
                raise TrainingError(
                    f"loss is {loss} at step {step}; the last good checkpoint is step "
                    f"{checkpoints.latest_step()}; lower train.learning_rate or check the data"
                )
            log.write({"step": step, **record})
            progress.set_postfix(loss=f"{loss:.3f}")
            if progress.disable:
                logger.info("step %d: %s", step, _short(record))
            step_metrics, padding, interval_start = [], [], time.monotonic()
        if step % config.checkpoint.every_steps == 0:
            checkpoints.save(step, state, batches.get_state())
        if out_of_time:
            logger.info("time budget of %.1f minutes reached at step %d", budget / 60, step)
            break
    progress.close()
    return state, loss, time.monotonic() - start


def _short(record: dict) -> str:
    return (
        f"loss {record['loss']:.4f}, lr {record['learning_rate']:.2e}, "
        f"{record['target_tokens_per_second']:.0f} target tokens/s"
    )
