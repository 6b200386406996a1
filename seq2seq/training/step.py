"""The pure training step: ``train_step(state, batch) -> (state, metrics)``.

No I/O and no hidden state: dropout keys come from ``fold_in(state.rng, state.step)``, so the
same state and batch always give the same result, which is what makes resume exact.
``make_train_step`` is the one place that compiles it (``jax.jit``, with the mesh's shardings
when given): the trainer and the benchmarks build theirs from a config through
``configured_train_step``, the tests directly.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx, struct

from seq2seq.models import train_flops
from seq2seq.models.base import PAD_ID, Dropout, shift_right
from seq2seq.training import losses, sharding
from seq2seq.training.losses import CHUNK_TOKENS, projected_cross_entropy
from seq2seq.training.sharding import AxisRules

Batch = dict[str, jax.Array]
RowFlops = Callable[[jax.Array, jax.Array], jax.Array]  # real (source, target) lengths -> FLOPs


class TrainState(struct.PyTreeNode):
    """Everything a training run needs to continue: step, parameters, optimizer state, RNG."""

    step: jax.Array  # int32 scalar, updates applied so far
    params: nnx.State  # the model's parameters
    opt_state: optax.OptState
    rng: jax.Array  # raw uint32 PRNG key (saved as a plain array)
    # float32 scalar, train.learning_rate: what the optimizer's updates, made at a learning rate
    # of ``schedule_shape``, are multiplied by. An array rather than a constant of the compiled
    # step, so runs that differ only in it share one program; rebuilt from the config, not saved.
    learning_rate: jax.Array
    graphdef: Any = struct.field(pytree_node=False)  # the model's structure, static
    optimizer: optax.GradientTransformation = struct.field(pytree_node=False)

    @classmethod
    def create(
        cls,
        model: nnx.Module,
        optimizer: optax.GradientTransformation,
        seed: int,
        learning_rate: float = 1.0,
    ) -> TrainState:
        """``optimizer`` follows the schedule's shape; ``learning_rate`` multiplies its updates."""
        graphdef, params = nnx.split(model)
        return cls(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=optimizer.init(params),
            rng=jax.random.PRNGKey(seed),
            learning_rate=jnp.asarray(learning_rate, jnp.float32),
            graphdef=graphdef,
            optimizer=optimizer,
        )

    def model(self) -> nnx.Module:
        return nnx.merge(self.graphdef, self.params)

    @classmethod
    def for_evaluation(cls, graphdef, params: nnx.State) -> TrainState:
        """A state that holds only what evaluation reads: the model (no optimizer, step, RNG)."""
        return cls(
            step=None,
            params=params,
            opt_state=None,
            rng=None,
            learning_rate=None,
            graphdef=graphdef,
            optimizer=None,
        )


def _batch_loss(
    model,
    batch: Batch,
    label_smoothing: float,
    dropout: Dropout | None,
    chunk_tokens: int | None = CHUNK_TOKENS,
):
    """Teacher-forced loss sums of one batch (packed batches carry segment ids).

    The model stops before its output layer; the loss projects its features a chunk of tokens
    at a time (``projected_cross_entropy``), so the batch's [B, T, V] logits are never held.
    """
    target_segments = batch.get("target_segments")
    features, _ = model(
        batch["source"],
        shift_right(batch["target"], target_segments),
        source_segments=batch.get("source_segments"),
        target_segments=target_segments,
        dropout=dropout,
        project=False,
    )
    return projected_cross_entropy(
        features, model.output_layer(), batch["target"], label_smoothing, chunk_tokens
    )


def _gradients(
    state: TrainState,
    batch: Batch,
    label_smoothing: float,
    dropout_key: jax.Array,
    chunk_tokens: int | None,
):
    """Gradients of the *summed* smoothed loss, and the sums the metrics need."""

    def loss_fn(params):
        model = nnx.merge(state.graphdef, params)
        loss_sum, nll_sum, tokens = _batch_loss(
            model, batch, label_smoothing, Dropout(dropout_key), chunk_tokens
        )
        return loss_sum, (nll_sum, tokens)

    (loss_sum, (nll_sum, tokens)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    return grads, loss_sum, nll_sum, tokens


def _accumulated_gradients(
    state: TrainState,
    batch: Batch,
    label_smoothing: float,
    dropout_key: jax.Array,
    chunk_tokens: int | None,
    steps: int,
):
    """Sums ``_gradients`` over ``steps`` micro-batches (rows i, i + steps, i + 2 steps, ...).

    Summing the summed losses and dividing once by all the tokens gives the gradient of one
    large batch, whatever the micro-batches' token counts. Taking every ``steps``-th row keeps
    each micro-batch split evenly over the data-parallel devices.
    """

    def split(x):  # [B, ...] -> [steps, B / steps, ...]
        return jnp.swapaxes(x.reshape(x.shape[0] // steps, steps, *x.shape[1:]), 0, 1)

    micro_batches = jax.tree.map(split, batch)

    def body(totals, inputs):
        index, micro_batch = inputs
        key = jax.random.fold_in(dropout_key, index)
        results = _gradients(state, micro_batch, label_smoothing, key, chunk_tokens)
        return jax.tree.map(jnp.add, totals, results), None

    zeros = (
        jax.tree.map(jnp.zeros_like, state.params),
        jnp.zeros((), jnp.float32),
        jnp.zeros((), jnp.float32),
        jnp.zeros((), jnp.float32),
    )
    totals, _ = jax.lax.scan(body, zeros, (jnp.arange(steps), micro_batches))
    return totals


def train_step(
    state: TrainState,
    batch: Batch,
    *,
    label_smoothing: float,
    schedule: optax.Schedule,
    grad_accum_steps: int = 1,
    loss_chunk_tokens: int | None = CHUNK_TOKENS,
    flops: RowFlops | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer update on the per-token mean of the smoothed loss.

    ``schedule`` is the learning rate's shape (``schedule_shape``), which the optimizer in
    ``state`` follows; its updates are then multiplied by ``state.learning_rate``. Adam's and
    AdaDelta's updates end with the learning rate as a factor, so this is the update at
    ``state.learning_rate * schedule(step)``.

    With ``grad_accum_steps > 1`` the batch is processed in that many micro-batches whose
    gradients are summed before the single update: the same update as the whole batch at once,
    in a fraction of the activation memory. ``loss_chunk_tokens``: see
    ``projected_cross_entropy`` (the update does not depend on it). With ``flops``, the metrics
    count the batch's training FLOPs too.

    The metrics describe the whole global batch, whichever process reads them: the token counts
    and ``padding_share`` of every row, and ``train_flops`` of every row from its real lengths
    (a host's own rows would count only its share of a multi-process step).
    """
    dropout_key = jax.random.fold_in(state.rng, state.step)
    if grad_accum_steps == 1:
        totals = _gradients(state, batch, label_smoothing, dropout_key, loss_chunk_tokens)
    else:
        totals = _accumulated_gradients(
            state, batch, label_smoothing, dropout_key, loss_chunk_tokens, grad_accum_steps
        )
    grad_sums, loss_sum, nll_sum, tokens = totals
    tokens = jnp.maximum(tokens, 1.0)
    grads = jax.tree.map(lambda g: g / tokens, grad_sums)
    updates, opt_state = state.optimizer.update(grads, state.opt_state, state.params)
    updates = jax.tree.map(lambda u: u * state.learning_rate.astype(u.dtype), updates)
    params = optax.apply_updates(state.params, updates)
    source_lengths, target_lengths = real_lengths(batch)
    real = jnp.sum(source_lengths) + jnp.sum(target_lengths)
    metrics = {
        "loss": loss_sum / tokens,
        "nll": nll_sum / tokens,
        "target_tokens": tokens,
        "source_tokens": jnp.sum(source_lengths),
        "padding_share": 1.0 - real / (batch["source"].size + batch["target"].size),
        "grad_norm": optax.tree.norm(grads),
        "learning_rate": state.learning_rate * schedule(state.step),
        "step": state.step + 1,  # the update this step makes
    }
    if flops is not None:  # empty rows (padding up to a multiple of the devices) cost nothing
        row_flops = flops(source_lengths, target_lengths)
        metrics["train_flops"] = jnp.sum(jnp.where(target_lengths > 0, row_flops, 0.0))
    new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
    return new_state, metrics


def real_lengths(batch: Batch) -> tuple[jax.Array, jax.Array]:
    """[B] float32 real (non-padding) source and target tokens of each row, packed or not."""

    def side(name: str) -> jax.Array:
        tokens = batch.get(f"{name}_segments", batch[name])  # segment ids are 0 at padding too
        return jnp.sum(tokens != PAD_ID, axis=1, dtype=jnp.float32)

    return side("source"), side("target")


# The steps already made in this process, by their settings: a comparison or a sweep trains
# many runs in one process, and a run whose settings equal an earlier one's reuses its step,
# which JAX has then traced and compiled for each batch shape already.
_STEPS: collections.OrderedDict = collections.OrderedDict()
KEPT_STEPS = 16


def make_train_step(
    *,
    label_smoothing: float,
    schedule: optax.Schedule,
    grad_accum_steps: int = 1,
    state_sharding: Any = None,
    batch_sharding: Any = None,
    metrics_sharding: Any = None,
    axis_rules: AxisRules | None = None,
    loss_chunk_tokens: int | None = CHUNK_TOKENS,
    flops: RowFlops | None = None,
) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, jax.Array]]]:
    """``train_step`` compiled with ``jax.jit``, its input state donated (updated in place).

    The shardings (see ``seq2seq.training.sharding``) place the state, the batch and the
    metrics on a mesh; left out, jit places everything on the default device. ``axis_rules``
    lays the models' activations out on that mesh by their logical names.
    ``loss_chunk_tokens``: see ``projected_cross_entropy``. A batch split
    over several devices takes the loss in one chunk: chunked, the output layer's weight
    gradient would be summed across devices once per chunk, which costs more than the chunks save.

    Settings equal to those of one of the last ``KEPT_STEPS`` calls return that call's function
    (a ``ScheduleShape`` and ``configured_flops`` compare by value, other callables by
    identity), so JAX traces and compiles it once per batch shape for all those runs.
    """
    settings = {
        "label_smoothing": label_smoothing,
        "schedule": schedule,
        "grad_accum_steps": grad_accum_steps,
        "state_sharding": state_sharding,
        "batch_sharding": batch_sharding,
        "metrics_sharding": metrics_sharding,
        "axis_rules": axis_rules,
        "loss_chunk_tokens": loss_chunk_tokens,
        "flops": flops,
    }
    key = _settings_key(settings)
    if key is None:  # a setting that cannot be compared: nothing to share
        return _jitted_train_step(**settings)
    if key in _STEPS:
        _STEPS.move_to_end(key)
    else:
        _STEPS[key] = _jitted_train_step(**settings)
        if len(_STEPS) > KEPT_STEPS:
            _STEPS.popitem(last=False)
    return _STEPS[key]


def _settings_key(settings: dict[str, Any]) -> tuple | None:
    """``settings`` as one hashable value (each pytree as its structure and leaves), or None
    where one of them cannot be hashed."""
    key = []
    for name, value in settings.items():
        leaves, structure = jax.tree.flatten(value)
        key.append((name, structure, tuple(leaves)))
    try:
        hash(tuple(key))
    except TypeError:
        return None
    return tuple(key)


def _jitted_train_step(
    *,
    label_smoothing,
    schedule,
    grad_accum_steps,
    state_sharding,
    batch_sharding,
    metrics_sharding,
    axis_rules,
    loss_chunk_tokens,
    flops,
):
    split = batch_sharding is not None and len(batch_sharding.device_set) > 1
    step = functools.partial(
        train_step,
        label_smoothing=label_smoothing,
        schedule=schedule,
        grad_accum_steps=grad_accum_steps,
        loss_chunk_tokens=None if split else loss_chunk_tokens,
        flops=flops,
    )
    if state_sharding is None:
        return jax.jit(step, donate_argnums=0)
    if axis_rules is not None:
        step = _traced_on_mesh(step, batch_sharding.mesh, axis_rules)
    return jax.jit(
        step,
        in_shardings=(state_sharding, batch_sharding),
        out_shardings=(state_sharding, metrics_sharding),
        donate_argnums=0,
    )


def configured_train_step(
    config: ml_collections.ConfigDict,
    schedule: optax.Schedule,
    mesh: jax.sharding.Mesh,
    axis_rules: AxisRules,
    state_sharding: Any,
    target_vocab_size: int,
) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, jax.Array]]]:
    """The step ``config.train`` describes, on ``mesh``: the one the trainer runs and
    ``bench train`` measures. Its metrics count the batch's training FLOPs (``train_flops``)."""
    return make_train_step(
        label_smoothing=config.train.label_smoothing,
        schedule=schedule,
        grad_accum_steps=config.train.grad_accum_steps,
        state_sharding=state_sharding,
        batch_sharding=sharding.batch_sharding(mesh, axis_rules),
        metrics_sharding=sharding.replicated(mesh),
        axis_rules=axis_rules,
        loss_chunk_tokens=losses.chunk_tokens(config.train.loss_chunk_tokens),
        flops=configured_flops(config, target_vocab_size),
    )


@dataclasses.dataclass(frozen=True)
class ConfiguredFlops:
    """``train_flops`` of one model section and vocabulary, as a value (equal for equal models)."""

    model: ml_collections.FrozenConfigDict  # {"model": config.model}
    vocab: int

    def __call__(self, source_lengths: jax.Array, target_lengths: jax.Array) -> jax.Array:
        return train_flops(self.model, self.vocab, source_lengths, target_lengths)


def configured_flops(config: ml_collections.ConfigDict, vocab: int) -> ConfiguredFlops:
    """The ``RowFlops`` of ``config``'s model with a target vocabulary of ``vocab``."""
    return ConfiguredFlops(ml_collections.FrozenConfigDict({"model": config.model}), vocab)


def _traced_on_mesh(function: Callable, mesh, axis_rules: AxisRules) -> Callable:
    """``function`` traced inside ``sharding.on_mesh`` (whoever calls or lowers it)."""

    @functools.wraps(function)
    def on_mesh(*args):
        with sharding.on_mesh(mesh, axis_rules):
            return function(*args)

    return on_mesh


def eval_step(state: TrainState, batch: Batch) -> dict[str, jax.Array]:
    """Summed unsmoothed NLL and token count of one batch (perplexity = exp(sum / tokens))."""
    _, nll_sum, tokens = _batch_loss(state.model(), batch, 0.0, None)
    return {"nll_sum": nll_sum, "target_tokens": tokens}
