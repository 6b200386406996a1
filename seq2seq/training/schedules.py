"""Learning-rate schedules and optimizers, built with optax."""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import optax


def transformer_schedule(d_model: int, warmup_steps: int, scale: float = 1.0) -> optax.Schedule:
    """Vaswani et al. 2017, Eq. 3: ``lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``.

    ``step`` counts from 1 (the first update), so the rate is never zero or infinite.
    """

    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        return scale * d_model**-0.5 * jnp.minimum(step**-0.5, step * warmup_steps**-1.5)

    return schedule


def warmup_rsqrt_schedule(peak: float, warmup_steps: int) -> optax.Schedule:
    """Linear warm-up to ``peak``, then decay with the inverse square root of the step."""

    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        warmup = max(warmup_steps, 1)
        return peak * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))

    return schedule


def schedule_shape(train: ml_collections.ConfigDict, d_model: int) -> optax.Schedule:
    """The schedule named by ``train.schedule`` at a multiplier of 1: the learning rate of update
    ``count`` is ``train.learning_rate * shape(count)`` under every schedule.

    The multiplier is left out so that the training step can take it as an array
    (``TrainState.learning_rate``) instead of a constant of its program: runs that differ only
    in ``train.learning_rate``, as the trials of a learning-rate sweep do, then share one
    compiled step. ``d_model`` only matters for "transformer".
    """
    if train.schedule == "transformer":
        return transformer_schedule(d_model, train.warmup_steps)
    if train.schedule == "warmup_rsqrt":
        return warmup_rsqrt_schedule(1.0, train.warmup_steps)
    if train.schedule == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(
            0.0, 1.0, max(train.warmup_steps, 1), max(train.steps, 2)
        )
    return optax.constant_schedule(1.0)


def build_schedule(train: ml_collections.ConfigDict, d_model: int) -> optax.Schedule:
    """The learning rate of each update: ``train.learning_rate`` times ``schedule_shape``."""
    shape, rate = schedule_shape(train, d_model), train.learning_rate
    return lambda count: rate * shape(count)


def build_optimizer(
    train: ml_collections.ConfigDict, schedule: optax.Schedule
) -> optax.GradientTransformation:
    """Clipping (optional), then Adam (Vaswani et al.) or AdaDelta (Bahdanau et al.)."""
    if train.optimizer == "adadelta":
        optimizer = optax.adadelta(schedule, rho=train.adadelta_rho, eps=train.adadelta_eps)
    else:
        optimizer = optax.adam(schedule, b1=train.adam_b1, b2=train.adam_b2, eps=train.adam_eps)
    if train.clip_grad_norm > 0:
        optimizer = optax.chain(optax.clip_by_global_norm(train.clip_grad_norm), optimizer)
    return optimizer
