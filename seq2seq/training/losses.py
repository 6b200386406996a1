"""Token-level cross-entropy with label smoothing (Szegedy et al. 2016; Vaswani et al. 5.4).

``smoothed_cross_entropy`` reads logits; ``projected_cross_entropy``, what training uses, takes
the decoder's features and the model's output layer and computes the same sums without ever
holding the [B, T, V] logits (their gradient's transposition and its trips through memory
were a sixth of bench_small's step).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from jax.custom_derivatives import SymbolicZero

from seq2seq.models.base import PAD_ID, OutputLayer


def smoothed_cross_entropy(
    logits: jax.Array, targets: jax.Array, label_smoothing: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Summed losses over the real (non-padding) target tokens.

    The smoothed target puts ``1 - epsilon`` on the reference token and spreads ``epsilon``
    uniformly over the vocabulary. The unsmoothed negative log-likelihood is returned too: it is
    what perplexity is computed from.

    Args:
      logits: [B, T, V] float32.
      targets: [B, T] token ids, 0 at padding.
      label_smoothing: epsilon_ls.

    Returns:
      (smoothed loss sum, negative log-likelihood sum, number of real tokens).
    """
    vocab_size = logits.shape[-1]
    one_hot = jax.nn.one_hot(targets, vocab_size, dtype=jnp.float32)
    smoothed = optax.smooth_labels(one_hot, label_smoothing)
    weights = (targets != PAD_ID).astype(jnp.float32)
    loss = optax.softmax_cross_entropy(logits, smoothed) * weights
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets) * weights
    return loss.sum(), nll.sum(), weights.sum()


# Tokens per chunk of the projected loss: a chunk's logits ([1024, V], 32 MB at V = 8000) stay in
# the last-level cache while the loss and both gradient products read them, and every chunk adds
# its weight gradient ([V, D]) to the sum: fewer, larger chunks mean fewer such sums, as long
# as a chunk still fits the cache (the sizes measured: docs/benchmarks.md).
CHUNK_TOKENS = 1024


def chunk_tokens(setting: int) -> int | None:
    """``train.loss_chunk_tokens`` for ``projected_cross_entropy``: N tokens a chunk, 0 the whole
    batch (None), -1 ("auto") ``CHUNK_TOKENS`` on a CPU and the whole batch elsewhere, where
    memory is plentiful and every chunk is one more pass over the [V, D] weight gradient."""
    if setting > 0:
        return setting
    if setting == 0 or jax.default_backend() != "cpu":
        return None
    return CHUNK_TOKENS


def projected_cross_entropy(
    features: jax.Array,
    output: OutputLayer,
    targets: jax.Array,
    label_smoothing: float,
    chunk_tokens: int | None = CHUNK_TOKENS,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``smoothed_cross_entropy(output(features), targets, label_smoothing)``, a chunk at a time.

    The [B, T, V] logits are never held whole: the vocabulary projection, the softmax and, when
    differentiated, both of the projection's gradient products (features and weights) are done
    for ``chunk_tokens`` tokens at a time, while that chunk's logits are still in cache. Chunks
    run along time, so a batch split over devices stays split.

    Gradients flow from the smoothed loss sum only; the NLL sum is a metric (differentiating it
    raises).

    Args:
      features: [B, T, D], what ``output`` projects (``model(..., project=False)``).
      output: the model's ``output_layer()``.
      targets: [B, T] token ids, 0 at padding.
      label_smoothing: epsilon_ls.
      chunk_tokens: tokens per chunk (rounded to whole time steps of the batch); None: the
        whole batch in one chunk.

    Returns:
      (smoothed loss sum, negative log-likelihood sum, number of real tokens).
    """
    batch, length, width = features.shape
    steps = length if chunk_tokens is None else max(1, min(length, chunk_tokens // batch))
    padding = -length % steps
    features = jnp.pad(features, ((0, 0), (0, padding), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, padding)))  # padded tokens weigh nothing
    chunks = (length + padding) // steps
    features = features.reshape(batch, chunks, steps, width).swapaxes(0, 1)  # [C, B, steps, D]
    targets = targets.reshape(batch, chunks, steps).swapaxes(0, 1)  # [C, B, steps]
    bias = None if output.bias is None else output.bias.astype(jnp.float32)
    loss_sum, nll_sum = _chunked_loss(
        features,
        output.weights,
        bias,
        targets,
        label_smoothing,
        output.vocab_first,
        jnp.dtype(output.dtype),
    )
    return loss_sum, nll_sum, (targets != PAD_ID).sum().astype(jnp.float32)


def _product(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a @ b`` in the operands' dtype, accumulated and returned in float32."""
    return jnp.matmul(a, b, preferred_element_type=jnp.float32)


def _chunk_loss(features, output: OutputLayer, targets, epsilon):
    """One chunk: losses, NLLs (both [N], 0 at padding) and d(loss sum)/d(logits) [N, V].

    ``features`` [N, D] are projected by ``output``, the model's own projection (float32
    logits). The smoothed target is ``(1 - epsilon) one_hot + epsilon / V``, so the loss is
    ``(1 - epsilon) nll + epsilon (logsumexp - mean logit)`` and its gradient with respect to the
    logits ``softmax - smoothed target``.
    """
    logits = output(features)  # [N, V] float32
    vocab_size = logits.shape[-1]
    log_normaliser = jax.nn.logsumexp(logits, axis=-1)  # [N]
    target_logits = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    mask = (targets != PAD_ID).astype(jnp.float32)
    nll = (log_normaliser - target_logits) * mask
    smoothing = epsilon * (log_normaliser - jnp.mean(logits, axis=-1))
    loss = (1.0 - epsilon) * nll + smoothing * mask
    smoothed_target = (1.0 - epsilon) * jax.nn.one_hot(targets, vocab_size) + epsilon / vocab_size
    logit_gradient = (jnp.exp(logits - log_normaliser[:, None]) - smoothed_target) * mask[:, None]
    return loss, nll, logit_gradient


def _chunked_loss_forward(features, weights, bias, targets, epsilon, vocab_first, dtype, gradients):
    """Loss and NLL sums over all chunks and, if ``gradients``, d(loss sum)/d(each input).

    The products run in ``dtype``; the sums and gradients accumulate in float32 and come back in
    their inputs' dtypes.
    """
    chunks, batch, steps, width = features.shape
    compute_weights = weights.astype(dtype)  # cast once, not once per chunk
    output = OutputLayer(compute_weights, bias, vocab_first, dtype)

    def body(totals, chunk):
        chunk_features, chunk_targets = chunk
        rows = chunk_features.reshape(batch * steps, width)  # [N, D]
        loss, nll, logit_gradient = _chunk_loss(rows, output, chunk_targets.reshape(-1), epsilon)
        loss_sum, nll_sum, weights_gradient, bias_gradient = totals
        totals = (loss_sum + loss.sum(), nll_sum + nll.sum(), weights_gradient, bias_gradient)
        if not gradients:
            return totals, None
        compute_gradient = logit_gradient.astype(dtype)
        if vocab_first:  # logits = features @ W^T, W [V, D]
            features_gradient = _product(compute_gradient, compute_weights)
            weights_gradient = weights_gradient + _product(compute_gradient.T, rows)
        else:  # logits = features @ W, W [D, V]
            features_gradient = _product(compute_gradient, compute_weights.T)
            weights_gradient = weights_gradient + _product(rows.T, compute_gradient)
        if bias is not None:
            bias_gradient = bias_gradient + logit_gradient.sum(axis=0)
        totals = (*totals[:2], weights_gradient, bias_gradient)
        return totals, features_gradient.astype(features.dtype).reshape(batch, steps, width)

    zero = jnp.zeros((), jnp.float32)
    start = (
        zero,
        zero,
        jnp.zeros(weights.shape, jnp.float32),
        None if bias is None else jnp.zeros_like(bias),
    )
    totals, features_gradient = jax.lax.scan(body, start, (features.astype(dtype), targets))
    loss_sum, nll_sum, weights_gradient, bias_gradient = totals
    totals = (loss_sum, nll_sum, weights_gradient.astype(weights.dtype), bias_gradient)
    return totals, features_gradient


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _chunked_loss(features, weights, bias, targets, epsilon, vocab_first, dtype):
    (loss_sum, nll_sum, _, _), _ = _chunked_loss_forward(
        features, weights, bias, targets, epsilon, vocab_first, dtype, gradients=False
    )
    return loss_sum, nll_sum


def _chunked_loss_fwd(features, weights, bias, targets, epsilon, vocab_first, dtype):
    totals, features_gradient = _chunked_loss_forward(
        features.value,
        weights.value,
        None if bias is None else bias.value,
        targets.value,
        epsilon,
        vocab_first,
        dtype,
        gradients=True,
    )
    loss_sum, nll_sum, weights_gradient, bias_gradient = totals
    return (loss_sum, nll_sum), (features_gradient, weights_gradient, bias_gradient)


def _chunked_loss_bwd(epsilon, vocab_first, dtype, residuals, cotangents):
    loss_cotangent, nll_cotangent = cotangents
    if not isinstance(nll_cotangent, SymbolicZero):
        raise NotImplementedError("projected_cross_entropy differentiates the loss sum only")
    features_gradient, weights_gradient, bias_gradient = residuals
    if isinstance(loss_cotangent, SymbolicZero):
        loss_cotangent = 0.0

    def scale(gradient):
        return None if gradient is None else (loss_cotangent * gradient).astype(gradient.dtype)

    return scale(features_gradient), scale(weights_gradient), scale(bias_gradient), None


_chunked_loss.defvjp(_chunked_loss_fwd, _chunked_loss_bwd, symbolic_zeros=True)
