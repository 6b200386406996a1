"""Learning-rate schedules and optimizers, built with optax."""

from __future__ import annotations

import dataclasses
import functools

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


@dataclasses.dataclass(frozen=True)
class ScheduleShape:
    """A schedule at a multiplier of 1, as a value: shapes of equal settings compare equal.

    Runs of one process whose schedules are equal then get one traced training step and one
    optimizer (``build_optimizer``), so a comparison's later runs reuse what its first run
    compiled. Each field a schedule does not read is 0, so that it cannot tell shapes apart.
    """

    name: str  # a ``train.schedule``
    warmup_steps: int = 0
    d_model: int = 0  # "transformer" only
    steps: int = 0  # "warmup_cosine" only

    def __call__(self, count):
        if self.name == "transformer":
            return transformer_schedule(self.d_model, self.warmup_steps)(count)
        if self.name == "warmup_rsqrt":
            return warmup_rsqrt_schedule(1.0, self.warmup_steps)(count)
        if self.name == "warmup_cosine":
            return optax.warmup_cosine_decay_schedule(
                0.0, 1.0, max(self.warmup_steps, 1), max(self.steps, 2)
            )(count)
        return optax.constant_schedule(1.0)(count)


def schedule_shape(train: ml_collections.ConfigDict, d_model: int) -> ScheduleShape:
    """The schedule named by ``train.schedule`` at a multiplier of 1: the learning rate of update
    ``count`` is ``train.learning_rate * shape(count)`` under every schedule.

    The multiplier is left out so that the training step can take it as an array
    (``TrainState.learning_rate``) instead of a constant of its program: runs that differ only
    in ``train.learning_rate``, as the trials of a learning-rate sweep do, then share one
    compiled step. ``d_model`` only matters for "transformer".
    """
    shaped = ("transformer", "warmup_rsqrt", "warmup_cosine")
    name = train.schedule if train.schedule in shaped else "constant"
    return ScheduleShape(
        name,
        warmup_steps=0 if name == "constant" else train.warmup_steps,
        d_model=d_model if name == "transformer" else 0,
        steps=train.steps if name == "warmup_cosine" else 0,
    )


def build_schedule(train: ml_collections.ConfigDict, d_model: int) -> optax.Schedule:
    """The learning rate of each update: ``train.learning_rate`` times ``schedule_shape``."""
    shape, rate = schedule_shape(train, d_model), train.learning_rate
    return lambda count: rate * shape(count)


def build_optimizer(
    train: ml_collections.ConfigDict, schedule: optax.Schedule
) -> optax.GradientTransformation:
    """Clipping (optional), then Adam (Vaswani et al.) or AdaDelta (Bahdanau et al.).

    Equal settings and an equal ``schedule`` (a ``ScheduleShape``) give the same object, so the
    train states of two runs have one structure and share their traced step.
    """
    settings = (train.optimizer, train.clip_grad_norm)
    if train.optimizer == "adadelta":
        settings += (train.adadelta_rho, train.adadelta_eps)
    else:
        settings += (train.adam_b1, train.adam_b2, train.adam_eps)
    return _optimizer(settings, schedule)


@functools.lru_cache(maxsize=64)
def _optimizer(settings: tuple, schedule: optax.Schedule) -> optax.GradientTransformation:
    name, clip, *hyper = settings
    if name == "adadelta":
        rho, eps = hyper
        optimizer = optax.adadelta(schedule, rho=rho, eps=eps)
    else:
        b1, b2, eps = hyper
        optimizer = optax.adam(schedule, b1=b1, b2=b2, eps=eps)
    if clip > 0:
        optimizer = optax.chain(optax.clip_by_global_norm(clip), optimizer)
    return optimizer
